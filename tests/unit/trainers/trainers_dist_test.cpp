// The trainers' TRL parity on 2 ranks (mpirun -np 2, label `dist`), under each
// distributed strategy: the first 3 optimizer steps of DPO, CPO/ORPO, KTO and
// the reward trainer (loss, grad norm, tokens, every metric summed over ranks
// as rank 0 logs them) equal TRL's within 1e-4, on the same global batches as
// the single-process tests (test_trainers), each rank taking its consecutive
// half at per_device_train_batch_size = global / 2.
//
// Where TRL's loss is rank-invariant (DPO, reward: TRL on 2 processes equals
// TRL on 1 within 1e-5, scripts/fixtures/dist_fixtures.py --check) the
// single-process fixtures are the reference. KTO (its KL estimate is a mean
// over processes of per-process batch means) and CPO/ORPO (their NLL term is a
// token mean inside each process's batch) are checked against TRL run on 2
// processes (scripts/fixtures/dist_fixtures.py).
//
// A strategy the engine still refuses ("not built yet") is skipped with a
// warning; once the engine builds it, it runs here for real.
#include "catch_torch.hpp"

#include <cstdio>
#include <functional>
#include <tuple>

#include "core/error.hpp"
#include "dist/comm/make_communicator.hpp"
#include "dist/strategy/strategy.hpp"
#include "support/engine_probe.hpp"
#include "support.hpp"
#include "online_fixture.hpp"
#include "trainer_fixture.hpp"

using namespace trlx;
namespace fs = std::filesystem;

namespace {

// The accelerate presets the parity runs under; one line each.
const std::vector<std::string> kStrategies = {
    "multi_gpu",  // DDP
    "zero2",      // ZeRO-2 (optimizer state and gradients sharded)
    "zero3",      // ZeRO-3 (parameters sharded too)
    "fsdp",       // FSDP (full shard)
};

std::shared_ptr<dist::Communicator> world() {
  static std::shared_ptr<dist::Communicator> c = dist::make_mpi_communicator(std::chrono::seconds(120));
  return c;
}

void require_two_ranks() {
  INFO("run under mpirun -np 2: the fixtures' global batches (4 pairs, 2 reward pairs) and the "
       "2-process TRL fixtures are for 2 ranks");
  REQUIRE(world()->world_size() == 2);
}

void report(const std::string& what, const std::string& preset, const test::Comparison& cmp) {
  if (world()->rank() != 0) return;
  std::printf("dist parity, 2 ranks: %-28s %-9s largest |trlx - reference| %.3g over %zu values\n", what.c_str(),
              preset.c_str(), cmp.worst, cmp.checked);
  std::fflush(stdout);
}

// Runs `replay` on 2 ranks under each strategy and compares its steps with
// `want_steps`; a strategy the engine refuses as not built yet is skipped.
void on_each_strategy(const std::string& what, const std::function<test::StepValues(const test::Run&)>& replay,
                      const nlohmann::json& want_steps, const test::Comparison& base = {},
                      const test::Flags& flags = {}) {
  for (const auto& preset : kStrategies) {
    DYNAMIC_SECTION(what << " under " << preset) {
      test::Run run{world(), {{"accelerate_config", preset}}, {}};
      run.flags.insert(run.flags.end(), flags.begin(), flags.end());
      test::StepValues got;
      try {
        got = replay(run);
      } catch (const InputError& e) {
        if (std::string(e.what()).find("not built yet") == std::string::npos) throw;
        WARN("SKIPPED " << what << " under " << preset << ": the engine does not build it yet (" << e.what() << ")");
        continue;
      }
      test::Comparison cmp = base;
      test::compare_steps(got, want_steps, what, cmp);
      CHECK(cmp.checked > 0);
      report(what, preset, cmp);
      if (!cmp.known_divergent.empty() && cmp.divergent_worst > 1e-4)
        WARN("KNOWN DIFFERENCE " << what << " under " << preset << ": largest difference "
                                 << cmp.divergent_worst << " in metrics not checked here (see the test)");
    }
  }
}

// A 2-process fixture next to a single-process one: <stem>_np2.json.
std::optional<nlohmann::json> two_process_fixture(const fs::path& path) {
  if (!fs::exists(path)) {
    WARN("SKIPPED: " << path.string() << " missing (scripts/fixtures/dist_fixtures.py writes it)");
    return std::nullopt;
  }
  auto j = test::read_json(path);
  const int processes = j.is_array() ? j.at(0).value("num_processes", 1) : j.value("num_processes", 1);
  REQUIRE(processes == 2);
  return j;
}

// Every case of a 2-process online fixture (tests/data/<file>) replayed under
// each strategy; `trainer` empty: each case's "kind".
void online_cases_on_each_strategy(const std::string& file, const std::string& trainer) {
  const auto cases = two_process_fixture(test::data_dir() / file);
  if (!cases) return;
  for (const auto& cs : *cases) {
    const auto t = trainer.empty() ? cs.at("kind").get<std::string>() : trainer;
    const std::string name = t + " " + cs.at("name").get<std::string>();
    on_each_strategy(name, [&](const test::Run& run) { return test::online_steps(cs, t, run); },
                     test::online_expected_steps(cs), test::online_comparison(cs));
  }
}

}  // namespace

TEST_CASE("dist DPO: 2 ranks x 2 pairs equal TRL's DPOTrainer on 4 pairs, every loss case", "[dist][dpo][golden]") {
  require_two_ranks();
  const auto cases = test::read_json(test::data_dir() / "dpo" / "steps.json");
  REQUIRE(cases.size() >= 2);
  for (const auto& cs : cases) {
    const std::string name = "dpo " + cs.at("name").get<std::string>();
    on_each_strategy(name, [&](const test::Run& run) { return test::dpo_steps(cs, run); }, cs.at("steps"));
  }
}

TEST_CASE("dist DPO with LoRA, the reference being the policy with adapters disabled: 2 ranks equal one process",
          "[dist][dpo][lora]") {
  require_two_ranks();
  // No TRL fixture with LoRA for DPO: the single-process trlx run (itself
  // checked against TRL without LoRA) is the reference here.
  auto cs = test::read_json(test::data_dir() / "dpo" / "steps.json").at(0);
  REQUIRE(cs.at("name") == "sigmoid");
  cs["name"] = "sigmoid_lora";
  cs["config"]["use_peft"] = true;
  cs["config"]["learning_rate"] = 1e-2;
  // Dropout masks depend on how rows are split across ranks.
  cs["config"]["lora_dropout"] = 0.0;
  cs["separate_reference"] = false;
  const auto single = test::dpo_steps(cs, {dist::make_single_communicator(), {}, {}});
  // Adapters trained: by step 3 the policy is not the reference.
  REQUIRE(single.size() == 3);
  CHECK(single[2].at("rewards/margins") != 0.0);
  on_each_strategy("dpo sigmoid LoRA (vs trlx)", [&](const test::Run& run) { return test::dpo_steps(cs, run); },
                   nlohmann::json(single));
}

TEST_CASE("dist CPO and ORPO: 2 ranks equal TRL's trainers on 2 processes", "[dist][cpo][orpo][golden]") {
  require_two_ranks();
  const auto cases = two_process_fixture(test::data_dir() / "dpo" / "reference_free_steps_np2.json");
  if (!cases) return;
  for (const auto& cs : *cases)
    on_each_strategy(cs.at("name").get<std::string>(),
                     [&](const test::Run& run) { return test::reference_free_steps(cs, run); }, cs.at("steps"));
}

TEST_CASE("dist GRPO and RLOO: 2 ranks equal TRL's trainers on 2 processes, every case, under each strategy",
          "[dist][grpo][rloo][golden]") {
  require_two_ranks();
  // Each rank generates and scores its own slots of a round; the group
  // statistics come from every rank's rewards (TRL gathers them), so the
  // numbers are TRL's whichever rank holds which completion.
  online_cases_on_each_strategy("grpo/steps_np2.json", "grpo");
  online_cases_on_each_strategy("grpo/rloo_steps_np2.json", "rloo");
}

TEST_CASE("dist distill: 2 ranks equal TRL's DistillationTrainer on 2 processes, every case, under each strategy",
          "[dist][distill][golden]") {
  require_two_ranks();
  // Each rank generates its own slots; the teacher is placed as the
  // reference (split unit by unit under ZeRO-3/FSDP) and both heads are
  // gathered for the divergence; the loss is over the round's tokens of
  // every rank, as TRL's num_items_in_batch.
  const auto cases = two_process_fixture(test::data_dir() / "distill" / "steps_np2.json");
  if (!cases) return;
  // Under ZeRO-3 and FSDP the teacher is never whole on a rank: the most
  // weights gathered at once (a teacher layer and the next one prefetched, or
  // both heads for the divergence) stay under the teacher's own size less
  // one of its 3 layers (a layer is 30% of its bytes).
  const auto teacher_bytes =
      static_cast<int64_t>(fs::file_size(test::data_dir() / "distill" / "teacher" / "model.safetensors"));
  for (const auto& cs : *cases)
    on_each_strategy("distill " + cs.at("name").get<std::string>(),
                     [&](const test::Run& run) {
                       return test::distill_steps(cs, run, [&](engine::Engine& e) {
                         auto& s = engine::EngineProbe::strategy(e);
                         if (!s.shards_parameters()) return;
                         INFO("most bytes gathered at once " << s.peak_gathered_bytes() << ", teacher "
                                                             << teacher_bytes);
                         CHECK(s.peak_gathered_bytes() > 0);
                         CHECK(s.peak_gathered_bytes() < teacher_bytes * 7 / 10);
                       });
                     },
                     cs.at("steps"), test::online_comparison(cs));
}

TEST_CASE("dist GRPO with tools: 2 ranks equal TRL's GRPOTrainer(tools=...) on 2 processes, under each strategy",
          "[dist][grpo][tools][golden]") {
  require_two_ranks();
  // Each rank runs its own rollouts' tool calls; ranks whose rollouts need
  // more turns make the others generate along (sharded generation is a
  // collective), which TRL does not do and which changes nothing else.
  online_cases_on_each_strategy("agents/steps_np2.json", "grpo");
  online_cases_on_each_strategy("agents/env_steps_np2.json", "grpo");
}

TEST_CASE("dist GRPO with tools, later turns sampled: a rank with no tool calls generates along with the other",
          "[dist][grpo][tools]") {
  require_two_ranks();
  // Rank 0's rollouts answer at once, rank 1's call a tool and are sampled
  // on from the tool result: under parameter sharding every forward is a
  // collective, so rank 0 must join rank 1's extra generation (a missing
  // join hangs until ctest's timeout). The first turns are the fixture's,
  // so the tool counts are known: 4 calls in 8 rollouts per round.
  const auto cases = test::read_json(test::data_dir() / "agents" / "steps_np2.json");
  const auto& cs = cases.at(0);
  for (const auto& [preset, gather] : std::vector<std::pair<std::string, std::string>>{
           {"zero3", "true"}, {"zero3", "false"}, {"fsdp", "true"}, {"multi_gpu", "true"}}) {
    DYNAMIC_SECTION(preset << " ds3_gather_for_generation " << gather) {
      test::Run run{world(), {{"accelerate_config", preset}, {"ds3_gather_for_generation", gather}}, {}};
      run.sample_tool_turns = true;
      const auto got = test::online_steps(cs, "grpo", run);
      REQUIRE(got.size() == 3);
      for (size_t step : {size_t{0}, size_t{2}}) {
        CHECK(got[step].at("tools/call_frequency") == Approx(0.5));
        CHECK(got[step].at("tools/failure_frequency") == Approx(0.0));
      }
      CHECK(std::isfinite(got[2].at("loss")));
    }
  }
}

TEST_CASE("dist GRPO and RLOO evaluation: 2 ranks equal TRL's on 2 processes, under each strategy",
          "[dist][grpo][rloo][golden]") {
  require_two_ranks();
  // Each rank generates its share of every eval batch; a short last batch
  // is filled with the first prompts again, counted in the metrics and not
  // in the loss, as accelerate's even batches are.
  online_cases_on_each_strategy("grpo/eval_steps_np2.json", "");
}

TEST_CASE("dist GRPO and RLOO log_completions: rank 0 writes every rank's completions as one process does",
          "[dist][grpo][rloo][golden]") {
  require_two_ranks();
  // The single-process fixture's rounds, each rank generating half of the
  // slots: the files hold the whole round in slot order, as TRL's.
  const auto cases = test::read_json(test::data_dir() / "grpo" / "completions_log.json");
  for (const auto& cs : cases) {
    DYNAMIC_SECTION(cs.at("name").get<std::string>()) {
      test::TempDir out("trlx_completions_dist");
      test::online_steps(cs, cs.at("kind").get<std::string>(), {world(), {{"accelerate_config", "zero3"}}, out.path});
      if (world()->rank() == 0) test::check_completion_logs(cs, out.path);
      else CHECK(!fs::exists(out.path / "completions"));
    }
  }
}

TEST_CASE("dist online DPO: 2 ranks equal TRL's OnlineDPOTrainer on 2 processes, every case, under each strategy",
          "[dist][online-dpo][golden]") {
  require_two_ranks();
  // Each rank samples and ranks its own prompts' pairs; the loss and the
  // metrics are means over every rank's pairs.
  online_cases_on_each_strategy("online_dpo/steps_np2.json", "online-dpo");
}

TEST_CASE("dist PPO: 2 ranks equal TRL's PPOTrainer on 2 processes, every case, under each strategy",
          "[dist][ppo][golden]") {
  require_two_ranks();
  // Each rank scores and whitens its own rollout rows; the policy and the
  // value model train together, both sharded by the strategy.
  const auto cases = two_process_fixture(test::data_dir() / "ppo" / "steps_np2.json");
  if (!cases) return;
  for (const auto& cs : *cases) {
    const std::string name = "ppo " + cs.at("name").get<std::string>();
    on_each_strategy(
        name,
        [&](const test::Run& run) {
          // Each rank's rollout batches equal that process's in TRL's run.
          std::vector<engine::TensorMap> rollouts;
          auto steps = test::ppo_steps(cs, run, &rollouts);
          test::check_ppo_rollouts(rollouts, cs, run.comm->rank());
          return steps;
        },
        cs.at("steps"), test::ppo_comparison(cs));
  }
}

TEST_CASE("dist KTO: 2 ranks equal TRL's KTOTrainer on 2 processes", "[dist][kto][golden]") {
  require_two_ranks();
  const auto want = two_process_fixture(test::data_dir() / "kto" / "parity_np2.json");
  if (!want) return;
  on_each_strategy("kto", [&](const test::Run& run) { return test::kto_steps(*want, run); }, want->at("steps"));
}

TEST_CASE("dist reward: 2 ranks x 1 pair equal TRL's RewardTrainer on 2 pairs", "[dist][reward][golden]") {
  require_two_ranks();
  const auto want = test::read_json(test::data_dir() / "reward" / "parity.json");
  test::Comparison base;
  on_each_strategy("reward", [&](const test::Run& run) { return test::reward_steps(want, run); }, want.at("steps"),
                   base);
}

TEST_CASE("dist LoRA with gradient checkpointing, every trainer: 2 ranks under each strategy equal one process",
          "[dist][lora][checkpointing]") {
  require_two_ranks();
  // Under ZeRO-3/FSDP the recompute re-gathers each layer, and LoRA forces
  // the reentrant mode there (engine/memory_plan.cpp). The single-process
  // trlx run of the same settings is the reference; dropout off, as its
  // masks depend on how rows are split across ranks.
  const test::Flags lora = {{"use_peft", "true"},           {"lora_r", "4"},
                            {"lora_dropout", "0"},          {"learning_rate", "1e-2"},
                            {"gradient_checkpointing", "true"}};
  // KTO, CPO and ORPO are not rank-invariant (see the top of this file):
  // for them 2-rank DDP, itself checked against TRL on 2 processes above, is
  // the reference of the sharded strategies.
  auto check = [&](const std::string& what, const std::function<test::StepValues(const test::Run&)>& replay,
                   bool rank_invariant) {
    test::Run reference{dist::make_single_communicator(), lora, {}};
    if (!rank_invariant) {
      reference.comm = world();
      reference.flags.emplace_back("accelerate_config", "multi_gpu");
    }
    const auto want = replay(reference);
    REQUIRE(want.size() == 3);
    // The adapters trained: the loss moved between the first and last step.
    CHECK(want.front().at("loss") != want.back().at("loss"));
    on_each_strategy(what, replay, nlohmann::json(want), {}, lora);
  };
  auto dpo = test::read_json(test::data_dir() / "dpo" / "steps.json").at(0);
  dpo["separate_reference"] = false;  // the reference is the policy with adapters off
  check("dpo LoRA+ckpt (vs trlx)", [&](const test::Run& run) { return test::dpo_steps(dpo, run); }, true);
  for (const auto& cs : test::read_json(test::data_dir() / "dpo" / "reference_free_steps.json")) {
    if (cs.contains("data")) continue;  // the unpadded cases only add logits/* against TRL (one process)
    const std::string name = cs.at("name").get<std::string>() + " LoRA+ckpt (vs trlx DDP)";
    check(name, [&](const test::Run& run) { return test::reference_free_steps(cs, run); }, false);
  }
  // The 2-process fixture's batches (2 per rank: the KL term needs pairs).
  const auto kto = test::read_json(test::data_dir() / "kto" / "parity_np2.json");
  check("kto LoRA+ckpt (vs trlx DDP)", [&](const test::Run& run) { return test::kto_steps(kto, run); }, false);
  const auto reward = test::read_json(test::data_dir() / "reward" / "parity.json");
  check("reward LoRA+ckpt (vs trlx)", [&](const test::Run& run) { return test::reward_steps(reward, run); }, true);
  // GRPO and RLOO with beta > 0, and online DPO: the reference is the
  // policy with adapters off, run in every generation round.
  for (const auto& [file, trainer, name] : std::vector<std::tuple<std::string, std::string, std::string>>{
           {"grpo/steps.json", "grpo", "grpo_beta"},
           {"grpo/rloo_steps.json", "rloo", "default"},
           {"online_dpo/steps.json", "online-dpo", "sigmoid"}}) {
    for (const auto& cs : test::read_json(test::data_dir() / file)) {
      if (cs.at("name") != name) continue;
      check(trainer + " " + name + " LoRA+ckpt (vs trlx)",
            [&, trainer = trainer](const test::Run& run) { return test::online_steps(cs, trainer, run); }, true);
    }
  }
  // Distillation: the teacher is a separate model beside the adapters.
  for (const auto& cs : test::read_json(test::data_dir() / "distill" / "steps.json"))
    if (cs.at("name") == "jsd_chat_temp")
      check("distill jsd_chat_temp LoRA+ckpt (vs trlx)",
            [&](const test::Run& run) { return test::distill_steps(cs, run); }, true);
}
