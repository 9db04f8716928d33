#pragma once
// What the online trainers (grpo, rloo) share: prompts read and tokenized as
// TRL does, generation rounds (this rank's share of the round's completion
// slots, generated through the engine), scoring by every reward function,
// rewards gathered over ranks so that each group is seen whole, the round's
// metrics under TRL's names, and the round cut into micro-batches with the
// log-probs the loss needs later. A trainer adds its advantages and its loss.
#include <functional>
#include <map>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "engine/engine.hpp"
#include "losses/policy_gradient.hpp"
#include "rewards/reward_function.hpp"
#include "trainers/common.hpp"
#include "trainers/online_config.hpp"

namespace trlx::trainers {

struct PromptExample {
  std::vector<int64_t> prompt_ids;  // after max_prompt_length (the last tokens kept)
  nlohmann::ordered_json prompt;    // as the dataset gives it (text or messages)
  nlohmann::ordered_json columns;   // the row's other columns
};

struct PromptSplit {
  std::vector<PromptExample> examples;
  bool conversational = false;
  size_t truncated = 0;  // prompts cut to max_prompt_length
};

// The prompts of one split: plain text tokenized with the tokenizer's special
// tokens, conversations rendered through the chat template with the
// generation prompt; longer than max_prompt_length: the last tokens kept.
PromptSplit prepare_prompts(const OnlineConfig& config, const std::string& trainer, const text::Tokenizer& tokenizer,
                            const text::ChatTemplate* chat_template, const std::string& split);

// The reward functions reward_funcs names (built-ins and programs; a reward
// model directory runs on this process's device, whole). Programs start now,
// so that one that cannot start stops the run before training.
std::vector<std::unique_ptr<rewards::RewardFunction>> make_reward_functions(const OnlineConfig& config,
                                                                            const std::string& trainer,
                                                                            torch::Device device,
                                                                            bool conversational);

// What a run of an online trainer sets up before its trainer: tokenizer,
// prompts, the policy in an engine (the reference too when beta > 0: the
// offline trainers' choice of ref_model, base with adapters off, or a copy),
// the padding and eos ids, and the reward functions.
struct OnlineRun {
  explicit OnlineRun(TextInputs t) : text(std::move(t)) {}
  TextInputs text;
  PromptSplit prompts;
  std::unique_ptr<engine::Engine> engine;
  int64_t pad_id = 0;
  std::vector<int64_t> eos_ids;  // the tokenizer's, then the model's
  std::vector<std::unique_ptr<rewards::RewardFunction>> reward_functions;
};
OnlineRun set_up_online_run(const OnlineConfig& config, const std::string& trainer);

// The engine's view of an online config: prompts in file order when
// shuffle_dataset is off.
config::TrainingConfig engine_config(const OnlineConfig& config);

class OnlineTrainer : public engine::Trainer {
 public:
  // Completions for this rank's slots of a round, instead of sampling them
  // (parity tests replay a reference's completions): global slot indices ->
  // completion ids, each ending where it ended (an eos included).
  using FixedCompletions = std::function<std::vector<std::vector<int64_t>>(const std::vector<size_t>& slots)>;

  OnlineTrainer(const OnlineConfig& config, std::string name, PromptSplit prompts, text::Tokenizer tokenizer,
                std::vector<std::unique_ptr<rewards::RewardFunction>> reward_functions, int64_t pad_id,
                std::vector<int64_t> eos_ids, int world_size);

  std::string name() const override { return name_; }
  size_t num_examples(const std::string& split) const override;
  engine::TensorMap collate(const std::string& split, const std::vector<size_t>& indices) const override;
  int64_t prompts_per_round() const override { return rounds_.generation_batch_size / config_.num_generations; }
  int64_t micro_batches_per_round() const override { return rounds_.steps_per_generation; }
  int64_t passes_per_round() const override { return config_.num_iterations; }
  Rollout rollout(engine::Engine& engine, const std::vector<size_t>& round_prompts) override;

  // Seconds this rank spent generating, scoring and computing the round's
  // reference and old log-probs (generation_seconds, scoring_seconds,
  // round_logprob_seconds); the rest of train_runtime is training.
  std::map<std::string, double> run_totals() const override;

  void set_fixed_completions(FixedCompletions f) { fixed_ = std::move(f); }
  const OnlineConfig::Rounds& rounds() const { return rounds_; }
  std::vector<std::string> reward_names() const;

 protected:
  // The round's rewards, gathered: [G, F] (NaN: a function skipped the
  // completion), and, when the round computed them, each completion's summed
  // per-token KL from the reference over its completion tokens [G] (RLOO
  // folds it into the reward).
  virtual losses::Advantages advantages(const torch::Tensor& rewards_per_func, const torch::Tensor& weights,
                                        const std::optional<torch::Tensor>& sequence_kl) = 0;
  // Whether the round computes the generating policy's log-probs (the loss
  // needs them when the policy moves between generation and use).
  virtual bool needs_old_logps() const = 0;
  // Whether the reward includes -beta x the completion's KL from the
  // reference (RLOO), logged then as the round's `kl`.
  virtual bool reward_includes_kl() const { return false; }

  // Per-token log-probs (and entropy) of a micro-batch's completion tokens
  // under the model in `role`: [B, C], 0 past each completion. The entropy
  // has no gradient unless `entropy_grad` (an entropy bonus in the loss),
  // which builds the completion positions' logits.
  losses::TokenLogProbs completion_logprobs(engine::Engine& engine, engine::Role role, const engine::TensorMap& batch,
                                            bool entropy, bool entropy_grad = false);

  OnlineConfig config_;
  std::string name_;
  PromptSplit prompts_;
  text::Tokenizer tokenizer_;
  std::vector<std::unique_ptr<rewards::RewardFunction>> reward_functions_;
  int64_t pad_id_;
  std::vector<int64_t> eos_ids_;
  OnlineConfig::Rounds rounds_;
  FixedCompletions fixed_;
  double generation_seconds_ = 0, scoring_seconds_ = 0, logprob_seconds_ = 0;
};

// One line on how the run generates: rounds, groups, passes, rewards.
void log_rounds(const std::string& trainer, const OnlineConfig& config, const OnlineTrainer& t);

// A whole run of the online trainer T on config c: set up, train, the
// process exit code.
template <class T, class C>
int run_online(const C& c, const std::string& trainer) {
  auto r = set_up_online_run(c, trainer);
  T t(c, std::move(r.prompts), std::move(r.text.tokenizer), std::move(r.reward_functions), r.pad_id, r.eos_ids,
      r.engine->world_size());
  log_rounds(trainer, c, t);
  return train_to_exit_code(*r.engine, t);
}

}  // namespace trlx::trainers
