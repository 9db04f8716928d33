#pragma once
#include "config/training.hpp"

namespace trlx::trainers {

struct RewardConfig : config::TrainingConfig {
  std::optional<double> center_rewards_coefficient;
  std::optional<std::string> eos_token, pad_token;
  std::optional<std::string> chat_template_path;
};

const config::Schema& reward_schema();

}  // namespace trlx::trainers
