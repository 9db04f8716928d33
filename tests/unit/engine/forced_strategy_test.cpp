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

Params train(const test::Flags& flags, std::string* strategy) {
  auto r = test::make_sft(test::synced_sft_config(flags), dist::make_single_communicator());
  *strategy = engine::EngineProbe::strategy_name(*r.engine);
  engine::EngineProbe::step_on(*r.engine, *r.trainer, {{0, 1, 2, 3}, {4, 5}});
  engine::EngineProbe::step_on(*r.engine, *r.trainer, {{6, 7, 0, 1, 2}});
  return r.engine->parameter_values(true);
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
        REQUIRE(plain.size() == forced.size());
        double worst = 0;
        for (const auto& [k, v] : plain) worst = std::max(worst, (v - forced.at(k)).abs().max().item<double>());
        INFO("largest difference " << worst);
        CHECK(worst < 1e-6);
      }
    }
  }
}
