#pragma once
#include "config/training.hpp"

namespace trlx::trainers {

// Contrastive preference optimisation (TRL's CPOConfig field names and defaults).
struct CPOConfig : config::TrainingConfig {
  double beta = 0;
  double label_smoothing = 0;
  std::string loss_type;
  double cpo_alpha = 0;
  double simpo_gamma = 0;
  double alpha = 0;
};

const config::Schema& cpo_schema();

}  // namespace trlx::trainers
