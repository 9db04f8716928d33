#pragma once
// GRPO: each prompt's num_generations completions are scored by the reward
// functions, advantages are the rewards against their group's mean (scaled
// by the group's or the batch's std), and the policy learns with a clipped
// importance-weighted objective whose aggregation the loss_type chooses.
// Numbers follow TRL 1.16's GRPOTrainer.
#include "trainers/grpo_config.hpp"
#include "trainers/online.hpp"

namespace trlx::trainers {

class GRPOTrainer : public GroupTrainer {
 public:
  GRPOTrainer(const GRPOConfig& config, PromptSplit prompts, text::Tokenizer tokenizer,
              std::vector<std::unique_ptr<rewards::RewardFunction>> reward_functions, int64_t pad_id,
              std::vector<int64_t> eos_ids, int world_size);
  double num_items(const engine::TensorMap& batch) const override;
  engine::LossOutput loss(engine::Engine& engine, const engine::TensorMap& batch) override;
  RouterAuxLoss router_aux_loss() const override { return RouterAuxLoss::ForMixtures; }
  // The adaptive entropy coefficient and the entropy it last saw.
  nlohmann::json state() const override;
  void restore_state(const nlohmann::json& state) override;

 protected:
  losses::Advantages advantages(const torch::Tensor& rewards_per_func, const torch::Tensor& weights,
                                const std::optional<torch::Tensor>& sequence_kl, int64_t group) override;
  bool needs_old_logps() const override;

 private:
  // The entropy at or above which a token is trained on (top_entropy_quantile),
  // over every rank's completion tokens of this micro-batch.
  torch::Tensor entropy_threshold(engine::Engine& engine, const torch::Tensor& entropy, const torch::Tensor& mask);

  GRPOConfig grpo_;
  losses::PolicyLossOptions loss_options_;
  // The entropy bonus (entropy_coef, use_adaptive_entropy): its coefficient
  // now, the last step's entropy over all ranks, and this step's sums so far.
  double entropy_coef_ = 0;
  double last_world_entropy_ = std::numeric_limits<double>::infinity();
  torch::Tensor window_sums_;  // entropy and token sums of this step's micro-batches so far
  int64_t micro_in_step_ = 0;
};

int run_grpo(const GRPOConfig& config);

}  // namespace trlx::trainers
