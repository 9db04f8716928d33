// Tests: PPO updates against TRL's PPOTrainer on fixed responses; score heads drawn from the seed.
#include "catch_torch.hpp"

#include "model/decoder.hpp"
#include "online_fixture.hpp"
#include "trainers/ppo.hpp"
#include "support.hpp"

namespace trlx {

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

TEST_CASE("A score head the directory lacks is drawn from the run's seed, and the run's own draws do not move",
          "[ppo][reward]") {
  // The quickstart model has no score head: a value or reward model started
  // from it gets a new one.
  const auto dir = test::tiny_model().string();
  auto head = [&](int64_t seed, int draws_before) {
    for (int i = 0; i < draws_before; ++i) (void)torch::rand({7});
    auto m = trainers::load_score_model(dir, "float32", "value_model_path", seed, /*defer_casts=*/true);
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

  SECTION("a reward model given to GRPO/RLOO as a reward function scores with the seed's head") {
    const std::vector<rewards::Sample> batch = {{.prompt = "Hello", .completion = " world"}};
    auto score = [&](int64_t seed, int draws_before) {
      for (int i = 0; i < draws_before; ++i) (void)torch::rand({7});
      auto f = trainers::make_reward_model_function(dir, torch::kCPU, "float32", /*conversational=*/false, seed);
      const auto s = f->score(batch);
      REQUIRE(s.size() == 1);
      REQUIRE(s[0].has_value());
      return *s[0];
    };
    const double first = score(42, 0);
    CHECK(score(42, 2) == first);
    CHECK(score(43, 0) != first);
  }
}

}  // namespace trlx
