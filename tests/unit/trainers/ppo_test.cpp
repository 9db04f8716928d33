// Tests: PPO updates against TRL's PPOTrainer on fixed responses; score heads drawn from the seed; reward
// models without a score head, or with another vocabulary, refused.
#include "catch_torch.hpp"

#include <filesystem>
#include <fstream>
#include <nlohmann/json.hpp>

#include "core/error.hpp"
#include "model/decoder.hpp"
#include "online_fixture.hpp"
#include "text/tokenizer/tokenizer.hpp"
#include "trainers/common.hpp"
#include "trainers/ppo.hpp"
#include "trainers/reward_model_function.hpp"
#include "support.hpp"

namespace trlx {

namespace fs = std::filesystem;
using Catch::Matchers::Contains;

TEST_CASE("PPO: the first 3 updates equal TRL's PPOTrainer on the same responses, every case", "[ppo][golden]") {
  const auto cases = test::read_json(test::data_dir() / "ppo" / "steps.json");
  REQUIRE(cases.size() >= 5);
  for (const auto& cs : cases) {
    const std::string name = "ppo " + cs.at("name").get<std::string>();
    DYNAMIC_SECTION(name) {
      std::vector<engine::TensorMap> rollouts;
      const auto got = test::ppo_steps(cs, {}, &rollouts);
      // Every rollout batch's tensors within 1e-5 of TRL's, then the logged values.
      const double worst = test::check_ppo_rollouts(rollouts, cs, 0);
      auto cmp = test::ppo_comparison(cs);
      test::compare_steps(got, cs.at("steps"), name, cmp);
      CHECK(cmp.checked >= 3 * 14);
      std::printf("parity %-28s rollouts |trlx - TRL| %.3g; logged %.3g over %zu values\n", name.c_str(), worst,
                  cmp.worst, cmp.checked);
    }
  }
}

TEST_CASE("A value model's missing score head is drawn from the run's seed, and the run's own draws do not move",
          "[ppo][reward]") {
  // The quickstart model has no score head: a value model started from it
  // gets a new one.
  const auto dir = test::tiny_model().string();
  auto head = [&](int64_t seed, int draws_before) {
    for (int i = 0; i < draws_before; ++i) (void)torch::rand({7});
    auto m = trainers::load_score_model(dir, "float32", "value_model_path", seed, /*defer_casts=*/true,
                                        /*trains=*/true);
    return m->score->weight.detach().clone();
  };
  const auto a = head(42, 0);
  CHECK(torch::equal(a, head(42, 3)));
  CHECK_FALSE(torch::equal(a, head(43, 0)));

  SECTION("the random stream after loading is the one without it") {
    torch::manual_seed(5);
    const auto without = torch::rand({4});
    torch::manual_seed(5);
    (void)head(42, 0);
    CHECK(torch::equal(torch::rand({4}), without));
  }
}

TEST_CASE("A reward model without a score head is refused, as a reward function and as PPO's reward model",
          "[ppo][reward][errors]") {
  const auto dir = test::tiny_model().string();
  try {
    (void)trainers::load_score_model(dir, "float32", "reward_model_path", 42, /*defer_casts=*/true);
    FAIL("a reward model without score.weight was accepted");
  } catch (const InputError& e) {
    CHECK_THAT(std::string(e.what()), Contains("reward_model_path") && Contains(dir) && Contains("score.weight"));
  }
  CHECK_THROWS_AS(trainers::make_reward_model_function(dir, torch::kCPU, "float32", /*conversational=*/false, 42),
                  InputError);
  // A reward model with its head loads (the PPO fixture's).
  CHECK(trainers::load_score_model((test::data_dir() / "ppo" / "reward_model").string(), "float32",
                                   "reward_model_path", 42, true)
            ->score);
}

TEST_CASE("PPO's score models must share the policy's vocabulary, not only its size", "[ppo][reward][errors]") {
  test::TempDir root("trlx_vocab_check");
  const auto policy_dir = test::tiny_model();
  const auto policy_tok = text::Tokenizer::from_dir(policy_dir);
  // The same tokenizer: accepted. A directory without one: not compared.
  fs::create_directories(root.path / "same");
  fs::copy_file(policy_dir / "tokenizer.json", root.path / "same" / "tokenizer.json");
  CHECK_NOTHROW(trainers::check_same_vocabulary(policy_tok, policy_dir, root.path / "same", "reward_model_path"));
  fs::create_directories(root.path / "none");
  CHECK_NOTHROW(trainers::check_same_vocabulary(policy_tok, policy_dir, root.path / "none", "reward_model_path"));
  // Two tokens' ids swapped: the same size, other ids.
  nlohmann::json j;
  std::ifstream(policy_dir / "tokenizer.json") >> j;
  auto& vocab = j["model"]["vocab"];
  const std::string a = policy_tok.id_to_token(10), b = policy_tok.id_to_token(11);
  REQUIRE(vocab.contains(a));
  REQUIRE(vocab.contains(b));
  vocab[a] = 11;
  vocab[b] = 10;
  fs::create_directories(root.path / "swapped");
  std::ofstream(root.path / "swapped" / "tokenizer.json") << j.dump();
  try {
    trainers::check_same_vocabulary(policy_tok, policy_dir, root.path / "swapped", "value_model_path");
    FAIL("a tokenizer with other ids was accepted");
  } catch (const InputError& e) {
    CHECK_THAT(std::string(e.what()), Contains("value_model_path") && Contains("token id 10") &&
                                          Contains("swapped/tokenizer.json"));
  }
}

}  // namespace trlx
