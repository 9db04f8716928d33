#pragma once
// Online DPO: each step samples two completions per prompt from the policy,
// ranks them with the reward functions (the higher score is chosen, a tie
// goes to the first), and trains on the pairs with the DPO loss (sigmoid or
// ipo) against the reference. Numbers follow TRL 1.16's OnlineDPOTrainer.
#include "trainers/online.hpp"
#include "trainers/online_dpo_config.hpp"

namespace trlx::trainers {

class OnlineDPOTrainer : public OnlineTrainer {
 public:
  // TRL tokenizes the prompt text without special tokens here, and renders
  // conversations through maybe_apply_chat_template.
  static OnlineSetup setup() { return {.prompt_special_tokens = false, .prompts_as_data_utils = true}; }
  OnlineDPOTrainer(const OnlineDPOConfig& config, PromptSplit prompts, text::Tokenizer tokenizer,
                   std::vector<std::unique_ptr<rewards::RewardFunction>> reward_functions, int64_t pad_id,
                   std::vector<int64_t> eos_ids, int world_size);

  // A round is one optimizer step: every micro-batch of every rank, sampled
  // by the policy being trained.
  int64_t prompts_per_round() const override;
  int64_t micro_batches_per_round() const override { return config_.gradient_accumulation_steps; }
  int64_t passes_per_round() const override { return 1; }
  Rollout rollout(engine::Engine& engine, const std::vector<size_t>& round_prompts) override;

  std::string describe() const override;
  double num_items(const engine::TensorMap& batch) const override;  // pairs
  engine::LossOutput loss(engine::Engine& engine, const engine::TensorMap& batch) override;

 private:
  OnlineDPOConfig dpo_;
  int world_size_;
};

int run_online_dpo(const OnlineDPOConfig& config);

}  // namespace trlx::trainers
