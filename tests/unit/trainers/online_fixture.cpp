// Runs an online trainer on a fixture's fixed completions and scores, for the golden tests.
#include "support/engine_probe.hpp"
#include "catch_torch.hpp"

#include "online_fixture.hpp"

#include <algorithm>
#include <cmath>
#include <map>

#include "config/loader.hpp"
#include "text/data/columnar.hpp"
#include "text/data/table_file.hpp"
#include "model/loading.hpp"
#include "support.hpp"
#include "text/template/chat_template.hpp"
#include "text/tokenizer/tokenizer.hpp"
#include "trainers/distill.hpp"
#include "trainers/grpo.hpp"
#include "trainers/online_dpo.hpp"
#include "trainers/ppo.hpp"
#include "trainers/rloo.hpp"

namespace trlx::test {

namespace fs = std::filesystem;

namespace {

// Scores completions by looking them up in the fixture's table.
class LookupReward final : public rewards::RewardFunction {
 public:
  // `sampled`: completions the fixture does not have are scored as its
  // reward_ids scores them ((sum of ids mod 7) / 3).
  LookupReward(std::string name, std::map<std::vector<int64_t>, std::optional<double>> table, bool sampled = false)
      : name_(std::move(name)), table_(std::move(table)), sampled_(sampled) {}
  const std::string& name() const override { return name_; }
  rewards::Scores score(const std::vector<rewards::Sample>& batch) override {
    rewards::Scores out;
    for (const auto& s : batch) {
      auto it = table_.find(s.completion_ids);
      if (it == table_.end() && sampled_) {
        int64_t sum = 0;
        for (auto id : s.completion_ids) sum += id;
        out.push_back(static_cast<double>(sum % 7) / 3.0);
        continue;
      }
      INFO("a completion the fixture does not score");
      REQUIRE(it != table_.end());
      out.push_back(it->second);
    }
    return out;
  }

 private:
  std::string name_;
  std::map<std::vector<int64_t>, std::optional<double>> table_;
  bool sampled_;
};

// The rows a run logged (the closing runtime row left out), by name: the
// training steps', or with `key` "eval_loss" the evaluations'.
StepValues logged_steps(engine::Engine& engine, const std::string& key = "loss") {
  StepValues got;
  for (const auto& line : engine::EngineProbe::log_history(engine)) {
    const auto j = nlohmann::json::parse(line);
    if (!j.contains(key)) continue;  // the run's closing row (runtime), or the other kind
    std::map<std::string, double> step;
    for (const auto& [k, v] : j.items())
      if (k != "step") step[k] = v.template get<double>();
    got.push_back(std::move(step));
  }
  return got;
}

// A case of tests/data/agents/steps*.json (GRPO with tools).
bool is_agent_case(const nlohmann::json& cs) { return cs.contains("tools"); }
fs::path agent_model() { return data_dir() / "agents" / "model"; }
// The reward functions a case configures: its names but the environment's.
std::vector<std::string> configured_rewards(const nlohmann::json& cs) {
  auto names = cs.at("reward_names").get<std::vector<std::string>>();
  if (cs.contains("environment")) names.erase(std::find(names.begin(), names.end(), cs.at("environment")));
  return names;
}

template <class C>
C online_config(const config::Schema& schema, const nlohmann::json& cs, const Run& run, const fs::path& out) {
  const auto& args = cs.at("args");
  config::ConfigLoader loader(schema);
  auto set = [&](const std::string& k, const std::string& v) { loader.apply_flag(k, {v}); };
  if (is_agent_case(cs)) {
    set("model_name_or_path", agent_model().string());
    set("dataset_name", (data_dir() / "agents").string());
    // TRL's tools=[multiply, get_weather] or environment_factory=CalcEnv,
    // served by the shipped adapter.
    const std::string adapter = "python3 '" + (source_dir() / "examples" / "tools" / "python_tools.py").string() + "' ";
    const std::string served = cs.contains("environment")
                                   ? "--environment '" + (data_dir() / "agents" / "env.py").string() + ":" +
                                         cs.at("environment").get<std::string>() + "'"
                                   : "'" + (data_dir() / "agents" / "tools.py").string() + "'";
    loader.apply_flag("tools", {nlohmann::json{{"command", adapter + served}, {"timeout_seconds", 120}}.dump()});
  } else {
    set("model_name_or_path", tiny_model().string());
    set("dataset_name", (data_dir() / "grpo" / cs.at("data").get<std::string>()).string());
  }
  set("bf16", "false");
  set("gradient_checkpointing", "false");
  set("logging_steps", "1");
  set("save_strategy", "no");
  set("output_dir", out.string());
  for (const auto& [k, v] : args.items()) {
    if (k == "per_device_train_batch_size" || k == "per_device_eval_batch_size") continue;
    if (v.is_array()) {
      std::vector<std::string> vals;
      for (const auto& x : v) vals.push_back(x.is_string() ? x.template get<std::string>() : x.dump());
      loader.apply_flag(k, vals);
    } else {
      set(k, v.is_string() ? v.template get<std::string>() : v.dump());
    }
  }
  // The fixture's global batch, split over this run's ranks.
  const int64_t global = args.at("per_device_train_batch_size").get<int64_t>() * cs.value("num_processes", 1);
  REQUIRE(global % run.world_size() == 0);
  set("per_device_train_batch_size", std::to_string(global / run.world_size()));
  if (args.contains("per_device_eval_batch_size")) {
    const int64_t eval = args.at("per_device_eval_batch_size").get<int64_t>() * cs.value("num_processes", 1);
    REQUIRE(eval % run.world_size() == 0);
    set("per_device_eval_batch_size", std::to_string(eval / run.world_size()));
  }
  // The fixture's reward functions are built by the test, one per name (an
  // environment's comes from the environment).
  loader.apply_flag("reward_funcs", configured_rewards(cs));
  for (const auto& [k, v] : run.flags) set(k, v);
  C c;
  loader.resolve(&c);
  return c;
}

template <class C, class T>
StepValues replay(const config::Schema& schema, const std::string& name, const nlohmann::json& cs, const Run& run) {
  TempDir out("trlx_online");
  // Every rank writes into its own directory (rank 0's is the one used).
  const C c = online_config<C>(schema, cs, run, run.output_dir.empty() ? out.path : run.output_dir);
  const bool agents = is_agent_case(cs);
  const fs::path model_dir = agents ? agent_model() : tiny_model();
  auto text = trainers::load_tokenizer_and_template(model_dir, std::nullopt);
  // Tools: their programs started, the template swapped for its training
  // variant as TRL's GRPO does.
  auto tools = trainers::start_tools(c, name, text);
  auto& tok = text.tokenizer;
  text::ChatTemplate tmpl = agents ? *text.chat_template : text::ChatTemplate(tok.chat_template(), "tiny-model");
  auto prompts = trainers::prepare_prompts(c, name, tok, &tmpl, "train", T::setup(), tools ? &tools->schemas : nullptr);
  // trlx tokenizes every prompt as TRL did.
  // (An environment's observation changes a rollout's prompt later.)
  for (const auto& round : cs.at("rounds"))
    for (const auto& slot : round.at("slots")) {
      if (slot.contains("observation") && !slot.at("observation").is_null()) continue;
      INFO("row " << slot.at("row"));
      REQUIRE(prompts.examples.at(slot.at("row").get<size_t>()).prompt_ids ==
              slot.at("prompt_ids").get<std::vector<int64_t>>());
    }
  // The rewards of every completion the fixture has.
  const auto names = configured_rewards(cs);
  std::vector<std::map<std::vector<int64_t>, std::optional<double>>> tables(names.size());
  auto add_rewards = [&](const nlohmann::json& slot) {
    for (size_t k = 0; k < names.size(); ++k) {
      const auto& r = slot.at("rewards").at(k);
      tables[k][slot.at("completion_ids").get<std::vector<int64_t>>()] =
          r.is_null() ? std::nullopt : std::optional<double>(r.get<double>());
    }
  };
  for (const auto& round : cs.at("rounds"))
    for (const auto& slot : round.at("slots")) add_rewards(slot);
  const bool evaluates = cs.contains("evals");
  if (evaluates)
    for (const auto& e : cs.at("eval_completions")) add_rewards(e);
  std::vector<std::unique_ptr<rewards::RewardFunction>> funcs;
  for (size_t k = 0; k < names.size(); ++k) funcs.push_back(std::make_unique<LookupReward>(names[k], tables[k], run.sample_tool_turns));
  if (tools && tools->environment) funcs.push_back(trainers::environment_reward(tools));

  auto policy = model::load_language_model(model_dir, model::HeadKind::CausalLM);
  engine::Engine engine(trainers::engine_config(c), policy, name, model_dir, std::nullopt, run.comm);
  // With LoRA the reference is the policy with its adapters off (no copy).
  if (c.beta != 0 && !c.use_peft)
    engine.set_reference(model::load_language_model(model_dir, model::HeadKind::CausalLM));
  std::vector<int64_t> eos = {*tok.eos_token_id()};
  const int64_t pad = trainers::resolve_pad_id(tok, name);
  T trainer(c, std::move(prompts), std::move(tok), std::move(funcs), pad, eos, engine.world_size());
  // Round r's completions, by global slot.
  const auto& rounds = cs.at("rounds");
  size_t round = 0;
  // With tools, each slot's turns as TRL generated them (before its cut to
  // the budget): the first here, the later ones below.
  trainer.set_fixed_completions([&](const std::vector<size_t>& slots) {
    REQUIRE(round < rounds.size());
    std::vector<std::vector<int64_t>> out;
    for (size_t s : slots) {
      // Sampling later turns: the first process's rollouts answer at once
      // (a plain answer), the second's call a tool (slot 5's first turn).
      const size_t from = !run.sample_tool_turns ? s : s >= 4 ? 5 : round == 0 ? 1 : 3;
      const auto& slot = rounds[round].at("slots").at(from);
      out.push_back((agents ? slot.at("turns").at(0) : slot.at("completion_ids")).get<std::vector<int64_t>>());
    }
    ++round;
    return out;
  });
  if (tools) trainer.set_tools(tools);
  if (tools && !run.sample_tool_turns) {
    trainer.set_fixed_tool_turns([&](const std::vector<size_t>& slots, int turn) {
      REQUIRE(round >= 1);
      std::vector<std::vector<int64_t>> out;
      for (size_t s : slots) {
        const auto& turns = rounds[round - 1].at("slots").at(s).at("turns");
        INFO("round " << round - 1 << " slot " << s << " turn " << turn);
        REQUIRE(static_cast<size_t>(turn) < turns.size());
        out.push_back(turns.at(static_cast<size_t>(turn)).get<std::vector<int64_t>>());
      }
      return out;
    });
  }
  std::map<std::pair<size_t, size_t>, std::vector<int64_t>> by_row;  // (test row, k) -> completion
  if (evaluates) {
    // The test split, tokenized as TRL did, and the k-th completion of each
    // prompt in an eval batch.
    auto eval_prompts = trainers::prepare_prompts(c, name, text::Tokenizer::from_dir(tiny_model()), &tmpl, "test",
                                                  T::setup());
    const auto& want_ids = cs.at("eval_prompt_ids");
    REQUIRE(eval_prompts.examples.size() == want_ids.size());
    for (size_t i = 0; i < want_ids.size(); ++i)
      REQUIRE(eval_prompts.examples[i].prompt_ids == want_ids.at(i).get<std::vector<int64_t>>());
    trainer.set_eval_prompts(std::move(eval_prompts));
    for (const auto& e : cs.at("eval_completions"))
      by_row[{e.at("row").get<size_t>(), e.at("k").get<size_t>()}] = e.at("completion_ids").get<std::vector<int64_t>>();
    const auto group = static_cast<size_t>(c.num_generations_eval.value_or(c.num_generations));
    trainer.set_fixed_eval_completions([&, group](const std::vector<size_t>& rows, const std::vector<size_t>& slots) {
      std::vector<std::vector<int64_t>> out;
      for (size_t i = 0; i < rows.size(); ++i) {
        const size_t k = slots[i] % group;
        INFO("test row " << rows[i] << " completion " << k);
        REQUIRE(by_row.count({rows[i], k}));
        out.push_back(by_row.at({rows[i], k}));
      }
      return out;
    });
  }
  engine.train(trainer);
  // Every forward's batch was moved by the engine, which read its masks'
  // layout on the host (on a GPU a forward cannot, without a device read).
  CHECK(engine::EngineProbe::host_fact_reads(engine) == 0);
  StepValues got = logged_steps(engine);
  // TRL logs num_tokens only at steps that generate; trlx at every step.
  for (size_t k = 0; k < got.size() && k < cs.at("steps").size(); ++k)
    if (!cs.at("steps").at(k).contains("num_tokens")) got[k].erase("num_tokens");
  // Evaluations follow the steps (online_expected_steps appends TRL's).
  if (evaluates)
    for (auto& row : logged_steps(engine, "eval_loss")) got.push_back(std::move(row));
  return got;
}

}  // namespace

StepValues ppo_steps(const nlohmann::json& cs, const Run& run, std::vector<engine::TensorMap>* rollouts) {
  TempDir out("trlx_ppo");
  const auto& args = cs.at("args");
  config::ConfigLoader loader(trainers::ppo_schema());
  auto set = [&](const std::string& k, const std::string& v) { loader.apply_flag(k, {v}); };
  set("model_name_or_path", tiny_model().string());
  set("dataset_name", (data_dir() / "grpo" / "text").string());
  set("reward_model_path", (data_dir() / "ppo" / "reward_model").string());
  set("bf16", "false");
  set("gradient_checkpointing", "false");
  set("logging_steps", "1");
  set("save_strategy", "no");
  set("shuffle_dataset", "false");
  set("output_dir", out.path.string());
  for (const auto& [k, v] : args.items()) {
    if (k == "per_device_train_batch_size" || v.is_null()) continue;
    set(k, v.is_string() ? v.get<std::string>() : v.dump());
  }
  const int64_t global = args.at("per_device_train_batch_size").get<int64_t>() * cs.value("num_processes", 1);
  REQUIRE(global % run.world_size() == 0);
  set("per_device_train_batch_size", std::to_string(global / run.world_size()));
  for (const auto& [k, v] : run.flags) set(k, v);
  trainers::PPOConfig c;
  loader.resolve(&c);

  auto tok = text::Tokenizer::from_dir(tiny_model());
  text::ChatTemplate tmpl(tok.chat_template(), "tiny-model");
  auto prompts = trainers::prepare_prompts(c, "ppo", tok, &tmpl, "train", trainers::PPOTrainer::setup());
  // trlx tokenizes every prompt as TRL did; update u holds prompts u x G .. in file order.
  const int64_t g = global * c.gradient_accumulation_steps;
  for (const auto& round : cs.at("rounds"))
    for (const auto& slot : round.at("slots")) {
      const auto row = static_cast<size_t>(((round.at("update").get<int64_t>() - 1) * g + slot.at("slot").get<int64_t>()) %
                                           static_cast<int64_t>(prompts.examples.size()));
      INFO("update " << round.at("update") << " slot " << slot.at("slot"));
      REQUIRE(prompts.examples.at(row).prompt_ids == slot.at("prompt_ids").get<std::vector<int64_t>>());
    }

  const auto reward_dir = data_dir() / "ppo" / "reward_model";
  trainers::PPOConfig engine_side = c;
  engine_side.gradient_accumulation_steps = c.micro_batches_per_update();
  auto policy = model::load_language_model(tiny_model(), model::HeadKind::CausalLM);
  auto value = model::load_language_model(reward_dir, model::HeadKind::SequenceClassification);
  engine::Engine engine(trainers::engine_config(engine_side), policy, "ppo", tiny_model(), std::nullopt, run.comm,
                        value);
  if (!c.use_peft) engine.set_reference(model::load_language_model(tiny_model(), model::HeadKind::CausalLM));
  engine.set_reward_model(trainers::load_score_model(reward_dir.string(), "float32", "reward_model_path", c.seed,
                                                          /*defer_casts=*/true));
  const int64_t pad = trainers::resolve_pad_id(tok, "ppo");
  const auto eos = tok.eos_token_id();
  trainers::PPOTrainer trainer(c, std::move(prompts), std::move(tok), pad, eos, engine.world_size());
  int64_t update = 0;
  trainer.set_fixed_completions([&](const std::vector<size_t>& slots) {
    if (rollouts && update > 0) rollouts->push_back(trainer.last_rollout());
    ++update;
    std::map<size_t, std::vector<int64_t>> by_slot;
    for (const auto& round : cs.at("rounds"))
      if (round.at("update").get<int64_t>() == update)
        for (const auto& slot : round.at("slots"))
          by_slot[slot.at("slot").get<size_t>()] = slot.at("response_ids").get<std::vector<int64_t>>();
    std::vector<std::vector<int64_t>> out;
    for (size_t s : slots) {
      INFO("update " << update << " slot " << s);
      REQUIRE(by_slot.count(s));
      out.push_back(by_slot.at(s));
    }
    return out;
  });
  engine.train(trainer);
  CHECK(engine::EngineProbe::host_fact_reads(engine) == 0);
  if (rollouts) rollouts->push_back(trainer.last_rollout());
  return logged_steps(engine);
}

double check_ppo_rollouts(const std::vector<engine::TensorMap>& rollouts, const nlohmann::json& cs, int rank) {
  std::vector<nlohmann::json> want;
  for (const auto& r : cs.at("rollouts"))
    if (r.at("rank").get<int>() == rank) want.push_back(r);
  REQUIRE(rollouts.size() == want.size());
  auto difference = [](const torch::Tensor& got, const nlohmann::json& w) {
    std::vector<double> flat;
    std::vector<int64_t> shape = {static_cast<int64_t>(w.size())};
    for (const auto& row : w) {
      if (row.is_array()) {
        if (shape.size() == 1) shape.push_back(static_cast<int64_t>(row.size()));
        for (const auto& x : row) flat.push_back(x.get<double>());
      } else {
        flat.push_back(row.get<double>());
      }
    }
    const auto t = torch::tensor(flat, torch::kFloat64).view(shape);
    REQUIRE(got.sizes() == t.sizes());
    return ((got.to(torch::kFloat64) - t).abs() / t.abs().clamp_min(1.0)).max().item<double>();
  };
  double worst = 0;
  // The fixture's own tolerance where its reference moves more than 1e-4
  // between machines (scripts/fixtures/ppo_fixtures.py says which and why).
  const double later = cs.value("tolerance", 1e-4);
  for (size_t u = 0; u < want.size(); ++u)
    for (const char* k : {"scores", "rewards", "values", "advantages", "returns", "logprobs", "ref_logprobs"}) {
      // The first batch comes from the starting models alone; later ones
      // from models trained as TRL trained them, to the updates' tolerance.
      const double d = difference(rollouts[u].at(k), want[u].at(k));
      INFO("rank " << rank << " update " << u + 1 << " " << k << ": largest difference " << d);
      CHECK(d <= (u == 0 ? 1e-5 : later));
      worst = std::max(worst, d);
    }
  return worst;
}

Comparison ppo_comparison(const nlohmann::json& cs) {
  Comparison cmp;
  cmp.tolerance = cs.value("tolerance", 1e-4);
  // TRL's timing and epoch; trlx's step values (TRL's PPO logs no loss,
  // gradient norm or token count).
  cmp.ignored = {"eps", "val/ratio_var", "epoch", "loss", "grad_norm", "learning_rate", "num_tokens"};
  // Averaged over padding positions too, where a pad token sees itself in
  // trlx's attention and not in transformers'.
  if (!cs.value("nopad", false)) cmp.ignored.insert("policy/entropy_avg");
  // TRL logs process 0's own count.
  if (cs.value("num_processes", 1) > 1) cmp.ignored.insert("val/num_eos_tokens");
  return cmp;
}

StepValues online_steps(const nlohmann::json& cs, const std::string& trainer, const Run& run) {
  if (trainer == "grpo") return replay<trainers::GRPOConfig, trainers::GRPOTrainer>(trainers::grpo_schema(), trainer, cs, run);
  if (trainer == "online-dpo")
    return replay<trainers::OnlineDPOConfig, trainers::OnlineDPOTrainer>(trainers::online_dpo_schema(), trainer, cs, run);
  return replay<trainers::RLOOConfig, trainers::RLOOTrainer>(trainers::rloo_schema(), trainer, cs, run);
}

fs::path distill_teacher() { return data_dir() / "distill" / "teacher"; }

StepValues distill_steps(const nlohmann::json& cs, const Run& run, const std::function<void(engine::Engine&)>& inspect) {
  TempDir out("trlx_distill");
  const auto& args = cs.at("args");
  config::ConfigLoader loader(trainers::distill_schema());
  auto set = [&](const std::string& k, const std::string& v) { loader.apply_flag(k, {v}); };
  set("model_name_or_path", tiny_model().string());
  set("teacher_model_name_or_path", distill_teacher().string());
  set("dataset_name", (data_dir() / "grpo" / cs.at("data").get<std::string>()).string());
  set("bf16", "false");
  set("gradient_checkpointing", "false");
  set("logging_steps", "1");
  set("save_strategy", "no");
  set("output_dir", (run.output_dir.empty() ? out.path : run.output_dir).string());
  for (const auto& [k, v] : args.items())
    if (k != "per_device_train_batch_size") set(k, v.is_string() ? v.get<std::string>() : v.dump());
  if (const auto& p = cs.at("peft"); !p.is_null()) {
    set("use_peft", "true");
    set("lora_r", p.at("r").dump());
    set("lora_alpha", p.at("lora_alpha").dump());
    set("lora_dropout", p.at("lora_dropout").dump());
    loader.apply_flag("lora_target_modules", p.at("target_modules").get<std::vector<std::string>>());
  }
  const int64_t global = args.at("per_device_train_batch_size").get<int64_t>() * cs.value("num_processes", 1);
  REQUIRE(global % run.world_size() == 0);
  set("per_device_train_batch_size", std::to_string(global / run.world_size()));
  for (const auto& [k, v] : run.flags) set(k, v);
  trainers::DistillConfig c;
  loader.resolve(&c);

  auto tok = text::Tokenizer::from_dir(tiny_model());
  text::ChatTemplate tmpl(tok.chat_template(), "tiny-model");
  auto prompts = trainers::prepare_prompts(c, "distill", tok, &tmpl, "train", trainers::DistillTrainer::setup());
  for (const auto& round : cs.at("rounds"))
    for (const auto& slot : round.at("slots")) {
      INFO("row " << slot.at("row"));
      REQUIRE(prompts.examples.at(slot.at("row").get<size_t>()).prompt_ids ==
              slot.at("prompt_ids").get<std::vector<int64_t>>());
    }
  auto policy = model::load_language_model(tiny_model(), model::HeadKind::CausalLM);
  engine::Engine engine(trainers::engine_config(c), policy, "distill", tiny_model(), std::nullopt, run.comm);
  engine.set_reference(model::load_language_model(distill_teacher(), model::HeadKind::CausalLM, "float32",
                                                  /*defer_casts=*/true));
  const int64_t pad = trainers::resolve_pad_id(tok, "distill");
  std::vector<int64_t> eos = {*tok.eos_token_id()};
  trainers::DistillTrainer trainer(c, std::move(prompts), std::move(tok), pad, eos, engine.world_size(),
                                   trainers::teacher_identity(distill_teacher()));
  const auto& rounds = cs.at("rounds");
  size_t round = 0;
  trainer.set_fixed_completions([&](const std::vector<size_t>& slots) {
    REQUIRE(round < rounds.size());
    std::vector<std::vector<int64_t>> completions;
    for (size_t slot : slots)
      completions.push_back(rounds[round].at("slots").at(slot).at("completion_ids").get<std::vector<int64_t>>());
    ++round;
    return completions;
  });
  engine.train(trainer);
  CHECK(engine::EngineProbe::host_fact_reads(engine) == 0);
  if (inspect) inspect(engine);
  return logged_steps(engine);
}

nlohmann::json online_expected_steps(const nlohmann::json& cs) {
  auto steps = cs.at("steps");
  const auto ga = cs.at("args").value("gradient_accumulation_steps", 1);
  if (cs.contains("nopad") && ga > 1)
    for (auto& s : steps) s["grad_norm"] = s.at("grad_norm").get<double>() / ga;
  if (cs.contains("evals"))
    for (const auto& e : cs.at("evals")) steps.push_back(e);
  return steps;
}

Comparison online_comparison(const nlohmann::json& cs) {
  Comparison cmp;
  cmp.ignored = {"epoch", "step_time"};
  if (cs.contains("nopad")) {  // online-dpo
    // TRL sums these over padding positions too, trlx over completion tokens
    // only: equal where no completion is padded.
    if (!cs.at("nopad").get<bool>())
      cmp.ignored.insert({"objective/kl", "objective/entropy", "objective/non_score_reward", "objective/rlhf_reward"});
    // TRL logs process 0's own value, not gathered.
    if (cs.value("num_processes", 1) > 1) cmp.ignored.insert("val/contain_eos_token");
  }
  for (const auto& step : cs.at("steps"))
    for (const auto& [k, v] : step.items())
      if (v.is_null()) cmp.ignored.insert(k);
  if (cs.contains("evals"))
    for (const auto& e : cs.at("evals"))
      for (const auto& [k, v] : e.items())
        if (v.is_null()) cmp.ignored.insert(k);
  return cmp;
}

void check_completion_logs(const nlohmann::json& cs, const fs::path& out) {
  const bool grpo = cs.at("kind") == "grpo";
  // What TRL wrote (GRPO) or built and wrote nowhere (RLOO): trlx writes both.
  std::vector<std::pair<std::string, nlohmann::json>> want;  // file, rows
  if (grpo) {
    for (const auto& f : cs.at("completions_files")) want.emplace_back(f.at("file"), f.at("rows"));
  } else {
    for (const auto& t : cs.at("unwritten_tables"))
      want.emplace_back(fmt::format("completions_{:05d}.parquet", t.at("step").get<int64_t>()), t.at("rows"));
  }
  REQUIRE(want.size() == cs.at("steps").size());
  std::vector<std::string> files;
  for (const auto& e : fs::directory_iterator(out / "completions")) files.push_back(e.path().filename().string());
  std::sort(files.begin(), files.end());
  std::vector<std::string> want_files;
  for (const auto& [f, _] : want) want_files.push_back(f);
  CHECK(files == want_files);  // one file per logging step, nothing half-written beside them
  for (const auto& [file, rows] : want) {
    INFO(cs.at("name").get<std::string>() << " " << file);
    const auto path = out / "completions" / file;
    REQUIRE(fs::exists(path));
    if (grpo) CHECK(data::parquet_schema_text(path) == cs.at("completions_files").at(0).at("schema").get<std::string>());
    std::vector<nlohmann::ordered_json> got;
    data::detail::read_parquet(path, [&](data::Row&& r) { got.push_back(std::move(r.value)); });
    REQUIRE(got.size() == rows.size());
    for (size_t i = 0; i < got.size(); ++i) {
      INFO("row " << i);
      const auto& w = rows.at(i);
      REQUIRE(got[i].size() == w.size());
      for (const auto& [k, v] : w.items()) {
        INFO("column " << k);
        REQUIRE(got[i].contains(k));
        const auto& g = got[i].at(k);
        // The advantages are trlx's own float32 values; the rest is copied.
        if (k == "advantage") {
          REQUIRE(g.is_number());
          CHECK(std::abs(g.get<double>() - v.get<double>()) <= 1e-6);
        } else {
          // (Key order inside messages is the schema's, checked above.)
          CHECK(nlohmann::json(g).dump() == nlohmann::json(v).dump());
        }
      }
    }
  }
}

}  // namespace trlx::test
