// Engine::generate on one process: the policy generates as it trains (its
// adapters applied), and a training step after a generation round equals
// the same step without it.
#include "support/engine_probe.hpp"
#include "catch_torch.hpp"

#include "model/lora.hpp"
#include "support.hpp"
#include "support/trainers.hpp"

using namespace trlx;

namespace {

using Params = std::map<std::string, torch::Tensor>;

const std::vector<std::vector<int64_t>> kPrompts = {{5, 17, 33, 8, 41}, {9, 60}, {70, 71, 72, 73, 74, 75, 76}};

test::Flags lora_flags() {
  // LoRA dropout draws from the run's random state: a generation round that
  // touched it would change the next step.
  return {{"use_peft", "true"},    {"lora_r", "4"}, {"lora_alpha", "8"}, {"lora_dropout", "0.1"},
          {"learning_rate", "1e-2"}, {"lora_target_modules", "all-linear"}};
}

model::GenerationOptions sampled() {
  model::GenerationOptions o;
  o.do_sample = true;
  o.max_new_tokens = 8;
  o.temperature = 0.9;
  o.num_return_sequences = 2;
  return o;
}

}  // namespace

TEST_CASE("a training step after a generation round equals the same step without it", "[engine][generate]") {
  auto c = test::sft_config(lora_flags());
  auto with = test::make_sft(c), without = test::make_sft(c);
  using P = engine::EngineProbe;
  // The two runs share the process's random state: each step starts from
  // the same seed, and the generation round comes after that seed, so a
  // round that drew from the run's random state would change the step.
  torch::manual_seed(11);
  P::step_on(*with.engine, *with.trainer, {{0, 1, 2, 3}});
  torch::manual_seed(11);
  P::step_on(*without.engine, *without.trainer, {{0, 1, 2, 3}});
  torch::manual_seed(12);
  auto g = with.engine->generate(kPrompts, sampled(), {});
  CHECK(g.completions.size() == kPrompts.size() * 2);
  CHECK(with.engine->training());  // back in training mode
  P::step_on(*with.engine, *with.trainer, {{4, 5, 6, 7}});
  torch::manual_seed(12);
  P::step_on(*without.engine, *without.trainer, {{4, 5, 6, 7}});
  auto a = with.engine->parameter_values(true), b = without.engine->parameter_values(true);
  REQUIRE(a.size() == b.size());
  for (const auto& [name, v] : a) {
    INFO(name);
    CHECK(torch::equal(v, b.at(name)));
  }
}

TEST_CASE("generation runs the policy as trained: adapters applied, eval mode, seeded by run and step",
          "[engine][generate]") {
  auto flags = lora_flags();
  flags.emplace_back("learning_rate", "5e-2");
  auto c = test::sft_config(flags);
  auto run = test::make_sft(c);
  using P = engine::EngineProbe;
  for (int i = 0; i < 5; ++i) P::step_on(*run.engine, *run.trainer, {{0, 1, 2, 3, 4, 5, 6, 7}});
  // The same run at the same step samples the same completions.
  auto again = test::make_sft(c);
  for (int i = 0; i < 5; ++i) P::step_on(*again.engine, *again.trainer, {{0, 1, 2, 3, 4, 5, 6, 7}});
  CHECK(again.engine->generate(kPrompts, sampled(), {}).completions ==
        run.engine->generate(kPrompts, sampled(), {}).completions);

  model::GenerationOptions greedy;
  greedy.max_new_tokens = 12;
  auto g = run.engine->generate(kPrompts, greedy, {});
  auto& policy = P::policy(*run.engine);
  policy.eval();
  auto adapted = model::generate(policy, kPrompts, greedy);
  model::Generation base;
  {
    model::AdaptersDisabled off(policy);
    base = model::generate(policy, kPrompts, greedy);
  }
  policy.train();
  CHECK(g.completions == adapted.completions);
  CHECK(g.completions != base.completions);  // the adapters trained enough to change what is generated
}

TEST_CASE("generation under bf16 autocast runs and stays close to the fp32 run",
          "[engine][generate]") {
  // The GPU runs' precision: the cache takes the attention's dtype, the
  // masks are built in it, and greedy continuations stay those of fp32 on
  // this model (its top two logits are far apart at every step).
  auto fp32 = test::make_sft(test::sft_config({}));
  auto bf16 = test::make_sft(test::sft_config({{"bf16", "true"}}));
  model::GenerationOptions greedy;
  greedy.max_new_tokens = 12;
  greedy.num_return_sequences = 2;
  greedy.max_batch = 3;
  auto a = fp32.engine->generate(kPrompts, greedy, {});
  auto b = bf16.engine->generate(kPrompts, greedy, {});
  REQUIRE(b.completions.size() == kPrompts.size() * 2);
  size_t same = 0;
  for (size_t r = 0; r < a.completions.size(); ++r) same += a.completions[r] == b.completions[r] ? 1 : 0;
  CHECK(same >= a.completions.size() / 2);
}
