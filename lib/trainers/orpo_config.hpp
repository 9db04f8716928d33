#pragma once
#include "config/training.hpp"

namespace trlx::trainers {

// Odds-ratio preference optimisation (TRL's ORPOConfig field names and defaults).
struct ORPOConfig : config::TrainingConfig {
  double beta = 0;
  std::optional<int64_t> padding_value;
};

const config::Schema& orpo_schema();

}  // namespace trlx::trainers
