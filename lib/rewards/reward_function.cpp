// What every reward function shares: the batch it scores and the names its metrics take.
#include "rewards/reward_function.hpp"

namespace trlx::rewards {

std::string completion_text(const Sample& s) {
  if (s.completion.is_string()) return s.completion.get<std::string>();
  if (s.completion.is_array() && !s.completion.empty() && s.completion[0].contains("content") &&
      s.completion[0]["content"].is_string())
    return s.completion[0]["content"].get<std::string>();
  return "";
}

}  // namespace trlx::rewards
