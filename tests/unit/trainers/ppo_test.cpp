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

TEST_CASE("PPO: a score head the directory lacks is drawn from the run's seed, whatever ran before", "[ppo]") {
  // The quickstart model has no score head: a value model started from it
  // gets a new one.
  auto head = [](int64_t seed, int draws_before) {
    for (int i = 0; i < draws_before; ++i) (void)torch::rand({7});
    auto m = trainers::load_score_model(test::tiny_model().string(), "float32", "value_model_path", seed);
    return m->score->weight.detach().clone();
  };
  const auto a = head(42, 0);
  CHECK(torch::equal(a, head(42, 3)));
  CHECK_FALSE(torch::equal(a, head(43, 0)));
}

}  // namespace trlx
