// The trainer table: each trainer's schema and entry points, one row each.
#include "trainers/registry.hpp"

#include "trainers/cpo.hpp"
#include "trainers/cpo_config.hpp"
#include "trainers/dpo.hpp"
#include "trainers/distill.hpp"
#include "trainers/distill_config.hpp"
#include "trainers/dpo_config.hpp"
#include "trainers/kto.hpp"
#include "trainers/kto_config.hpp"
#include "trainers/orpo_config.hpp"
#include "trainers/ppo.hpp"
#include "trainers/ppo_config.hpp"
#include "trainers/preview.hpp"
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
  static const std::vector<TrainerEntry> table = [] {
    std::vector<TrainerEntry> t = {
        entry<SFTConfig>(&sft_schema, &run_sft, &preview_sft),
        entry<DPOConfig>(&dpo_schema, &run_dpo, &preview_dpo),
        entry<KTOConfig>(&kto_schema, &run_kto, &preview_kto),
        entry<RewardConfig>(&reward_schema, &run_reward, &preview_reward),
        entry<CPOConfig>(&cpo_schema, &run_cpo, &preview_cpo),
        entry<ORPOConfig>(&orpo_schema, &run_orpo, &preview_orpo),
        entry<GRPOConfig>(&grpo_schema, &run_grpo),
        entry<RLOOConfig>(&rloo_schema, &run_rloo),
        entry<OnlineDPOConfig>(&online_dpo_schema, &run_online_dpo),
        entry<PPOConfig>(&ppo_schema, &run_ppo),
        entry<DistillConfig>(&distill_schema, &run_distill),
    };
    // The names are config::trainer_names()'s (the LibTorch-free table that
    // validate and the `trainer:` field read), row for row.
    const auto& names = config::trainer_names();
    bool same = t.size() == names.size();
    for (size_t i = 0; same && i < t.size(); ++i) same = t[i].name == names[i];
    if (!same) throw Error("internal: the trainer table and config::trainer_names() disagree");
    return t;
  }();
  return table;
}

const TrainerEntry* find_trainer(const std::string& name) {
  for (const auto& t : trainer_table())
    if (t.name == name) return &t;
  return nullptr;
}

}  // namespace trlx::trainers
