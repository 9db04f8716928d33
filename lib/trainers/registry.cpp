#include "trainers/registry.hpp"

#include "cli/preview.hpp"
#include "trainers/cpo.hpp"
#include "trainers/cpo_config.hpp"
#include "trainers/dpo.hpp"
#include "trainers/dpo_config.hpp"
#include "trainers/kto.hpp"
#include "trainers/kto_config.hpp"
#include "trainers/orpo_config.hpp"
#include "trainers/ppo.hpp"
#include "trainers/ppo_config.hpp"
#include "trainers/reward.hpp"
#include "trainers/reward_config.hpp"
#include "trainers/grpo.hpp"
#include "trainers/grpo_config.hpp"
#include "trainers/online_dpo.hpp"
#include "trainers/online_dpo_config.hpp"
#include "trainers/rloo.hpp"
#include "trainers/rloo_config.hpp"
#include "trainers/sft.hpp"
#include "trainers/sft_config.hpp"

namespace trlx::trainers {

const std::vector<TrainerEntry>& trainer_table() {
  // Rows are added as trainers are built; a row without `run` has its config
  // table (validate, print-config, docs) but cannot train yet.
  static const std::vector<TrainerEntry> table = {
      entry<SFTConfig>("sft", &sft_schema, &run_sft, &cli::preview_sft),
      entry<DPOConfig>("dpo", &dpo_schema, &run_dpo, &cli::preview_dpo),
      entry<KTOConfig>("kto", &kto_schema, &run_kto, &cli::preview_kto),
      entry<RewardConfig>("reward", &reward_schema, &run_reward),
      entry<CPOConfig>("cpo", &cpo_schema, &run_cpo),
      entry<ORPOConfig>("orpo", &orpo_schema, &run_orpo),
      entry<GRPOConfig>("grpo", &grpo_schema, &run_grpo),
      entry<RLOOConfig>("rloo", &rloo_schema, &run_rloo),
      entry<OnlineDPOConfig>("online-dpo", &online_dpo_schema, &run_online_dpo),
      entry<PPOConfig>("ppo", &ppo_schema, &run_ppo),
  };
  return table;
}

const TrainerEntry* find_trainer(const std::string& name) {
  for (const auto& t : trainer_table())
    if (t.name == name) return &t;
  return nullptr;
}

}  // namespace trlx::trainers
