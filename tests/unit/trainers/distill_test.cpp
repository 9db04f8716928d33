// Tests: `trlx distill` against TRL's DistillationTrainer on the same completions.
#include "catch_torch.hpp"

#include "online_fixture.hpp"
#include "support.hpp"

namespace trlx {

TEST_CASE("distill: the first 3 steps equal TRL's DistillationTrainer on the same completions, every case",
          "[distill][golden]") {
  // Forward KL, reverse KL and the generalized JSD at temperatures 0.7, 1
  // and 1.3, text and chat prompts, gradient accumulation, a LoRA student;
  // a wider, deeper teacher with an untied head. Loss, grad norm, entropy,
  // token count and the completion metrics of every step.
  const auto cases = test::read_json(test::data_dir() / "distill" / "steps.json");
  REQUIRE(cases.size() >= 5);
  for (const auto& cs : cases) {
    const std::string name = "distill " + cs.at("name").get<std::string>();
    DYNAMIC_SECTION(name) {
      auto cmp = test::online_comparison(cs);
      const auto got = test::distill_steps(cs, {});
      test::compare_steps(got, test::online_expected_steps(cs), name, cmp);
      CHECK(cmp.checked >= 36);
      std::printf("parity %-32s largest |trlx - TRL| %.3g over %zu values\n", name.c_str(), cmp.worst, cmp.checked);
    }
  }
}

}  // namespace trlx
