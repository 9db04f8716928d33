#pragma once
#include "config/training.hpp"

namespace trlx::trainers {

struct RLOOConfig : config::TrainingConfig {
  int64_t num_generations = 0;
  std::optional<int64_t> generation_batch_size;
  std::optional<int64_t> steps_per_generation;
  int64_t max_completion_length = 0;
  double temperature = 0, top_p = 0;
  int64_t top_k = 0;
  std::optional<double> min_p;
  double repetition_penalty = 0;
  double beta = 0;
  double epsilon = 0;
  std::optional<double> epsilon_high;
  int64_t num_iterations = 0;
  bool normalize_advantages = false;
  bool mask_truncated_completions = false;
  std::optional<std::vector<double>> reward_weights;
  bool ds3_gather_for_generation = true;
  double ds3_gather_for_generation_budget_mb = 0;
};

const config::Schema& rloo_schema();

}  // namespace trlx::trainers
