#include "catch_torch.hpp"

#include "online_fixture.hpp"
#include "support.hpp"

namespace trlx {

namespace {

// The largest |got - want| of a rollout tensor, relative above 1.
double largest_difference(const torch::Tensor& got, const nlohmann::json& want) {
  const auto rows = want.get<std::vector<std::vector<double>>>();
  std::vector<double> flat;
  for (const auto& r : rows) flat.insert(flat.end(), r.begin(), r.end());
  auto w = torch::tensor(flat, torch::kFloat64);
  if (got.dim() == 2) w = w.view({static_cast<int64_t>(rows.size()), -1});
  REQUIRE(got.sizes() == w.sizes());
  return ((got.to(torch::kFloat64) - w).abs() / w.abs().clamp_min(1.0)).max().item<double>();
}

double largest_difference_1d(const torch::Tensor& got, const nlohmann::json& want) {
  const auto w = torch::tensor(want.get<std::vector<double>>(), torch::kFloat64);
  REQUIRE(got.sizes() == w.sizes());
  return ((got.to(torch::kFloat64) - w).abs() / w.abs().clamp_min(1.0)).max().item<double>();
}

}  // namespace

TEST_CASE("PPO: the first 3 updates equal TRL's PPOTrainer on the same responses, every case", "[ppo][golden]") {
  const auto cases = test::read_json(test::data_dir() / "ppo" / "steps.json");
  REQUIRE(cases.size() >= 5);
  for (const auto& cs : cases) {
    const std::string name = "ppo " + cs.at("name").get<std::string>();
    DYNAMIC_SECTION(name) {
      std::vector<engine::TensorMap> rollouts;
      const auto got = test::ppo_steps(cs, {}, &rollouts);
      // Scores, rewards, values, advantages and returns of every rollout
      // batch within 1e-5 of TRL's.
      REQUIRE(rollouts.size() == cs.at("rollouts").size());
      double worst = 0;
      for (size_t u = 0; u < rollouts.size(); ++u) {
        const auto& want = cs.at("rollouts").at(u);
        INFO(name << " update " << u + 1);
        worst = std::max(worst, largest_difference_1d(rollouts[u].at("scores"), want.at("scores")));
        for (const char* k : {"rewards", "values", "advantages", "returns", "logprobs", "ref_logprobs"}) {
          const double d = largest_difference(rollouts[u].at(k), want.at(k));
          INFO(k << ": largest difference " << d);
          CHECK(d <= 1e-5);
          worst = std::max(worst, d);
        }
      }
      auto cmp = test::ppo_comparison(cs);
      test::compare_steps(got, cs.at("steps"), name, cmp);
      CHECK(cmp.checked >= 3 * 14);
      std::printf("parity %-28s rollouts |trlx - TRL| %.3g; logged %.3g over %zu values\n", name.c_str(), worst,
                  cmp.worst, cmp.checked);
    }
  }
}

}  // namespace trlx
