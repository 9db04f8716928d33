#pragma once
// PPO with a value model, as TRL's PPOTrainer computes it. Each step is one
// rollout batch: every process samples a response for each of its prompts,
// the reward model scores the prompt and response (truncated after the stop
// token) at its last token, the per-token KL from the reference becomes a
// per-token penalty, GAE turns rewards and the value model's predictions into
// advantages and returns, and the policy (clipped ratio) and the value model
// (clipped value loss) train together for num_ppo_epochs over
// num_mini_batches shuffled mini-batches.
//
// Responses are laid out as TRL lays them out: [rows, T], T the longest
// response of the process's batch, padded with the pad id; every pad token is
// left out of attention and fed as id 0, and positions count real tokens
// only. Per-token values (log-probs, values, rewards) live on that grid.
#include "trainers/online.hpp"
#include "trainers/ppo_config.hpp"
#include "trainers/reward_model_function.hpp"

namespace trlx::trainers {

class PPOTrainer : public OnlineTrainer {
 public:
  // The reference gives the KL term whatever kl_coef is; the reward model
  // scores the completions' token ids (no reward functions).
  static OnlineSetup setup() { return {.always_reference = true, .scores_itself = true}; }
  // The engine holds the value model and the reward model
  // (Engine::set_reward_model). `eos_id`: the tokenizer's eos
  // (val/num_eos_tokens, missing_eos_penalty); stop_token / stop_token_id say
  // where responses end.
  PPOTrainer(const PPOConfig& config, PromptSplit prompts, text::Tokenizer tokenizer, int64_t pad_id,
             std::optional<int64_t> eos_id, int world_size);

  int64_t prompts_per_round() const override { return ppo_.rollout_rows() * world_size_; }
  int64_t micro_batches_per_round() const override {
    return ppo_.gradient_accumulation_steps * ppo_.num_ppo_epochs;
  }
  int64_t passes_per_round() const override { return 1; }
  int64_t updates_per_step() const override { return ppo_.num_ppo_epochs * ppo_.num_mini_batches; }
  int64_t total_steps(int world_size) const override;
  Rollout rollout(engine::Engine& engine, const std::vector<size_t>& round_prompts) override;
  double num_items(const engine::TensorMap&) const override { return 1.0; }  // each micro-batch's mean, averaged
  engine::LossOutput loss(engine::Engine& engine, const engine::TensorMap& batch) override;
  std::string describe() const override;

  // The last rollout batch of this process, rows in prompt order (for
  // tests): scores [rows], and on the [rows, T] grid responses, logprobs,
  // ref_logprobs, values, rewards, advantages, returns.
  const engine::TensorMap& last_rollout() const { return last_; }

 private:
  // Prompt + response rows in TRL's view (see above): input_ids,
  // attention_mask, position_ids [n, W] and prompt_lengths [n].
  engine::TensorMap pack(const std::vector<int64_t>& rows, const torch::Tensor& responses) const;
  // The reward model's score of each packed row at position `at` [n].
  static torch::Tensor score(engine::Engine& engine, const engine::TensorMap& packed, const torch::Tensor& at);
  // The permutation of the rollout batch's rows for PPO epoch `epoch`.
  std::vector<int64_t> shuffle(int64_t step, int64_t epoch, int rank) const;

  PPOConfig ppo_;
  int world_size_;
  std::optional<int64_t> eos_id_;
  std::vector<int64_t> stop_ids_;
  std::vector<const PromptExample*> rows_;  // this process's prompts of the current rollout batch
  engine::TensorMap last_;
};

int run_ppo(const PPOConfig& config);

// The seed of PPO epoch `epoch`'s shuffle at step `step` on `rank` (a CPU
// generator's randperm of the rollout rows).
uint64_t ppo_shuffle_seed(int64_t seed, int64_t step, int64_t epoch, int rank);

}  // namespace trlx::trainers
