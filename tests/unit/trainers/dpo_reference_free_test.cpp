// The reference-free preference trainers (CPO, ORPO) against TRL 1.16's
// experimental CPOTrainer and ORPOTrainer: the first three optimizer steps'
// loss, grad norm and every logged metric, logits/* over padded batches
// included (fixtures from scripts/fixtures/dpo_fixtures.py).
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
  std::set<std::string> padded;
  for (const auto& cs : cases) {
    if (cs.value("padded", true)) padded.insert(cs.at("trainer").get<std::string>());
    DYNAMIC_SECTION(cs["name"].get<std::string>()) {
      test::Comparison cmp;
      test::compare_steps(test::reference_free_steps(cs, {}), cs["steps"], cs["name"].get<std::string>(), cmp);
      CHECK(cmp.checked > 0);
    }
  }
  // logits/* average over padding positions too: both trainers have a
  // fixture whose batches are padded.
  CHECK(padded == std::set<std::string>{"cpo", "orpo"});
}
