#pragma once
// RLOO: each completion's reward (less beta x its KL from the reference)
// against the mean reward of the other completions of its prompt, and a
// clipped objective on the whole sequence's importance ratio. Numbers follow
// TRL 1.16's RLOOTrainer.
#include "trainers/online.hpp"
#include "trainers/rloo_config.hpp"

namespace trlx::trainers {

class RLOOTrainer : public GroupTrainer {
 public:
  RLOOTrainer(const RLOOConfig& config, PromptSplit prompts, text::Tokenizer tokenizer,
              std::vector<std::unique_ptr<rewards::RewardFunction>> reward_functions, int64_t pad_id,
              std::vector<int64_t> eos_ids, int world_size);
  double num_items(const engine::TensorMap& batch) const override;  // sequences
  engine::LossOutput loss(engine::Engine& engine, const engine::TensorMap& batch) override;
  RouterAuxLoss router_aux_loss() const override { return RouterAuxLoss::ForMixtures; }

 protected:
  losses::Advantages advantages(const torch::Tensor& rewards_per_func, const torch::Tensor& weights,
                                const std::optional<torch::Tensor>& sequence_kl, int64_t group) override;
  bool needs_old_logps() const override { return true; }
  bool reward_includes_kl() const override { return config_.beta != 0; }

 private:
  RLOOConfig rloo_;
};

int run_rloo(const RLOOConfig& config);

}  // namespace trlx::trainers
