// `trlx grpo`: group advantages, the entropy mask and the call to the policy loss.
#include "trainers/grpo.hpp"

#include <cmath>

#include "core/error.hpp"
#include "core/log.hpp"
#include "engine/engine.hpp"

namespace trlx::trainers {

GRPOTrainer::GRPOTrainer(const GRPOConfig& config, PromptSplit prompts, text::Tokenizer tokenizer,
                         std::vector<std::unique_ptr<rewards::RewardFunction>> reward_functions, int64_t pad_id,
                         std::vector<int64_t> eos_ids, int world_size)
    : GroupTrainer(config, "grpo", std::move(prompts), std::move(tokenizer), std::move(reward_functions), pad_id,
                    std::move(eos_ids), world_size),
      grpo_(config),
      entropy_coef_(config.entropy_coef) {
  auto& o = loss_options_;
  o.loss_type = config.loss_type;
  o.sequence_level = config.importance_sampling_level == "sequence";
  o.epsilon_low = config.epsilon;
  o.epsilon_high = config.epsilon_high.value_or(config.epsilon);
  o.delta = config.delta;
  o.beta = config.beta;
  o.bias_correction_kl = config.use_bias_correction_kl;
  o.sapo_temperature_pos = config.sapo_temperature_pos;
  o.sapo_temperature_neg = config.sapo_temperature_neg;
  o.vespo_k_pos = config.vespo_k_pos;
  o.vespo_lambda_pos = config.vespo_lambda_pos;
  o.vespo_k_neg = config.vespo_k_neg;
  o.vespo_lambda_neg = config.vespo_lambda_neg;
  o.off_policy_mask_threshold = config.off_policy_mask_threshold;
}

bool GRPOTrainer::needs_old_logps() const {
  // The policy that generated a round is the one being trained unless the
  // round outlives the step (more micro-batches or passes than one step
  // takes): only then are its log-probs kept from generation time.
  return config_.gradient_accumulation_steps % (rounds_.steps_per_generation * config_.num_iterations) != 0;
}

losses::Advantages GRPOTrainer::advantages(const torch::Tensor& rewards_per_func, const torch::Tensor& weights,
                                           const std::optional<torch::Tensor>&, int64_t group) {
  return losses::grpo_advantages(rewards_per_func, weights, group, grpo_.scale_rewards,
                                 grpo_.multi_objective_aggregation);
}

double GRPOTrainer::num_items(const engine::TensorMap&) const {
  // Each micro-batch's loss arrives already normalised as its loss_type
  // says; the engine divides by (micro-batches x ranks) of the step.
  return 1.0;
}

torch::Tensor GRPOTrainer::entropy_threshold(engine::Engine& engine, const torch::Tensor& entropy,
                                             const torch::Tensor& mask) {
  // Every rank's completion-token entropies, in rank order.
  const auto local = entropy.detach().masked_select(mask > 0).to(torch::kFloat64).cpu().contiguous();
  const double* p = local.data_ptr<double>();
  const auto all = engine.concat_across_ranks(std::vector<double>(p, p + local.numel()));
  if (all.empty()) return torch::Tensor();
  const auto gathered = torch::tensor(all, torch::kFloat64).to(torch::kFloat32);
  // Read on the host (a CPU tensor: no wait) and made where the entropies
  // are, without a copy that would wait for the device.
  const double q = torch::quantile(gathered, 1.0 - grpo_.top_entropy_quantile).item<double>();
  return torch::full({}, q, entropy.options().dtype(torch::kFloat32));
}

engine::LossOutput GRPOTrainer::loss(engine::Engine& engine, const engine::TensorMap& batch) {
  const bool bonus = grpo_.entropy_coef != 0 || grpo_.use_adaptive_entropy;
  const auto lp = completion_logprobs(engine, engine::Role::Policy, batch, true, bonus);
  const auto& logps = lp.logps;
  const auto dev = logps.device();
  const auto mask = batch.at("completion_mask").to(dev, logps.scalar_type());
  const auto adv = batch.at("advantages").to(dev, logps.scalar_type());
  torch::Tensor entropy_mask;
  if (grpo_.top_entropy_quantile < 1.0) {
    const auto thr = entropy_threshold(engine, lp.entropy, mask);
    entropy_mask = thr.defined() ? ((lp.entropy.detach() * mask) >= thr) & (mask > 0) : torch::zeros_like(mask).to(torch::kBool);
  }
  const auto old = batch.count("old_logps") ? batch.at("old_logps").to(dev) : logps.detach();
  const auto ref = batch.count("ref_logps") ? batch.at("ref_logps").to(dev) : torch::Tensor();
  const auto terms = losses::policy_loss_terms(logps, old, ref, adv, mask, entropy_mask, loss_options_);
  const auto& type = grpo_.loss_type;
  const double b = static_cast<double>(logps.size(0));
  // Evaluation (TRL's eval mode): one batch, neither split into a round's
  // micro-batches nor accumulated, and the entropy controller left alone.
  const bool eval = !engine.training();
  // Each micro-batch's loss as TRL's before its division by the step's
  // micro-batches (the engine divides by micro-batches x ranks); the dapo
  // family's over the round's completion tokens of every rank.
  losses::PolicyLossReduction reduction;
  reduction.loss_type = type;
  reduction.max_completion_length = grpo_.max_completion_length;
  if (losses::loss_sums_over_round(type)) reduction.round_completion_tokens = batch.at("round_completion_tokens");
  reduction.micro_batches_per_round = eval ? 1 : rounds_.steps_per_generation;
  reduction.world_size = engine.world_size();
  auto loss = losses::reduce_policy_loss(terms.per_token_loss, mask, reduction);
  engine::LossOutput out;
  auto& m = out.metrics;
  const int64_t ga = config_.gradient_accumulation_steps;
  const bool last_micro = !eval && (++micro_in_step_ % ga) == 0;
  if (bonus) {
    const auto mean_entropy = losses::masked_entropy_mean(lp.entropy, mask, entropy_mask);
    const double apply = losses::applied_entropy_coef(entropy_coef_, grpo_.use_adaptive_entropy, last_world_entropy_,
                                                      grpo_.entropy_target);
    // TRL's policy_loss is the dapo family's loss after its division by
    // the step's micro-batches, the others' before it.
    const bool token_sum = losses::loss_sums_over_round(type);
    m.add_per_batch("policy_loss", loss.detach() / (token_sum && !eval ? static_cast<double>(ga) : 1.0),
                    torch::ones({}, loss.options()));
    loss = loss - apply * mean_entropy;
    if (grpo_.use_adaptive_entropy && !eval) {
      // Device sums over the step's micro-batches, read once at its end.
      const auto effective = entropy_mask.defined() ? mask * entropy_mask.to(mask.scalar_type()) : mask;
      auto sums = torch::stack({(lp.entropy.detach() * effective).sum(), effective.sum()}).to(torch::kFloat64);
      window_sums_ = window_sums_.defined() ? window_sums_ + sums : sums;
      if (last_micro) {
        const auto w = engine.sum_across_ranks(window_sums_).cpu();
        const double world_entropy = w[0].item<double>() / std::max(1.0, w[1].item<double>());
        entropy_coef_ = losses::next_entropy_coef(
            entropy_coef_, world_entropy,
            {grpo_.entropy_target, grpo_.entropy_coef_delta, grpo_.entropy_coef_min, grpo_.entropy_coef_max});
        last_world_entropy_ = world_entropy;
        window_sums_ = torch::Tensor();
      }
    }
    if (last_micro) m.add_entry("entropy_coef", entropy_coef_);
  }
  out.loss_sum = loss;

  // Metrics: a value over every rank's tokens of this micro-batch, per
  // micro-batch (TRL reduces each over ranks and averages over the window).
  auto masked_mean = [&](const std::string& name, const torch::Tensor& x) {
    if (x.size(1) == 1) m.add_per_batch(name, x.detach().sum(), torch::full({}, b, x.options()));
    else m.add_per_batch(name, (x.detach() * mask).sum(), mask.sum());
  };
  if (grpo_.beta != 0) masked_mean("kl", terms.per_token_kl);
  masked_mean("entropy", lp.entropy);
  const auto ratio = terms.ratio.detach();
  const auto advc = adv.unsqueeze(1);
  if (type == "cispo") {
    masked_mean("cispo_clip_ratio", ((ratio > loss_options_.epsilon_high) & (advc > 0)).to(mask.scalar_type()));
  } else if (type == "vespo") {
    masked_mean("vespo/phi_seq_mean", terms.phi);
  } else if (type != "sapo") {
    const auto clip =
        losses::clip_indicators(ratio, advc, loss_options_.epsilon_low, loss_options_.epsilon_high, mask.scalar_type());
    const auto &low = clip.low, &high = clip.high;
    masked_mean("clip_ratio/low_mean", low);
    masked_mean("clip_ratio/high_mean", high);
    masked_mean("clip_ratio/region_mean", clip.region);
    // Per-sequence means (NaN for a sequence without tokens), the smallest
    // and largest over ranks.
    auto seq_mean = [&](const torch::Tensor& x) {
      return x.size(1) == 1 ? x.squeeze(1) : (x * mask).sum(-1) / mask.sum(-1);
    };
    const double inf = std::numeric_limits<double>::infinity();
    const auto lows = seq_mean(low), highs = seq_mean(high);
    m.add_entry("clip_ratio/low_min", torch::nan_to_num(lows, inf, inf, inf).min(), engine::EntryReduce::Min);
    m.add_entry("clip_ratio/high_max", torch::nan_to_num(highs, -inf, -inf, -inf).max(), engine::EntryReduce::Max);
  }
  return out;
}

nlohmann::json GRPOTrainer::state() const {
  if (!grpo_.use_adaptive_entropy) return nullptr;
  nlohmann::json j = {{"entropy_coef", entropy_coef_}};
  // JSON has no infinity: null until a step has measured the entropy.
  j["last_world_entropy"] = std::isfinite(last_world_entropy_) ? nlohmann::json(last_world_entropy_) : nlohmann::json();
  return j;
}

void GRPOTrainer::restore_state(const nlohmann::json& state) {
  if (!grpo_.use_adaptive_entropy || !state.is_object()) return;
  entropy_coef_ = state.value("entropy_coef", entropy_coef_);
  const auto& last = state.value("last_world_entropy", nlohmann::json());
  last_world_entropy_ = last.is_number() ? last.get<double>() : std::numeric_limits<double>::infinity();
}

int run_grpo(const GRPOConfig& c) { return run_online<GRPOTrainer>(c, "grpo"); }

}  // namespace trlx::trainers
