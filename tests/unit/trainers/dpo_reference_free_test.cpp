// The reference-free preference trainers (CPO, ORPO) against TRL 1.16's
// experimental CPOTrainer and ORPOTrainer: the first three optimizer steps'
// loss, grad norm and logged metrics (but logits/*, see kReferenceFreeIgnored)
// (fixtures from scripts/fixtures/dpo_fixtures.py).
#include "catch_torch.hpp"

#include "support.hpp"
#include "trainer_fixture.hpp"

using namespace trlx;

TEST_CASE("CPO and ORPO: first three steps equal TRL's trainers (loss, grad norm, every metric)", "[cpo][orpo][golden]") {
  const auto cases = test::read_json(test::data_dir() / "dpo" / "reference_free_steps.json");
  REQUIRE(cases.size() >= 2);
  for (const auto& cs : cases) {
    DYNAMIC_SECTION(cs["name"].get<std::string>()) {
      test::Comparison cmp;
      cmp.ignored = test::kReferenceFreeIgnored;
      test::compare_steps(test::reference_free_steps(cs, {}), cs["steps"], cs["name"].get<std::string>(), cmp);
      CHECK(cmp.checked > 0);
    }
  }
}
