// `trlx rloo`: leave-one-out advantages and the call to the RLOO objective.
#include "trainers/rloo.hpp"

#include "core/error.hpp"
#include "engine/engine.hpp"

namespace trlx::trainers {

RLOOTrainer::RLOOTrainer(const RLOOConfig& config, PromptSplit prompts, text::Tokenizer tokenizer,
                         std::vector<std::unique_ptr<rewards::RewardFunction>> reward_functions, int64_t pad_id,
                         std::vector<int64_t> eos_ids, int world_size)
    : GroupTrainer(config, "rloo", std::move(prompts), std::move(tokenizer), std::move(reward_functions), pad_id,
                    std::move(eos_ids), world_size),
      rloo_(config) {}

losses::Advantages RLOOTrainer::advantages(const torch::Tensor& rewards_per_func, const torch::Tensor& weights,
                                           const std::optional<torch::Tensor>& sequence_kl, int64_t group) {
  std::optional<std::pair<double, double>> clip;
  if (rloo_.reward_clip_range) clip = std::make_pair((*rloo_.reward_clip_range)[0], (*rloo_.reward_clip_range)[1]);
  return losses::rloo_advantages(rewards_per_func, weights, group, clip, sequence_kl, config_.beta,
                                 rloo_.normalize_advantages);
}

double RLOOTrainer::num_items(const engine::TensorMap& batch) const {
  return static_cast<double>(batch.at("advantages").size(0));
}

engine::LossOutput RLOOTrainer::loss(engine::Engine& engine, const engine::TensorMap& batch) {
  const auto lp = completion_logprobs(engine, engine::Role::Policy, batch, true);
  const auto dev = lp.logps.device();
  const auto mask = batch.at("completion_mask").to(dev, lp.logps.scalar_type());
  const auto adv = batch.at("advantages").to(dev, lp.logps.scalar_type());
  // Evaluation keeps no generating policy's log-probs: the ratio is 1.
  const auto old = batch.count("old_logps") ? batch.at("old_logps").to(dev) : torch::Tensor();
  const double lo = config_.epsilon, hi = config_.epsilon_high.value_or(config_.epsilon);
  const auto terms = losses::rloo_loss(lp.logps, old, mask, adv, lo, hi);
  const auto& ratio = terms.ratio;
  engine::LossOutput out;
  out.loss_sum = terms.loss_sum;
  auto& m = out.metrics;
  const double b = static_cast<double>(adv.size(0));
  m.add_per_batch("entropy", (lp.entropy.detach() * mask).sum(), mask.sum());
  const auto clip = losses::clip_indicators(ratio, adv, lo, hi, torch::kFloat32);
  const auto count = torch::full({}, b, clip.low.options());
  m.add_per_batch("clip_ratio/low_mean", clip.low.sum(), count);
  m.add_entry("clip_ratio/low_min", clip.low.min(), engine::EntryReduce::Min);
  m.add_per_batch("clip_ratio/high_mean", clip.high.sum(), count);
  m.add_entry("clip_ratio/high_max", clip.high.max(), engine::EntryReduce::Max);
  m.add_per_batch("clip_ratio/region_mean", clip.region.sum(), count);
  return out;
}

int run_rloo(const RLOOConfig& c) { return run_online<RLOOTrainer>(c, "rloo"); }

}  // namespace trlx::trainers
