#include "trainers/registry.hpp"

#include "trainers/cpo.hpp"
#include "trainers/cpo_config.hpp"
#include "trainers/dpo.hpp"
#include "trainers/dpo_config.hpp"
#include "trainers/kto.hpp"
#include "trainers/kto_config.hpp"
#include "trainers/reward.hpp"
#include "trainers/reward_config.hpp"
#include "trainers/orpo_config.hpp"
#include "trainers/rloo_config.hpp"
#include "trainers/sft.hpp"
#include "trainers/sft_config.hpp"

namespace trlx::trainers {

namespace {
template <class C>
std::shared_ptr<void> make() {
  return std::make_shared<C>();
}
}  // namespace

const std::vector<TrainerEntry>& trainer_table() {
  // Rows are added as trainers are built; a row without `run` has its config
  // table (validate, print-config, docs) but cannot train yet.
  static const std::vector<TrainerEntry> table = {
      {"sft", &sft_schema, &make<SFTConfig>, &run_sft, &preview_sft},
      {"dpo", &dpo_schema, &make<DPOConfig>, &run_dpo, &preview_dpo},
      {"kto", &kto_schema, &make<KTOConfig>, &run_kto, &preview_kto},
      {"reward", &reward_schema, &make<RewardConfig>, &run_reward, {}},
      {"cpo", &cpo_schema, &make<CPOConfig>, &run_cpo, {}},
      {"orpo", &orpo_schema, &make<ORPOConfig>, &run_orpo, {}},
      {"rloo", &rloo_schema, &make<RLOOConfig>, {}, {}},
  };
  return table;
}

const TrainerEntry* find_trainer(const std::string& name) {
  for (const auto& t : trainer_table())
    if (t.name == name) return &t;
  return nullptr;
}

}  // namespace trlx::trainers
