#pragma once
#include "trainers/online_config.hpp"

namespace trlx::trainers {

// TRL 1.16's DistillationConfig: the online fields it shares with the group
// trainers, the teacher, and beta as the divergence's interpolation (not a
// KL coefficient towards a reference).
struct DistillConfig : OnlineConfig {
  std::optional<std::string> teacher_model_name_or_path;
  std::optional<std::string> teacher_model_revision;
  // teacher_model_init_kwargs: the teacher's dtype (null: the run's dtype).
  std::optional<std::string> teacher_dtype;
};

const config::Schema& distill_schema();

}  // namespace trlx::trainers
