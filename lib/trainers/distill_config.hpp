#pragma once
#include "trainers/online_config.hpp"

namespace trlx::trainers {

// TRL 1.16's DistillationConfig: the online fields it shares with the group
// trainers, the teacher, and beta as the divergence's interpolation (not a
// KL coefficient towards a reference).
struct DistillConfig : OnlineConfig {
  std::optional<std::string> teacher_model_name_or_path;
  std::optional<std::string> teacher_model_revision;
  // teacher_model_init_kwargs: the teacher's dtype (null: the run's dtype),
  // and the keys TRL's distillation script fills in (revision, the attention
  // kernel, trust_remote_code, device_map).
  std::optional<std::string> teacher_dtype, teacher_init_revision, teacher_init_attn_implementation,
      teacher_init_device_map;
  std::optional<bool> teacher_init_trust_remote_code;
};

const config::Schema& distill_schema();

}  // namespace trlx::trainers
