#pragma once
// On-policy distillation (TRL 1.16's DistillationTrainer): the student
// samples one completion per prompt, a frozen teacher with the same
// vocabulary reads the same tokens, and the student learns the teacher's
// whole next-token distribution at every completion token through the
// generalized Jensen-Shannon divergence that beta picks (0 forward KL, 1
// reverse KL), averaged over the round's completion tokens.
#include "trainers/distill_config.hpp"
#include "trainers/online.hpp"

namespace trlx::trainers {

class DistillTrainer : public GroupTrainer {
 public:
  // `teacher`: what the teacher is (its directory and a fingerprint of its
  // files, see teacher_identity), kept in checkpoints so that a resume
  // against another teacher is refused.
  DistillTrainer(const DistillConfig& config, PromptSplit prompts, text::Tokenizer tokenizer, int64_t pad_id,
                 std::vector<int64_t> eos_ids, int world_size, nlohmann::json teacher);
  // No reward functions (the teacher teaches), and beta is the divergence's.
  static OnlineSetup setup();
  double num_items(const engine::TensorMap& batch) const override;  // completion tokens
  engine::LossOutput loss(engine::Engine& engine, const engine::TensorMap& batch) override;
  std::string describe() const override;
  std::string reference_name() const override { return "teacher"; }
  nlohmann::json state() const override;
  void restore_state(const nlohmann::json& state) override;

 protected:
  losses::Advantages advantages(const torch::Tensor& rewards_per_func, const torch::Tensor& weights,
                                const std::optional<torch::Tensor>& sequence_kl, int64_t group) override;
  bool needs_old_logps() const override { return false; }
  bool needs_ref_logps() const override { return false; }
  bool scores_completions() const override { return false; }

 private:
  DistillConfig distill_;
  nlohmann::json teacher_;
};

// {"model": directory, "fingerprint": hex}: the model's config files whole,
// its weight files by name, size and three 1 MiB samples (a changed or
// other model of the same shape tells apart without reading gigabytes).
nlohmann::json teacher_identity(const std::filesystem::path& dir);

int run_distill(const DistillConfig& config);

}  // namespace trlx::trainers
