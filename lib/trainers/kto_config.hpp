#pragma once
#include "config/training.hpp"

namespace trlx::trainers {

struct KTOConfig : config::TrainingConfig {
  double beta = 0;
  std::string loss_type;
  double desirable_weight = 1, undesirable_weight = 1;
  std::optional<std::string> ref_model;
  bool precompute_ref_log_probs = false;
  std::optional<int64_t> precompute_ref_batch_size;
  bool sync_ref_model = false;
  double ref_model_mixup_alpha = 0;
  int64_t ref_model_sync_steps = 0;
};

const config::Schema& kto_schema();

}  // namespace trlx::trainers
