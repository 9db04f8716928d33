#pragma once
#include "trainers/online_config.hpp"

namespace trlx::trainers {

struct RLOOConfig : OnlineConfig {
  bool normalize_advantages = false;
  std::optional<std::vector<double>> reward_clip_range;
};

const config::Schema& rloo_schema();

}  // namespace trlx::trainers
