// debug_force_distributed: with one process, every strategy's own code
// (DDP buckets, ZeRO-1/2 sharded optimizer state, ZeRO-3/FSDP parameter
// sharding with gather, release and prefetch) runs instead of the single
// process path, and trains to the same weights. This is what lets one GPU
// check the multi-GPU paths (scripts/gpu_check.sh).
#include "support/engine_probe.hpp"
#include "catch_torch.hpp"

#include "dist/comm/make_communicator.hpp"
#include "support.hpp"
#include "support/trainers.hpp"

using namespace trlx;
using test::operator+;

namespace {

using Params = std::map<std::string, torch::Tensor>;

// Two steps; with `overflow_first`, the first one's gradients overflow (an
// fp16 run skips it).
Params train(const test::Flags& flags, std::string* strategy, bool overflow_first = false) {
  auto r = test::make_sft(test::synced_sft_config(flags), dist::make_single_communicator());
  *strategy = engine::EngineProbe::strategy_name(*r.engine);
  test::OverflowUntil trainer(*r.trainer, overflow_first ? 1 : 0);
  engine::EngineProbe::step_on(*r.engine, trainer, {{0, 1, 2, 3}, {4, 5}});
  engine::EngineProbe::step_on(*r.engine, trainer, {{6, 7, 0, 1, 2}});
  return r.engine->parameter_values(true);
}

double largest_difference(const Params& a, const Params& b) {
  REQUIRE(a.size() == b.size());
  double worst = 0;
  for (const auto& [k, v] : a) worst = std::max(worst, (v - b.at(k)).abs().max().item<double>());
  return worst;
}

}  // namespace

TEST_CASE("debug_force_distributed runs each strategy with one process, to the single process's weights",
          "[engine][strategy]") {
  const std::vector<std::pair<std::string, std::string>> presets = {
      {"multi_gpu", "ddp"}, {"zero1", "zero1"}, {"zero2", "zero2"}, {"zero3", "zero3"}, {"fsdp", "fsdp"}};
  for (const auto& [preset, expected] : presets) {
    DYNAMIC_SECTION(preset) {
      for (const bool lora : {false, true}) {
        test::Flags flags = {{"accelerate_config", preset}, {"gradient_accumulation_steps", "2"}};
        if (lora) flags = flags + test::Flags{{"use_peft", "true"}, {"lora_r", "4"}, {"lora_dropout", "0"}};
        std::string plain_name, forced_name;
        const auto plain = train(flags, &plain_name);
        const auto forced = train(flags + test::Flags{{"debug_force_distributed", "true"}}, &forced_name);
        INFO(preset << (lora ? " with LoRA" : ""));
        CHECK(plain_name == "single");
        CHECK(forced_name.rfind(expected, 0) == 0);
        const double worst = largest_difference(plain, forced);
        INFO("largest difference " << worst);
        CHECK(worst < 1e-6);
      }
    }
  }
}

TEST_CASE("fp16: each forced strategy unscales, clips and skips an overflowed update as the single process does",
          "[engine][strategy][fp16]") {
  // The replicated strategies unscale whole gradients, ZeRO its slices;
  // ZeRO-1 keeps the reduced gradients in the parameters as well.
  for (const std::string preset : {"multi_gpu", "zero1", "zero2", "zero3", "fsdp"}) {
    DYNAMIC_SECTION(preset) {
      const test::Flags flags = {{"accelerate_config", preset}, {"fp16", "true"}, {"max_grad_norm", "0.5"}};
      std::string plain_name, forced_name;
      const auto plain = train(flags, &plain_name, /*overflow_first=*/true);
      const auto forced = train(flags + test::Flags{{"debug_force_distributed", "true"}}, &forced_name, true);
      CHECK(forced_name != "single");
      CHECK(largest_difference(plain, forced) < 1e-6);
      // The overflowed step changed nothing: one update, as a run of one step.
      std::string name;
      auto r = test::make_sft(test::synced_sft_config(flags + test::Flags{{"debug_force_distributed", "true"}}),
                              dist::make_single_communicator());
      engine::EngineProbe::step_on(*r.engine, *r.trainer, {{6, 7, 0, 1, 2}});
      CHECK(largest_difference(r.engine->parameter_values(true), forced) < 1e-6);
    }
  }
}
