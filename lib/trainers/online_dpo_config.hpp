#pragma once
#include <algorithm>

#include "trainers/online_config.hpp"

namespace trlx::trainers {

// Online DPO: two completions per prompt, ranked by the reward functions,
// trained on with the DPO loss against the reference. The shared online
// fields keep their meaning; num_generations is 2, max_completion_length is
// read as `max_new_tokens`, and OnlineConfig::beta holds the first epoch's.
struct OnlineDPOConfig : OnlineConfig {
  OnlineDPOConfig() { num_generations = 2; }
  std::vector<double> betas;  // `beta`: one value, or one per epoch (the last for the rest)
  std::string loss_type;
  std::optional<double> missing_eos_penalty;

  // The beta of an epoch (0-based).
  double beta_at(int64_t epoch) const {
    if (betas.empty()) return beta;
    return betas[static_cast<size_t>(std::min<int64_t>(epoch, static_cast<int64_t>(betas.size()) - 1))];
  }
};

const config::Schema& online_dpo_schema();

}  // namespace trlx::trainers
