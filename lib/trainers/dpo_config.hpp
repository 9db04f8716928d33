#pragma once
#include "config/training.hpp"

namespace trlx::trainers {

struct DPOConfig : config::TrainingConfig {
  std::string truncation_mode;
  bool padding_free = false;
  std::optional<std::string> pad_token;
  double beta = 0;
  std::vector<std::string> loss_type;
  std::optional<std::vector<double>> loss_weights;
  double label_smoothing = 0;
  std::string f_divergence_type;
  double f_alpha_divergence_coef = 0;
  std::optional<double> ld_alpha;
  bool use_weighting = false;
  double discopop_tau = 0;
  std::optional<std::string> ref_model;
  bool precompute_ref_log_probs = false;
  std::optional<int64_t> precompute_ref_batch_size;
  bool sync_ref_model = false;
  double ref_model_mixup_alpha = 0;
  int64_t ref_model_sync_steps = 0;
};

const config::Schema& dpo_schema();
const std::vector<std::string>& dpo_loss_types();

}  // namespace trlx::trainers
