// Tests: GRPO and RLOO steps, evaluation and completion logs against TRL's on fixed completions.
#include "catch_torch.hpp"

#include "online_fixture.hpp"
#include "support.hpp"

namespace trlx {

namespace {

void check_cases(const std::string& file, const std::string& trainer, const std::string& dir = "grpo",
                 size_t min_checked = 41, size_t min_cases = 4) {
  const auto cases = test::read_json(test::data_dir() / dir / file);
  REQUIRE(cases.size() >= min_cases);
  for (const auto& cs : cases) {
    const std::string name = trainer + " " + cs.at("name").get<std::string>();
    DYNAMIC_SECTION(name) {
      auto cmp = test::online_comparison(cs);
      const auto got = test::online_steps(cs, trainer, {});
      test::compare_steps(got, test::online_expected_steps(cs), name, cmp);
      CHECK(cmp.checked >= min_checked);
      std::printf("parity %-32s largest |trlx - TRL| %.3g over %zu values\n", name.c_str(), cmp.worst, cmp.checked);
    }
  }
}

}  // namespace

TEST_CASE("GRPO: the first 3 steps equal TRL's GRPOTrainer on the same completions, every case", "[grpo][golden]") {
  check_cases("steps.json", "grpo");
}

TEST_CASE("GRPO with tools: the first 3 steps equal TRL's GRPOTrainer(tools=...) on the same turns, every case",
          "[grpo][tools][golden]") {
  // Agent rollouts replayed: the model's turns as TRL generated them, the
  // calls run by the shipped Python adapter serving TRL's own tool functions,
  // the tool results appended through the training template, the budget and
  // iteration limits applied by trlx; the prompts (checked), rewards (looked
  // up by TRL's final completion ids), tool metrics, loss and gradients
  // equal TRL's.
  check_cases("steps.json", "grpo", "agents", 60, 3);
}

TEST_CASE("GRPO with an environment: the first 3 steps equal TRL's GRPOTrainer(environment_factory=...)",
          "[grpo][tools][golden]") {
  // Episodes per rollout, reset with the dataset row (an observation
  // appended to some prompts), the environment's tools acting in the
  // rollout's episode, and its reward after the configured one, weight 1.
  check_cases("env_steps.json", "grpo", "agents", 60, 2);
}

TEST_CASE("RLOO: the first 3 steps equal TRL's RLOOTrainer on the same completions, every case", "[rloo][golden]") {
  check_cases("rloo_steps.json", "rloo");
}

TEST_CASE("GRPO and RLOO: evaluation during training equals TRL's on the same completions", "[grpo][rloo][golden]") {
  // eval_* rows at eval_steps (the test split in file order, eval batches
  // of per_device_eval_batch_size, num_generations_eval per prompt, a short
  // last batch), and training steps unchanged by evaluating.
  const auto cases = test::read_json(test::data_dir() / "grpo" / "eval_steps.json");
  REQUIRE(cases.size() >= 4);
  for (const auto& cs : cases) {
    const auto trainer = cs.at("kind").get<std::string>();
    const std::string name = trainer + " " + cs.at("name").get<std::string>();
    DYNAMIC_SECTION(name) {
      auto cmp = test::online_comparison(cs);
      const auto want = test::online_expected_steps(cs);
      const auto got = test::online_steps(cs, trainer, {});
      REQUIRE(got.size() == want.size());
      test::compare_steps(got, want, name, cmp);
      // Every eval row has the loss, the reward and the completion lengths.
      CHECK(cmp.checked >= 30 * cs.at("evals").size());
      std::printf("parity %-32s largest |trlx - TRL| %.3g over %zu values\n", name.c_str(), cmp.worst, cmp.checked);
    }
  }
}

TEST_CASE("GRPO and RLOO: log_completions writes each logging step's round as TRL's GRPOTrainer writes it",
          "[grpo][rloo][golden]") {
  // output_dir/completions/completions_<step>.parquet at every logging step:
  // the last generation round (a step that generates none repeats it under
  // its own step), TRL's columns and types, the prompt as the dataset gives
  // it, the completion decoded without special tokens, null for a skipped
  // reward. TRL's RLOOTrainer builds the same table and writes no file; trlx
  // writes it for both. Training is the same as without logging.
  const auto cases = test::read_json(test::data_dir() / "grpo" / "completions_log.json");
  REQUIRE(cases.size() >= 4);
  for (const auto& cs : cases) {
    const auto trainer = cs.at("kind").get<std::string>();
    const std::string name = trainer + " " + cs.at("name").get<std::string>();
    DYNAMIC_SECTION(name) {
      test::TempDir out("trlx_completions");
      auto cmp = test::online_comparison(cs);
      const auto got = test::online_steps(cs, trainer, {nullptr, {}, out.path});
      test::compare_steps(got, test::online_expected_steps(cs), name, cmp);
      test::check_completion_logs(cs, out.path);
    }
  }
}

TEST_CASE("Online DPO: the first 3 steps equal TRL's OnlineDPOTrainer on the same completions, every case",
          "[online-dpo][golden]") {
  // 13 values a step; the 4 that TRL sums over padding only in `nopad`.
  check_cases("steps.json", "online-dpo", "online_dpo", 39);
}

}  // namespace trlx
