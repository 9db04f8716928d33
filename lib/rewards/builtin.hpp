#pragma once
// TRL's built-in reward functions (trl.rewards), by their TRL names, scoring
// exactly as TRL's functions do:
//
//   think_format_reward           1.0 when the completion is "<think>...</think>..."
//   get_soft_overlong_punishment  DAPO's soft length penalty (a factory: parameters)
//   get_repetition_penalty_reward penalty for repeated token n-grams (a factory)
//   get_cosine_scaled_reward      correctness scaled by length on a cosine (a factory)
//   accuracy_reward               1.0 when the completion's answer equals the
//                                 dataset's `solution` (math_verify's comparison)
//   reasoning_accuracy_reward     the same on the text after the reasoning
//
// Each reward's name() is the name TRL logs it under (a factory's inner
// function: "soft_overlong_punishment_reward", ...), so the metrics
// rewards/<name>/mean match TRL's. docs/rewards_builtin.md has the details.
#include <memory>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "rewards/reward_function.hpp"

namespace trlx::rewards {

bool is_builtin_reward(const std::string& name);
std::vector<std::string> builtin_reward_names();

// `params`: the function's parameters as a JSON object (null or {} for none),
// with TRL's defaults for those left out. InputError, naming the function and
// the parameter, for an unknown name, an unknown parameter, a missing
// required one or a bad value.
std::unique_ptr<RewardFunction> make_builtin_reward(const std::string& name, const nlohmann::json& params);

}  // namespace trlx::rewards
