#pragma once
#include "trainers/online_config.hpp"

namespace trlx::trainers {

struct GRPOConfig : OnlineConfig {
  std::string loss_type;
  std::string scale_rewards;
  std::string importance_sampling_level;
  std::string multi_objective_aggregation;
  std::optional<double> delta;
  double sapo_temperature_neg = 0, sapo_temperature_pos = 0;
  double vespo_k_pos = 0, vespo_lambda_pos = 0, vespo_k_neg = 0, vespo_lambda_neg = 0;
  double top_entropy_quantile = 0;
  double entropy_coef = 0;
  bool use_adaptive_entropy = false;
  double entropy_coef_min = 0, entropy_coef_max = 0, entropy_coef_delta = 0, entropy_target = 0;
  std::optional<double> off_policy_mask_threshold;
  bool use_bias_correction_kl = true;
};

const config::Schema& grpo_schema();
const std::vector<std::string>& grpo_loss_types();

}  // namespace trlx::trainers
