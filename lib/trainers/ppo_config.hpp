#pragma once
#include "trainers/online_config.hpp"

namespace trlx::trainers {

// PPO with a learned value model: each step samples a response for every
// prompt of a rollout batch, scores it with a reward model, turns the score
// and the per-token KL from the reference into per-token rewards, estimates
// advantages with GAE against the value model, and trains the policy
// (clipped ratio) and the value model (clipped value loss) together for
// num_ppo_epochs over num_mini_batches. The shared online fields keep their
// meaning (temperature, ds3_gather_for_generation, ref_model,
// shuffle_dataset); response_length is read as max_completion_length.
struct PPOConfig : OnlineConfig {
  PPOConfig() {
    // TRL samples PPO's responses from the whole distribution at temperature.
    top_p = 1.0;
    top_k = 0;
    repetition_penalty = 1.0;
  }
  std::string reward_model;                 // `reward_model_path`
  std::optional<std::string> value_model_path;  // null: the reward model's weights
  int64_t num_ppo_epochs = 0;
  int64_t num_mini_batches = 0;
  bool whiten_rewards = false;
  double kl_coef = 0;
  std::string kl_estimator;
  double cliprange = 0, vf_coef = 0, cliprange_value = 0, gamma = 0, lam = 0;
  std::optional<int64_t> total_episodes;
  int64_t local_rollout_forward_batch_size = 0;
  std::optional<std::string> stop_token;
  std::optional<int64_t> stop_token_id;
  std::optional<double> missing_eos_penalty;
  // Accepted so that TRL's configs load; refused unless left unset.
  int64_t num_sample_generations = 0;
  std::optional<std::string> sft_model_path, model_adapter_name, ref_adapter_name, exp_name;
  std::optional<int64_t> world_size, num_total_batches, micro_batch_size, local_batch_size, batch_size,
      local_mini_batch_size, mini_batch_size;

  // Prompts (and responses) one process holds per step: per-device batch x
  // gradient accumulation.
  int64_t rollout_rows() const { return per_device_train_batch_size * gradient_accumulation_steps; }
  // Micro-batches of one optimizer update (a mini-batch) on each process.
  int64_t micro_batches_per_update() const { return gradient_accumulation_steps / num_mini_batches; }
};

const config::Schema& ppo_schema();

}  // namespace trlx::trainers
