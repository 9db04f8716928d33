// The reference-free preference trainers (CPO, ORPO) against TRL 1.16's
// experimental CPOTrainer and ORPOTrainer: the first three optimizer steps'
// loss, grad norm and every logged metric; logits/* on the fixtures without
// padding (see reference_free_ignored) (fixtures from
// scripts/fixtures/dpo_fixtures.py).
#include "catch_torch.hpp"

#include <map>
#include <set>
#include <string>

#include "support.hpp"
#include "trainer_fixture.hpp"

using namespace trlx;

TEST_CASE("CPO and ORPO: first three steps equal TRL's trainers (loss, grad norm, every metric)", "[cpo][orpo][golden]") {
  const auto cases = test::read_json(test::data_dir() / "dpo" / "reference_free_steps.json");
  REQUIRE(cases.size() >= 2);
  std::set<std::string> logits_compared;
  for (const auto& cs : cases) {
    const auto trainer = cs.at("trainer").get<std::string>();
    const bool logits_comparable = test::reference_free_ignored(cs).empty();
    if (logits_comparable) logits_compared.insert(trainer);
    DYNAMIC_SECTION(cs["name"].get<std::string>()) {
      test::Comparison cmp;
      cmp.ignored = test::reference_free_ignored(cs);
      test::compare_steps(test::reference_free_steps(cs, {}), cs["steps"], cs["name"].get<std::string>(), cmp);
      CHECK(cmp.checked > 0);
    }
  }
  // Both trainers' logits/* are compared on a fixture without padding.
  CHECK(logits_compared == std::set<std::string>{"cpo", "orpo"});
}
