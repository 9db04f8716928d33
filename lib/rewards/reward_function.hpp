#pragma once
// What the online trainers (grpo, rloo, online-dpo) score completions with.
// A reward function sees a batch of completions with what produced them and
// gives one score per completion; a missing score (std::nullopt) means the
// function skips that completion, as TRL's reward functions return None.
// Built-ins (rewards/builtin.hpp) and external programs (rewards/program.hpp)
// implement this interface without tensors; reward models live with the
// trainers, which run them through the engine.
#include <cstdint>
#include <optional>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

namespace trlx::rewards {

// One completion to score.
struct Sample {
  // The prompt as the dataset gives it: a string, or a list of
  // {role, content} messages.
  nlohmann::ordered_json prompt;
  // The completion: a string for a plain-text prompt; for a conversation
  // [{"role": "assistant", "content": "..."}], as TRL hands it over.
  nlohmann::ordered_json completion;
  std::vector<int64_t> completion_ids;
  // The dataset row's other columns (an object; e.g. "solution").
  nlohmann::ordered_json columns = nlohmann::ordered_json::object();
  // Agent rollouts with an environment: the episode the completion ran in.
  std::optional<int64_t> episode;
};

using Scores = std::vector<std::optional<double>>;

class RewardFunction {
 public:
  virtual ~RewardFunction() = default;
  // The name metrics carry: rewards/<name>/mean.
  virtual const std::string& name() const = 0;
  // One score per sample, in order. Errors are trlx::Error (InputError for
  // what the user must fix), naming the function.
  virtual Scores score(const std::vector<Sample>& batch) = 0;
  // The trainer's optimizer step, before a round is scored (programs pass
  // it on, for rewards that change during training).
  virtual void set_step(int64_t /*step*/) {}
  // The weight a function takes when reward_weights (which names the
  // configured functions only) has none for it: an environment's reward,
  // which TRL adds with weight 1. nullopt: a configured function.
  virtual std::optional<double> implied_weight() const { return std::nullopt; }
};

// The text of a completion (a string, or the content of its first message).
std::string completion_text(const Sample& s);

}  // namespace trlx::rewards
