// ZeRO-1 and ZeRO-2 under mpirun (2 and 3 ranks): SFT steps on N ranks equal
// one process's steps on the same global batch (with and without LoRA,
// gradient checkpointing in both modes, chunked log-probs); each rank holds
// about 1/world of the optimizer state (and under stage 2 of the gradients);
// parameter counts that do not divide by the world size; a checkpointed run
// resumes exactly with the same world size, and says clearly when the world
// size differs.
#include "support/engine_probe.hpp"
#include "catch_torch.hpp"

#include <ATen/CPUGeneratorImpl.h>
#include <mutex>
#include <unordered_map>
#include <c10/core/CPUAllocator.h>
#include <fmt/format.h>

#include "config/loader.hpp"
#include "core/error.hpp"
#include "dist/comm/make_communicator.hpp"
#include "dist/strategy/strategy.hpp"
#include "engine/activation_checkpointing.hpp"
#include "engine/autocast.hpp"
#include "engine/engine.hpp"
#include "model/loading.hpp"
#include "model/lora.hpp"
#include "model/saving.hpp"
#include "support.hpp"
#include "support/checked_communicator.hpp"
#include "support/trainers.hpp"
#include "text/template/chat_template.hpp"
#include "text/tokenizer/tokenizer.hpp"
#include "trainers/sft.hpp"

using namespace trlx;
using Catch::Matchers::Contains;
namespace fs = std::filesystem;

namespace {

using test::tiny_model;

std::shared_ptr<dist::Communicator> world() {
  static std::shared_ptr<dist::Communicator> c = dist::make_mpi_communicator(std::chrono::seconds(60));
  return c;
}

using test::Flags;

using test::synced_sft_config;

using Params = std::map<std::string, torch::Tensor>;

// Whole even under ZeRO-3 (a collective then: every rank calls it).
Params trained(engine::Engine& e) { return e.parameter_values(true); }

using Run = test::SFTRun;

Run make(const trainers::SFTConfig& c, std::shared_ptr<dist::Communicator> comm, bool own_weights = false) {
  return test::make_sft(c, std::move(comm), own_weights);
}

Params train(const trainers::SFTConfig& c, std::shared_ptr<dist::Communicator> comm,
             const std::vector<std::vector<size_t>>& steps) {
  auto r = make(c, comm);
  for (const auto& b : steps) trlx::engine::EngineProbe::step_on(*r.engine, *r.trainer, {b});
  return trained(*r.engine);
}

double worst_difference(const Params& a, const Params& b) {
  REQUIRE(a.size() == b.size());
  REQUIRE(!a.empty());
  double worst = 0;
  for (const auto& [k, v] : a) worst = std::max(worst, (v - b.at(k)).abs().max().item<double>());
  return worst;
}

void check_equal_to_single(const std::string& preset, Flags flags, const std::vector<std::vector<size_t>>& steps) {
  flags.emplace_back("accelerate_config", preset);
  auto c = synced_sft_config(flags);
  auto single = train(c, dist::make_single_communicator(), steps);
  auto zero = train(c, world(), steps);
  const double worst = worst_difference(single, zero);
  INFO(preset << ", rank " << world()->rank() << " of " << world()->world_size() << ", largest difference " << worst);
  CHECK(worst < 1e-5);
}

int64_t bytes_of(const torch::Tensor& t) { return t.defined() ? t.numel() * t.element_size() : 0; }

// Bytes of every tensor in the optimizer's per-parameter state (Adam moments).
int64_t optimizer_state_bytes(torch::optim::AdamW& opt) {
  int64_t n = 0;
  for (const auto& [key, state] : opt.state()) {
    const auto& s = static_cast<const torch::optim::AdamWParamState&>(*state);
    n += bytes_of(s.exp_avg()) + bytes_of(s.exp_avg_sq()) + bytes_of(s.max_exp_avg_sq());
  }
  return n;
}

}  // namespace

TEST_CASE("ZeRO-1/2/3 and FSDP steps equal single-process steps on the same global batch", "[zero]") {
  // The fixture split has 8 examples.
  const std::vector<std::vector<size_t>> steps = {{0, 1, 2, 3, 4, 5}, {6, 7, 0, 1, 2, 3}};
  for (const std::string preset : {"zero1", "zero2", "zero3", "fsdp"}) {
    DYNAMIC_SECTION(preset << ": plain") { check_equal_to_single(preset, {}, steps); }
    DYNAMIC_SECTION(preset << ": chunked log-probs") {
      check_equal_to_single(preset, {{"use_liger_kernel", "true"}, {"logprob_chunk_size", "16"}}, steps);
    }
    DYNAMIC_SECTION(preset << ": LoRA") {
      check_equal_to_single(preset,
                            {{"use_peft", "true"}, {"lora_r", "4"}, {"lora_alpha", "8"}, {"lora_dropout", "0"},
                             {"lora_target_modules", "all-linear"}},
                            steps);
    }
    DYNAMIC_SECTION(preset << ": gradient checkpointing, both modes") {
      check_equal_to_single(
          preset, {{"gradient_checkpointing", "true"}, {"gradient_checkpointing_kwargs.use_reentrant", "true"}}, steps);
      check_equal_to_single(
          preset, {{"gradient_checkpointing", "true"}, {"gradient_checkpointing_kwargs.use_reentrant", "false"}}, steps);
    }
    DYNAMIC_SECTION(preset << ": LoRA, checkpointing and chunked log-probs together") {
      check_equal_to_single(preset,
                            {{"use_peft", "true"}, {"lora_r", "4"}, {"lora_dropout", "0"}, {"use_liger_kernel", "true"},
                             {"logprob_chunk_size", "16"}, {"gradient_checkpointing", "true"}},
                            steps);
    }
    DYNAMIC_SECTION(preset << ": accumulation, small buckets, uneven batches") {
      // Two micro-steps per step (stage 2 reduces each), buckets of a few
      // tensors, and a last micro-batch that leaves ranks without data.
      auto c = synced_sft_config({{"accelerate_config", preset}, {"ddp_bucket_cap_mb", "0.05"},
                           {"gradient_accumulation_steps", "2"}});
      auto run_steps = [&](std::shared_ptr<dist::Communicator> comm) {
        auto r = make(c, comm);
        trlx::engine::EngineProbe::step_on(*r.engine, *r.trainer, {{0, 1, 2, 3, 4}, {5}});
        trlx::engine::EngineProbe::step_on(*r.engine, *r.trainer, {{6, 7, 1}, {2, 3, 4, 5, 0}});
        return trained(*r.engine);
      };
      auto single = run_steps(dist::make_single_communicator());
      auto zero = run_steps(world());
      const double worst = worst_difference(single, zero);
      INFO("largest difference " << worst);
      CHECK(worst < 1e-5);
    }
  }
}

TEST_CASE("fp16: an overflowed first step is skipped under every strategy, and the next step trains as if alone",
          "[zero][fp16]") {
  // The first step's gradients are infinite (its loss times 1e38): every
  // strategy skips its update and halves the scale, and no trace of those
  // gradients may reach the second step (ZeRO-1 once kept them in the
  // parameters, so every later step overflowed too). The second step's
  // update then equals a run of that step alone on the same ranks (a loss
  // scale is a power of two: halving it changes no rounding). Against one
  // process, fp16 differs after any step by up to twice the learning rate
  // wherever a gradient is near zero (the ranks' fp16 rounding, then Adam's
  // first step, which moves by the gradient's sign); the single-process
  // comparison of the skipped step is forced_strategy_test.cpp's, at world 1.
  const std::vector<std::vector<size_t>> steps = {{0, 1, 2, 3, 4, 5}, {6, 7, 0, 1, 2, 3}};
  for (const std::string preset : {"multi_gpu", "zero1", "zero2", "zero3", "fsdp"}) {
    DYNAMIC_SECTION(preset) {
      auto c = synced_sft_config({{"accelerate_config", preset}, {"fp16", "true"}, {"max_grad_norm", "0.5"}});
      auto run = [&](bool overflow_first) {
        auto r = make(c, world());
        test::OverflowUntil first(*r.trainer, 1);
        if (overflow_first) trlx::engine::EngineProbe::step_on(*r.engine, first, {steps[0]});
        test::OverflowUntil second(*r.trainer, 0);  // never overflows
        trlx::engine::EngineProbe::step_on(*r.engine, second, {steps[1]});
        return trained(*r.engine);
      };
      const auto start = trained(*make(c, world()).engine);
      const auto after_overflow = run(true);
      const auto alone = run(false);
      const double moved = worst_difference(start, after_overflow);
      const double left = worst_difference(after_overflow, alone);
      INFO(preset << ", rank " << world()->rank() << ": the second step moved weights by up to " << moved
                  << "; largest difference to that step alone " << left);
      CHECK(moved > 5e-4);  // it trained (learning rate 1e-3)
      CHECK(left < 1e-6);
    }
  }
}

TEST_CASE("ZeRO shards optimizer state (and stage 2 gradients) to about 1/world, uneven sizes included", "[zero]") {
  auto comm = world();
  const int w = comm->world_size();
  // 1001 + 185 + 7 + 2112 = 3305 elements: not a multiple of 2 or 3, and
  // small buckets put several tensors' boundaries inside rank slices.
  const std::vector<std::vector<int64_t>> shapes = {{1001}, {37, 5}, {7}, {64, 33}};
  for (int stage : {1, 2}) {
    DYNAMIC_SECTION("stage " << stage) {
      torch::manual_seed(7);
      std::vector<torch::Tensor> init;
      int64_t total = 0;
      for (const auto& s : shapes) {
        init.push_back(torch::randn(s));
        total += init.back().numel();
      }
      // Reference: one process, whole tensors, the gradients of all ranks
      // summed by hand.
      std::vector<torch::Tensor> ref;
      for (const auto& t : init) ref.push_back(t.clone().requires_grad_(true));
      torch::optim::AdamW ref_opt(ref, torch::optim::AdamWOptions(1e-2).weight_decay(0.1));
      auto loss_of = [&](const std::vector<torch::Tensor>& ps, int rank) {
        auto l = torch::zeros({});
        for (size_t i = 0; i < ps.size(); ++i)
          l = l + (ps[i] * ps[i]).sum() * static_cast<double>(rank + 1 + static_cast<int>(i));
        return l;
      };
      for (int r = 0; r < w; ++r) loss_of(ref, r).backward();
      torch::nn::utils::clip_grad_norm_(ref, 1.0);
      ref_opt.step();

      std::vector<torch::Tensor> ps;
      std::vector<dist::NamedParam> named;
      for (size_t i = 0; i < init.size(); ++i) {
        ps.push_back(init[i].clone().requires_grad_(true));
        named.push_back({"p" + std::to_string(i), ps.back()});
      }
      dist::ZeroOptions o;
      o.stage = stage;
      o.bucket_cap_mb = 4000.0 / (1024 * 1024);  // about 1000 floats per bucket
      auto strategy = dist::make_zero_strategy(comm, o);
      strategy->setup(named);
      const std::vector<size_t> all_params = {0, 1, 2, 3};
      auto groups = strategy->optimizer_groups({all_params});
      torch::optim::AdamW opt(groups.at(0), torch::optim::AdamWOptions(1e-2).weight_decay(0.1));
      strategy->begin_backward(true, true);
      loss_of(ps, comm->rank()).backward();
      strategy->end_backward();

      int64_t full_grad_bytes = 0, shard_grad_bytes = 0, shard_numel = 0;
      for (const auto& p : ps) full_grad_bytes += bytes_of(p.grad());
      for (const auto& m : groups.at(0)) {
        shard_grad_bytes += bytes_of(m.grad());
        shard_numel += m.numel();
      }
      // The shards tile the parameters: every element is owned by one rank.
      auto owned = torch::tensor({shard_numel}, torch::kInt64);
      comm->all_reduce(owned, dist::ReduceOp::Sum)->wait();
      CHECK(owned.item<int64_t>() == total);
      // At most one element per bucket above an even split.
      const int64_t per_rank_bound = (total / w + 4) * 4;
      CHECK(shard_grad_bytes <= per_rank_bound);
      if (stage == 2)
        CHECK(full_grad_bytes == 0);  // reduced gradients live only in the shards
      else
        CHECK(full_grad_bytes == total * 4);

      CHECK_NOTHROW(strategy->check_grads_in_sync());
      const double norm = strategy->clip_grad_norm(1.0, 1.0);
      CHECK(norm > 1.0);
      opt.step();
      strategy->after_optimizer_step();

      // Adam moments: 8 bytes per element over all ranks, 1/world each.
      const int64_t state = optimizer_state_bytes(opt);
      CHECK(state == shard_numel * 8);
      CHECK(state <= per_rank_bound * 2);
      auto all_state = torch::tensor({state}, torch::kInt64);
      comm->all_reduce(all_state, dist::ReduceOp::Sum)->wait();
      CHECK(all_state.item<int64_t>() == optimizer_state_bytes(ref_opt));

      double worst = 0;
      for (size_t i = 0; i < ps.size(); ++i) worst = std::max(worst, (ps[i] - ref[i]).abs().max().item<double>());
      INFO("largest difference from one process: " << worst);
      CHECK(worst < 1e-6);
      for (const auto& p : ps) CHECK(!p.grad().defined());
    }
  }
}

TEST_CASE("ZeRO keeps fp32 master weights for bf16 parameters (optimizer state on the host when offloaded)", "[zero]") {
  auto comm = world();
  const int w = comm->world_size();
  for (int stage : {1, 2}) {
    DYNAMIC_SECTION("stage " << stage) {
      torch::manual_seed(11);
      auto init = torch::randn({301}).to(torch::kBFloat16);
      // Gradients of small integers, exact in bf16 and in any summation order.
      auto coef = torch::arange(301, torch::kFloat32).remainder(5) - 2;
      auto p = init.clone().requires_grad_(true);
      dist::ZeroOptions o;
      o.stage = stage;
      o.offload_optimizer_device = "cpu";
      auto strategy = dist::make_zero_strategy(comm, o);
      strategy->setup({{"p", p}});
      auto groups = strategy->optimizer_groups({{0}});
      for (const auto& m : groups.at(0)) CHECK(m.scalar_type() == torch::kFloat32);
      torch::optim::AdamW opt(groups.at(0), torch::optim::AdamWOptions(1e-3));
      // One process in fp32 from the same start, gradients summed over ranks.
      auto ref = init.to(torch::kFloat32).requires_grad_(true);
      torch::optim::AdamW ref_opt({ref}, torch::optim::AdamWOptions(1e-3));
      for (int step = 0; step < 3; ++step) {
        opt.zero_grad(true);
        strategy->begin_backward(true, true);
        (p * coef.to(torch::kBFloat16)).sum().backward();
        strategy->end_backward();
        strategy->clip_grad_norm(std::numeric_limits<double>::infinity(), 1.0);
        opt.step();
        strategy->after_optimizer_step();
        ref_opt.zero_grad(true);
        ref.mutable_grad() = coef * static_cast<float>(w);
        ref_opt.step();
      }
      // The masters followed the fp32 run (bf16 parameters alone could not
      // move by 3 steps of 1e-3), and the parameters are their bf16 copies.
      auto full = torch::empty({301});
      auto mine = groups.at(0).empty() ? torch::empty({0}) : groups.at(0).front().detach().contiguous();
      comm->all_gather(mine, full)->wait();
      CHECK((full - ref.detach()).abs().max().item<double>() < 1e-6);
      CHECK(torch::equal(p.detach(), ref.detach().to(torch::kBFloat16)));
    }
  }
}

TEST_CASE("ZeRO-2 flags a gradient that escaped the reduction", "[zero]") {
  auto comm = world();
  auto a = torch::ones({5}, torch::requires_grad());
  dist::ZeroOptions o;
  o.stage = 2;
  auto strategy = dist::make_zero_strategy(comm, o);
  strategy->setup({{"layers.0.a", a}});
  (a * 2).sum().backward();  // outside begin/end_backward
  try {
    strategy->check_grads_in_sync();
    FAIL("the check did not fire");
  } catch (const Error& e) {
    CHECK_THAT(std::string(e.what()), Contains("layers.0.a"));
  }
}

TEST_CASE("a ZeRO run (stages 1-3) resumes exactly with the same world size and says so when it differs", "[zero][resume]") {
  auto comm = world();
  // zero3 under bf16 gathers bf16 copies of float32 shards: saving and
  // resuming must still see the float32 values.
  for (const std::string name : {"zero1", "zero2", "zero3", "zero3-bf16"}) {
    DYNAMIC_SECTION(name) {
      const bool bf16 = name == "zero3-bf16";
      const std::string preset = bf16 ? "zero3" : name;
      // dist_zero_np2 and dist_zero_np3 run side by side under ctest -j: each
      // world size writes (and rank 0 removes) a directory of its own.
      const fs::path root =
          fs::temp_directory_path() / fmt::format("trlx_zero_resume_{}_np{}", name, comm->world_size());
      if (comm->rank() == 0) fs::remove_all(root);
      comm->barrier();
      auto flags = [&](const std::string& out) {
        Flags f{{"accelerate_config", preset},     {"per_device_train_batch_size", "2"},
                {"max_steps", "5"},                {"learning_rate", "1e-3"},
                {"warmup_steps", "2"},             {"save_steps", "100"},
                {"logging_steps", "1"},            {"output_dir", (root / out).string()}};
        if (bf16) f.emplace_back("bf16", "true");
        return f;
      };
      auto full = make(synced_sft_config(flags("full")), comm);
      CHECK(full.engine->train(*full.trainer).steps == 5);

      auto part = make(synced_sft_config(flags("part")), comm);
      test::StopAt stopper(*part.trainer, 3);
      auto r2 = part.engine->train(stopper);
      CHECK(r2.interrupted);
      const fs::path ckpt = root / "part" / "checkpoint-3";
      comm->barrier();
      for (int r = 0; r < comm->world_size(); ++r)
        REQUIRE(fs::exists(ckpt / fmt::format("optimizer-rank{}-of-{}.pt", r, comm->world_size())));
      CHECK(!fs::exists(ckpt / "optimizer.pt"));

      auto resume_flags = flags("part");
      resume_flags.emplace_back("resume_from_checkpoint", ckpt.string());
      auto resumed = make(synced_sft_config(resume_flags), comm);
      CHECK(resumed.engine->train(*resumed.trainer).steps == 5);
      comm->barrier();
      auto saved = model::load_language_model(root / "full", model::HeadKind::CausalLM);
      {
        auto a = trained(*full.engine), b = trained(*resumed.engine);
        size_t differ = 0;
        for (const auto& [k, v] : a) differ += torch::equal(v, b.at(k)) ? 0 : 1;
        CHECK(differ == 0);
        // The final model rank 0 saved is what trained.
        for (const auto& p : saved->named_parameters(true)) CHECK(torch::equal(p.value(), a.at(p.key())));
        if (bf16) {
          // ... in float32, not the bf16 copies the forwards computed with.
          size_t wider = 0;
          for (const auto& [k, v] : a) {
            CHECK(v.scalar_type() == torch::kFloat32);
            wider += torch::equal(v, v.to(torch::kBFloat16).to(torch::kFloat32)) ? 0 : 1;
          }
          CHECK(wider == a.size());
        }
      }
      // The resumed run saved the same model as the uninterrupted one, and
      // both equal one process's run of the same steps.
      auto saved_resumed = model::load_language_model(root / "part", model::HeadKind::CausalLM);
      auto one_flags = flags("single-rank" + std::to_string(comm->rank()));
      one_flags.emplace_back("per_device_train_batch_size", std::to_string(2 * comm->world_size()));
      auto one = make(synced_sft_config(one_flags), dist::make_single_communicator());
      one.engine->train(*one.trainer);
      auto single = model::load_language_model(root / ("single-rank" + std::to_string(comm->rank())),
                                               model::HeadKind::CausalLM);
      auto resumed_params = saved_resumed->named_parameters(true);
      auto single_params = single->named_parameters(true);
      double worst = 0;
      for (const auto& p : saved->named_parameters(true)) {
        CHECK(torch::equal(p.value(), resumed_params[p.key()]));
        worst = std::max(worst, (p.value() - single_params[p.key()]).abs().max().item<double>());
      }
      INFO("largest difference from one process: " << worst);
      // (bf16: the forwards computed with bf16 weights, one process's with
      // float32 ones under autocast.)
      CHECK(worst < (bf16 ? 1e-2 : 1e-5));

      // The same checkpoint as if written by one process more: the error
      // says the optimizer state is per rank and names the world size.
      comm->barrier();
      if (comm->rank() == 0)
        for (int r = comm->world_size(); r-- > 0;)
          fs::rename(ckpt / fmt::format("optimizer-rank{}-of-{}.pt", r, comm->world_size()),
                     ckpt / fmt::format("optimizer-rank{}-of-{}.pt", r, comm->world_size() + 1));
      comm->barrier();
      auto other = make(synced_sft_config(resume_flags), comm);
      try {
        other.engine->train(*other.trainer);
        FAIL("resuming from another world size's optimizer shards did not fail");
      } catch (const InputError& e) {
        CHECK_THAT(std::string(e.what()), Contains("same number of processes"));
      }
      comm->barrier();
      if (comm->rank() == 0) fs::remove_all(root);
    }
  }
}

namespace {

// `inner`, drawing from the CPU generator in every loss as a rank's own
// dropout or sampling would: rank r draws r + 1 numbers, so the ranks'
// generator states part; `draws` keeps each step's last number.
struct DrawPerRank : test::Wrapped {
  int rank;
  std::map<int64_t, double> draws;
  DrawPerRank(engine::Trainer& i, int r) : Wrapped(i), rank(r) {}
  engine::LossOutput loss(engine::Engine& e, const engine::TensorMap& b) override {
    draws[e.global_step()] = torch::rand({rank + 1})[rank].item<double>();
    return inner.loss(e, b);
  }
};

}  // namespace

TEST_CASE("each rank resumes its own random state, not rank 0's", "[zero][resume]") {
  auto comm = world();
  for (const std::string preset : {"multi_gpu", "zero2"}) {
    DYNAMIC_SECTION(preset) {
      const fs::path root = fs::temp_directory_path() / fmt::format("trlx_rng_resume_{}_np{}", preset, comm->world_size());
      if (comm->rank() == 0) fs::remove_all(root);
      comm->barrier();
      auto flags = [&](const std::string& out) {
        return Flags{{"accelerate_config", preset}, {"per_device_train_batch_size", "2"},
                     {"max_steps", "5"},            {"save_steps", "100"},
                     {"output_dir", (root / out).string()}};
      };
      auto full = make(synced_sft_config(flags("full")), comm);
      DrawPerRank full_draws(*full.trainer, comm->rank());
      full.engine->train(full_draws);

      auto part = make(synced_sft_config(flags("part")), comm);
      DrawPerRank part_draws(*part.trainer, comm->rank());
      test::StopAt stopper(part_draws, 3);
      CHECK(part.engine->train(stopper).interrupted);
      const fs::path ckpt = root / "part" / "checkpoint-3";
      comm->barrier();
      CHECK(fs::exists(ckpt / "rng_state.pt"));  // what one process resumes from
      for (int r = 0; r < comm->world_size(); ++r) CHECK(fs::exists(ckpt / fmt::format("rng_state_{}.pt", r)));

      auto resume_flags = flags("part");
      resume_flags.emplace_back("resume_from_checkpoint", ckpt.string());
      auto resumed = make(synced_sft_config(resume_flags), comm);
      DrawPerRank resumed_draws(*resumed.trainer, comm->rank());
      resumed.engine->train(resumed_draws);
      // Steps 4 and 5 (global steps 3 and 4 when their losses run) draw what
      // the uninterrupted run drew, on every rank.
      REQUIRE(resumed_draws.draws.size() == 2);
      for (const auto& [step, x] : resumed_draws.draws) {
        INFO("rank " << comm->rank() << " step " << step);
        CHECK(x == full_draws.draws.at(step));
      }
      comm->barrier();
      if (comm->rank() == 0) fs::remove_all(root);
    }
  }
}

namespace {

// Two optimizer steps of next-token cross-entropy on a fixed global batch of
// 6 sequences, each rank taking its consecutive share; with `stage3` the
// ZeRO-3 strategy wraps the model (checkpointing, when asked, around it as
// the engine does). Returns the logits of a fixed input afterwards (every
// weight shows in them; under ZeRO-3 the forward gathers layer by layer),
// and checks on the way that the layers' parameters hold no storage
// between steps.
// bf16 autocast runs: what the strategy gathers in (`compute`, unset: what
// the units hold) and what a run reports back.
struct Bf16Run {
  std::optional<at::ScalarType> compute;
  class CountingAllocator* counter = nullptr;  // when given: live CPU bytes during each step
  int64_t peak_gathered = 0;    // the strategy's most gathered bytes at once
  int64_t peak_step_bytes = 0;  // the most bytes live during a step beyond those live before it
  bool layer_weights_bf16 = true;  // every layer's weights were bf16 while it ran
};
int64_t counted_live(const class CountingAllocator& c);
int64_t counted_peak(const class CountingAllocator& c);
void reset_counted_peak(class CountingAllocator& c);

torch::Tensor zero3_run(bool stage3, bool lora, int checkpointing, bool reshard, int steps = 2,
                        Bf16Run* bf16 = nullptr) {
  auto comm = world();
  torch::manual_seed(0);
  auto m = model::load_language_model(tiny_model(), model::HeadKind::CausalLM);
  if (lora) {
    model::LoraConfig lc;
    lc.r = 4;
    lc.alpha = 8;
    lc.target_modules = std::vector<std::string>{"all-linear"};
    model::apply_lora(*m, lc);
  }
  m->train();
  std::shared_ptr<dist::Communicator> c = stage3 ? comm : std::shared_ptr<dist::Communicator>(dist::make_single_communicator());
  std::unique_ptr<dist::Strategy> strategy;
  if (stage3) {
    dist::ParameterShardingOptions o;
    o.reshard_after_forward = reshard;
    if (bf16) o.compute_dtype = bf16->compute;
    strategy = dist::make_parameter_sharding_strategy(c, o);
  } else {
    strategy = dist::make_single_strategy(c);
  }
  // Counts the layers whose parameters hold storage while a layer runs (the
  // model calls this runner inside the strategy's gather).
  int64_t most_gathered = 0;
  m->model->run_layer = [&](model::DecoderLayerImpl& layer, const torch::Tensor& x, const torch::Tensor& cos,
                            const torch::Tensor& sin, const model::LayerAttention& attn, model::KVCache* cache) {
    int64_t n = 0;
    for (auto& l : *m->model->layers) {
      bool live = false;
      for (auto& p : l->parameters()) live |= p.storage().nbytes() > 0;
      n += live ? 1 : 0;
    }
    most_gathered = std::max(most_gathered, n);
    if (bf16)
      for (auto& p : layer.parameters()) bf16->layer_weights_bf16 &= p.scalar_type() == torch::kBFloat16;
    return layer.forward(x, cos, sin, attn, cache);
  };
  strategy->wrap_model(*m);
  if (checkpointing) engine::checkpoint_layers(*m, checkpointing == 1);
  std::vector<dist::NamedParam> named;
  for (auto& p : m->named_parameters(true))
    if (p.value().requires_grad()) named.push_back({p.key(), p.value()});
  strategy->setup(named);
  std::vector<size_t> idx(named.size());
  for (size_t i = 0; i < idx.size(); ++i) idx[i] = i;
  auto groups = strategy->optimizer_groups({idx});
  torch::optim::AdamW opt(groups.at(0), torch::optim::AdamWOptions(1e-3).weight_decay(0.01));
  const int64_t vocab = m->config().vocab_size, G = 6, T = 16;
  auto gen = at::detail::createCPUGenerator(1234);
  auto ids = torch::randint(0, vocab, {G, T}, gen, torch::kInt64);
  const dist::Shard mine = dist::shard_of(G, c->world_size(), c->rank());
  const double tokens = static_cast<double>(G * (T - 1));
  for (int step = 0; step < steps; ++step) {
    opt.zero_grad(true);
    strategy->begin_backward(true, mine.numel > 0);
    const int64_t live_before = bf16 && bf16->counter ? counted_live(*bf16->counter) : 0;
    if (bf16 && bf16->counter) reset_counted_peak(*bf16->counter);
    if (mine.numel > 0) {
      auto x = ids.narrow(0, mine.offset, mine.numel);
      // Sharded runs keep no autocast cache (as the engine runs them).
      engine::Autocast ac(bf16 ? std::optional<at::ScalarType>(at::kBFloat16) : std::nullopt, torch::kCPU,
                          !stage3);
      auto logits = m->forward({x, {}, {}}).to(torch::kFloat32);
      auto loss = torch::nn::functional::cross_entropy(
                      logits.slice(1, 0, T - 1).reshape({-1, vocab}), x.slice(1, 1).reshape({-1}),
                      torch::nn::functional::CrossEntropyFuncOptions().reduction(torch::kSum)) /
                  tokens;
      loss.backward();
    }
    if (bf16 && bf16->counter)
      bf16->peak_step_bytes = std::max(bf16->peak_step_bytes, counted_peak(*bf16->counter) - live_before);
    strategy->end_backward();
    strategy->clip_grad_norm(1.0, 1.0);
    opt.step();
    strategy->after_optimizer_step();
    if (stage3)
      for (auto& p : m->model->layers->named_parameters(true)) {
        INFO(p.key());
        CHECK(p.value().storage().nbytes() == 0);
      }
  }
  if (bf16 && stage3) bf16->peak_gathered = strategy->peak_gathered_bytes();
  if (stage3 && steps > 0) {
    // One layer gathered at a time in forward (and in a recompute, with the
    // layer whose backward gathered it); all of them when kept until backward.
    CHECK(most_gathered >= 1);
    if (reshard) CHECK(most_gathered <= 2);
    // The optimizer state is split too: 8 bytes per trainable element over
    // all ranks, about 1/world here.
    int64_t total = 0;
    for (const auto& p : named) total += p.param.numel();
    const int64_t state = optimizer_state_bytes(opt);
    CHECK(state <= (total / c->world_size() + 64) * 8);
  }
  torch::NoGradGuard ng;
  m->eval();
  engine::Autocast ac(bf16 ? std::optional<at::ScalarType>(at::kBFloat16) : std::nullopt, torch::kCPU, !stage3);
  return m->forward({ids.narrow(0, 0, 2), {}, {}}).to(torch::kFloat32);
}

}  // namespace

TEST_CASE("ZeRO-3 steps equal single-process steps, and layers hold only their shards between steps", "[zero][zero3]") {
  struct Case {
    const char* name;
    bool lora;
    int checkpointing;  // 0 none, 1 reentrant, 2 non-reentrant
    bool reshard;
  };
  for (const Case& k : {Case{"plain", false, 0, true}, Case{"kept until backward", false, 0, false},
                        Case{"checkpointing, reentrant", false, 1, true},
                        Case{"checkpointing, non-reentrant", false, 2, true}, Case{"LoRA", true, 0, true},
                        Case{"LoRA + checkpointing, reentrant", true, 1, true},
                        Case{"LoRA + checkpointing, non-reentrant", true, 2, true}}) {
    DYNAMIC_SECTION(k.name) {
      auto single = zero3_run(false, k.lora, k.checkpointing, k.reshard);
      auto sharded = zero3_run(true, k.lora, k.checkpointing, k.reshard);
      const double worst = (single - sharded).abs().max().item<double>();
      // What the two steps moved the logits by, for scale.
      const double moved = (single - zero3_run(false, k.lora, 0, true, 0)).abs().max().item<double>();
      INFO("largest logit difference " << worst << ", training moved them by " << moved);
      CHECK(worst < 1e-4);
      CHECK(moved > 1e-2);
    }
  }
}

namespace {

// Counts the bytes of live CPU tensors: every allocation made while it is
// installed, until its storage is freed. Its pointers are their own context
// (as raw allocations, which some CPU kernels make, require): the inner
// allocation and its size are kept by pointer.
class CountingAllocator final : public c10::Allocator {
 public:
  explicit CountingAllocator(c10::Allocator* base) : base_(base) {}
  c10::DataPtr allocate(size_t n) override {
    auto inner = base_->allocate(n);
    void* data = inner.get();
    {
      std::lock_guard<std::mutex> lock(mutex());
      held()[data] = {std::move(inner), n, this};
    }
    live_ += static_cast<int64_t>(n);
    peak_ = std::max<int64_t>(peak_, live_);
    return {data, data, &CountingAllocator::free, c10::Device(c10::kCPU)};
  }
  c10::DeleterFnPtr raw_deleter() const override { return &CountingAllocator::free; }
  void copy_data(void* dest, const void* src, std::size_t count) const override { default_copy_data(dest, src, count); }
  int64_t live() const { return live_; }
  // The most bytes live at once since the last reset.
  int64_t peak() const { return peak_; }
  void reset_peak() { peak_ = live_.load(); }

 private:
  struct Held {
    c10::DataPtr inner;
    size_t n = 0;
    CountingAllocator* self = nullptr;
  };
  static std::mutex& mutex() {
    static std::mutex m;
    return m;
  }
  static std::unordered_map<void*, Held>& held() {
    static std::unordered_map<void*, Held> h;
    return h;
  }
  static void free(void* p) {
    Held h;
    {
      std::lock_guard<std::mutex> lock(mutex());
      auto it = held().find(p);
      if (it == held().end()) return;
      h = std::move(it->second);
      held().erase(it);
    }
    h.self->live_ -= static_cast<int64_t>(h.n);
  }
  c10::Allocator* base_;
  std::atomic<int64_t> live_{0};
  std::atomic<int64_t> peak_{0};
};

int64_t counted_live(const CountingAllocator& c) { return c.live(); }
int64_t counted_peak(const CountingAllocator& c) { return c.peak(); }
void reset_counted_peak(CountingAllocator& c) { c.reset_peak(); }

// Installs `counting` as the CPU allocator for its lifetime.
struct CountingScope {
  c10::Allocator* base = c10::GetCPUAllocator();
  explicit CountingScope(CountingAllocator& counting) { c10::SetCPUAllocator(&counting, /*priority=*/100); }
  ~CountingScope() { c10::SetCPUAllocator(base, 100); }
};

}  // namespace

TEST_CASE("bf16 under ZeRO-3 gathers bf16 units from float32 shards: half the bytes, no weight copies kept for "
          "backward, results within bf16 tolerance, saved values exact",
          "[zero][zero3][bf16]") {
  auto comm = world();
  // Today's layout (float32 gathered, autocast casting each weight) against
  // the mixed one, on the same steps, both under bf16 autocast.
  CountingAllocator counting(c10::GetCPUAllocator());
  Bf16Run wide, mixed;
  mixed.compute = at::kBFloat16;
  torch::Tensor wide_logits, mixed_logits, single_logits;
  {
    CountingScope scope(counting);
    wide.counter = &counting;
    mixed.counter = &counting;
    wide_logits = zero3_run(true, false, 0, true, 2, &wide);
    mixed_logits = zero3_run(true, false, 0, true, 2, &mixed);
  }
  Bf16Run alone;
  single_logits = zero3_run(false, false, 0, true, 2, &alone);
  // Gathers move bf16: half the bytes.
  CHECK(wide.peak_gathered > 0);
  CHECK(mixed.peak_gathered * 2 == wide.peak_gathered);
  // Each layer runs on bf16 weights, so autocast makes no copy of them; the
  // float32 layout keeps a bf16 copy of every layer's weights from its
  // forward until its backward (2 bytes per layer parameter).
  CHECK(mixed.layer_weights_bf16);
  CHECK_FALSE(wide.layer_weights_bf16);
  auto m = model::load_language_model(tiny_model(), model::HeadKind::CausalLM);
  int64_t layer_params = 0;
  for (auto& p : m->model->layers->parameters()) layer_params += p.numel();
  INFO("peak bytes during a step: float32 gathers " << wide.peak_step_bytes << ", bf16 gathers "
                                                    << mixed.peak_step_bytes << "; layer parameters " << layer_params);
  CHECK(wide.peak_step_bytes - mixed.peak_step_bytes >= layer_params * 2 * 3 / 4);
  // The results: within bf16 tolerance of the float32 layout's and of one
  // process's bf16 run.
  const double scale = wide_logits.abs().max().item<double>();
  const double gap = (mixed_logits - wide_logits).abs().max().item<double>();
  const double gap_single = (mixed_logits - single_logits).abs().max().item<double>();
  INFO("logit scale " << scale << ", gap to float32 gathers " << gap << ", to one process " << gap_single
                      << ", float32 gathers to one process " << (wide_logits - single_logits).abs().max().item<double>());
  CHECK(gap < 0.02 * scale);
  CHECK(gap_single < 0.02 * scale);
}

TEST_CASE("ZeRO-3 and FSDP hold about 1/world of parameters, gradients and optimizer state (bytes of live tensors)",
          "[zero][zero3][memory]") {
  auto comm = world();
  c10::Allocator* base = c10::GetCPUAllocator();
  static CountingAllocator counting(base);
  c10::SetCPUAllocator(&counting, /*priority=*/100);
  struct Restore {
    c10::Allocator* base;
    ~Restore() { c10::SetCPUAllocator(base, 100); }
  } restore{base};
  // Bytes that stay live with the trained engine after two steps: weights
  // and Adam state (and ZeRO's shards and masters); no gradients are kept
  // between steps.
  auto resident = [&](const std::string& preset, std::shared_ptr<dist::Communicator> c) {
    const int64_t before = counting.live();
    auto r = make(synced_sft_config({{"accelerate_config", preset}}), c, /*own_weights=*/true);
    trlx::engine::EngineProbe::step_on(*r.engine, *r.trainer, {{0, 1, 2, 3, 4, 5}});
    trlx::engine::EngineProbe::step_on(*r.engine, *r.trainer, {{6, 7, 0, 1, 2, 3}});
    return counting.live() - before;
  };
  int64_t weights = 0;  // P: bytes of the fp32 weights
  for (const auto& p : model::load_language_model(tiny_model(), model::HeadKind::CausalLM)->parameters())
    weights += p.numel() * p.element_size();
  const double P = static_cast<double>(weights);
  const int64_t single = resident("zero3", dist::make_single_communicator());
  const int w = comm->world_size();
  // One process: weights, gradients, two Adam moments.
  CHECK(std::abs(static_cast<double>(single) - 4 * P) < 0.02 * P);
  for (const std::string preset : {"zero3", "fsdp", "zero2"}) {
    DYNAMIC_SECTION(preset) {
      const double mine = static_cast<double>(resident(preset, comm));
      INFO(preset << ": " << mine << " bytes live on rank " << comm->rank() << " of " << w << " (" << mine / P
                  << " P); one process " << single << " bytes (" << single / P << " P), P = " << weights);
      // ZeRO-3/FSDP: 1/world of the weights (each rank's shard is also its
      // fp32 master) and of the two moments; gradients are freed after the
      // step. ZeRO-2: whole weights plus fp32 master slices and moments.
      const double expected = preset == "zero2" ? P + 3 * P / w : 3 * P / w;
      CHECK(std::abs(mine - expected) < 0.02 * P);
    }
  }
}

namespace {

// Refuses any collective on memory the model held as loaded. Under ZeRO-3
// and FSDP that memory is the host's (the model reaches the device unit by
// unit as it is split), so a collective on it is a host tensor handed to a
// GPU communicator: on CPU ranks host and device are one, and this makes the
// difference visible.
class RefusesLoadedModel final : public test::CheckedCommunicator {
 public:
  RefusesLoadedModel(dist::Communicator& inner, model::LanguageModelImpl& m) : CheckedCommunicator(inner) {
    for (const auto& p : m.parameters()) {
      const auto* b = static_cast<const char*>(p.storage().data());
      held_.emplace_back(b, b + p.storage().nbytes());
    }
  }

 private:
  void check(const char* op, const torch::Tensor& t) const override {
    const auto* b = static_cast<const char*>(t.data_ptr());
    const auto* e = b + t.nbytes();
    for (const auto& [hb, he] : held_)
      if (b < he && hb < e) throw Error(fmt::format("{}: a collective on the model's memory as loaded (host memory on a GPU)", op));
  }
  std::vector<std::pair<const char*, const char*>> held_;
};

// Splits `m` with `strategy` and sets the strategy up over every parameter.
void wrap_and_set_up(dist::Strategy& strategy, model::LanguageModelImpl& m) {
  strategy.wrap_model(m);
  std::vector<dist::NamedParam> named;
  for (auto& p : m.named_parameters(true)) named.push_back({p.key(), p.value()});
  strategy.setup(named);
}

}  // namespace

TEST_CASE("ZeRO-3 and FSDP setup: no collective touches the model as loaded, and every rank starts from rank 0's weights",
          "[zero][zero3]") {
  auto comm = world();
  torch::NoGradGuard ng;
  auto reference = model::load_language_model(tiny_model(), model::HeadKind::CausalLM);
  const int64_t vocab = reference->config().vocab_size;
  auto gen = at::detail::createCPUGenerator(7);
  auto ids = torch::randint(0, vocab, {2, 12}, gen, torch::kInt64);
  const auto expected = reference->forward({ids, {}, {}});
  for (const bool reshard : {true, false}) {
    DYNAMIC_SECTION("reshard after forward " << reshard) {
      auto m = model::load_language_model(tiny_model(), model::HeadKind::CausalLM);
      // Every rank but 0 holds other weights (the final norm included),
      // which only a broadcast from rank 0 puts right.
      if (comm->rank() != 0)
        for (auto& p : m->parameters()) p.add_(0.25 * comm->rank());
      auto guard = std::make_shared<RefusesLoadedModel>(*comm, *m);
      dist::ParameterShardingOptions o;
      o.reshard_after_forward = reshard;
      auto strategy = dist::make_parameter_sharding_strategy(guard, o);
      wrap_and_set_up(*strategy, *m);
      m->eval();
      const auto got = m->forward({ids, {}, {}});
      CHECK((got - expected).abs().max().item<double>() == 0.0);
    }
  }
}

TEST_CASE("ZeRO-3 converts a checkpoint stored in another dtype unit by unit: no rank holds the model converted whole",
          "[zero][zero3][memory]") {
  auto comm = world();
  const int w = comm->world_size();
  // A deeper model than the quickstart's, so one unit is a small part of it,
  // written in bf16 and trained in fp32 (the default dtype). Every rank
  // writes the same files (the same seed) into its own directory.
  test::TempDir dir;
  const auto shared = dir.path / "bf16";
  {
    model::NewModelSpec spec;
    spec.vocab_size = 64;
    spec.hidden_size = 64;
    spec.intermediate_size = 128;
    spec.num_layers = 12;
    spec.tie_word_embeddings = true;
    model::LanguageModel m(model::new_model_config(spec), model::HeadKind::CausalLM);
    model::init_weights(*m, 11);
    m->to(torch::kBFloat16);
    model::save_language_model(shared, *m);
  }
  torch::NoGradGuard ng;
  auto expected_model = model::load_language_model(shared, model::HeadKind::CausalLM, "float32");
  int64_t P = 0, unit = 0;  // bytes of the model in fp32, and of its largest unit
  for (const auto& p : expected_model->parameters()) P += p.numel() * 4;
  for (auto& l : *expected_model->model->layers) {
    int64_t b = 0;
    for (const auto& p : l->parameters()) b += p.numel() * 4;
    unit = std::max(unit, b);
  }
  auto ids = torch::randint(0, 64, {2, 10}, at::detail::createCPUGenerator(5), torch::kInt64);
  const auto expected = expected_model->forward({ids, {}, {}});

  static CountingAllocator counting(c10::GetCPUAllocator());
  // Host bytes held once the model is loaded, and at most while it is split.
  // (Construction allocates the parameters uninitialised, never written, and
  // loading frees them: that is address space, not memory.)
  struct Held {
    int64_t loaded, splitting;
  };
  auto setup = [&](bool defer) {
    CountingScope scope(counting);
    const int64_t before = counting.live();
    auto out = model::load_language_model(shared, model::HeadKind::CausalLM, "float32", defer);
    Held h{counting.live() - before, 0};
    counting.reset_peak();
    auto strategy = dist::make_parameter_sharding_strategy(comm, {});
    wrap_and_set_up(*strategy, *out);
    CHECK(out->deferred_casts() == 0);
    h.splitting = counting.peak() - before;
    out->eval();
    const auto got = out->forward({ids, {}, {}});
    CHECK((got - expected).abs().max().item<double>() == 0.0);
    return h;
  };
  const Held e = setup(false);
  const Held d = setup(true);
  INFO("fp32 model " << P << " bytes, largest unit " << unit << ", world " << w << "; converted on load: " << e.loaded
                     << " held after loading, " << e.splitting << " at most while splitting; converted unit by unit: "
                     << d.loaded << " and " << d.splitting);
  // Converting on load holds the whole fp32 model; converting unit by unit
  // holds nothing but the checkpoint's mapping after loading, and this
  // rank's shards and one unit (and the final norm) while splitting.
  CHECK(e.loaded >= P);
  CHECK(e.splitting >= P);
  CHECK(d.loaded < P / 50);
  CHECK(d.splitting <= P / w + unit + P / 50);
}
