// The online trainers' advantages and policy-gradient losses as pure tensor functions.
#include "losses/policy_gradient.hpp"

#include <torch/torch.h>

#include <algorithm>
#include <cmath>
#include <stdexcept>

namespace trlx::losses {

torch::Tensor nanstd(const torch::Tensor& x, std::optional<int64_t> dim, bool keepdim) {
  const auto mean = dim ? torch::nanmean(x, *dim, true) : torch::nanmean(x).reshape(std::vector<int64_t>(x.dim(), 1));
  const auto sq = (x - mean).pow(2);
  auto variance = dim ? torch::nanmean(sq, *dim, true) : torch::nanmean(sq).reshape(std::vector<int64_t>(x.dim(), 1));
  const auto valid = (~torch::isnan(x)).to(x.scalar_type());
  const auto count = dim ? valid.sum(*dim, true) : valid.sum().reshape(std::vector<int64_t>(x.dim(), 1));
  const auto correction =
      torch::where(count > 1, count / (count - 1), torch::full_like(count, std::numeric_limits<double>::quiet_NaN()));
  auto std = (variance * correction).sqrt();
  if (keepdim) return std;
  return dim ? std.squeeze(*dim) : std.reshape({});
}

Advantages grpo_advantages(const torch::Tensor& rewards_per_func, const torch::Tensor& weights,
                           int64_t num_generations, const std::string& scale_rewards, const std::string& aggregation) {
  const int64_t n = rewards_per_func.size(0), f = rewards_per_func.size(1);
  const auto unscorable = torch::isnan(rewards_per_func).all(1);
  const auto nan = std::numeric_limits<double>::quiet_NaN();
  Advantages out;
  torch::Tensor std_rewards;
  if (aggregation == "sum_then_normalize") {
    auto rewards = torch::nansum(rewards_per_func * weights.unsqueeze(0), 1).masked_fill(unscorable, nan);
    const auto mean = torch::nanmean(rewards.view({-1, num_generations}), 1).repeat_interleave(num_generations);
    if (scale_rewards == "batch")
      std_rewards = n > 1 ? nanstd(rewards).expand_as(rewards) : torch::zeros_like(rewards);
    else if (num_generations > 1)
      std_rewards = nanstd(rewards.view({-1, num_generations}), 1).repeat_interleave(num_generations);
    else  // one completion per prompt (evaluation only): no spread
      std_rewards = torch::zeros_like(rewards);
    auto adv = rewards - mean;
    if (scale_rewards != "none") adv = adv / (std_rewards + 1e-4);
    out.advantages = adv;
  } else if (aggregation == "normalize_then_sum") {
    const auto grouped = rewards_per_func.view({-1, num_generations, f});
    const auto mean_k = torch::nanmean(grouped, 1, true);
    const auto std_k = num_generations > 1 ? nanstd(grouped, 1, true) : torch::zeros_like(mean_k);
    auto rewards = torch::nansum(((grouped - mean_k) / (std_k + 1e-4)).view({-1, f}) * weights.unsqueeze(0), 1)
                       .masked_fill(unscorable, nan);
    std_rewards = n > 1 ? nanstd(rewards).expand_as(rewards) : torch::zeros_like(rewards);
    out.advantages = (rewards - torch::nanmean(rewards)) / (std_rewards + 1e-4);
  } else {
    throw std::invalid_argument("grpo_advantages: unknown aggregation " + aggregation);
  }
  out.std_is_zero = torch::isclose(std_rewards, torch::zeros_like(std_rewards));
  out.advantages = torch::nan_to_num(out.advantages, 0.0);
  // The logged reward is the weighted sum of the raw rewards, whatever the aggregation.
  out.rewards = torch::nansum(rewards_per_func * weights.unsqueeze(0), 1).masked_fill(unscorable, nan);
  return out;
}

Advantages rloo_advantages(const torch::Tensor& rewards_per_func, const torch::Tensor& weights, int64_t num_generations,
                           const std::optional<std::pair<double, double>>& clip_range,
                           const std::optional<torch::Tensor>& sequence_kl, double beta, bool normalize) {
  const auto unscorable = torch::isnan(rewards_per_func).all(1);
  const auto nan = std::numeric_limits<double>::quiet_NaN();
  auto rewards = torch::nansum(rewards_per_func * weights.unsqueeze(0), 1).masked_fill(unscorable, nan);
  if (clip_range) rewards = rewards.clamp(clip_range->first, clip_range->second);
  if (sequence_kl && beta != 0) rewards = rewards - beta * *sequence_kl;
  const auto grouped = rewards.view({-1, num_generations});
  Advantages out;
  const auto std_rewards =
      num_generations > 1 ? nanstd(grouped, 1) : torch::zeros({grouped.size(0)}, grouped.options());
  out.std_is_zero = torch::isclose(std_rewards, torch::zeros({1}, grouped.options()));
  // The baseline of a completion: the mean of its scorable siblings.
  const auto scorable = (~torch::isnan(grouped)).to(grouped.scalar_type()).sum(1, true);
  const auto baselines = ((torch::nansum(grouped, 1, true) - grouped) / (scorable - 1)).view({-1});
  auto adv = num_generations > 1 ? rewards - baselines : torch::zeros_like(rewards);
  if (normalize) adv = (adv - torch::nanmean(adv)) / (nanstd(adv) + 1e-4);
  out.advantages = torch::nan_to_num(adv, 0.0);
  out.rewards = torch::nansum(rewards_per_func * weights.unsqueeze(0), 1).masked_fill(unscorable, nan);
  return out;
}

PolicyLossTerms policy_loss_terms(const torch::Tensor& logps, const torch::Tensor& old_logps,
                                  const torch::Tensor& ref_logps, const torch::Tensor& advantages,
                                  const torch::Tensor& mask, const torch::Tensor& entropy_mask,
                                  const PolicyLossOptions& o) {
  const auto adv = advantages.dim() == 1 ? advantages.unsqueeze(1) : advantages;
  const auto m = mask.to(logps.scalar_type());
  PolicyLossTerms t;
  const auto log_ratio = logps - old_logps;
  auto log_weights = o.sequence_level
                         ? ((log_ratio * m).sum(-1) / m.sum(-1).clamp_min(1.0)).unsqueeze(-1)
                         : log_ratio;
  auto coef_1 = torch::exp(log_weights);
  t.ratio = coef_1;
  if (o.beta != 0) {
    const auto d = ref_logps - logps;
    t.per_token_kl = torch::exp(d) - d - 1;
    if (o.bias_correction_kl) t.per_token_kl = t.per_token_kl * coef_1;
  }
  torch::Tensor loss;
  if (o.loss_type == "cispo") {
    loss = -torch::clamp_max(coef_1, o.epsilon_high).detach() * adv * logps;
  } else if (o.loss_type == "sapo") {
    const auto temps = torch::where(adv > 0, torch::full_like(adv, o.sapo_temperature_pos),
                                    torch::full_like(adv, o.sapo_temperature_neg));
    loss = -(torch::sigmoid(temps * (coef_1 - 1)) * 4 / temps) * adv;
  } else if (o.loss_type == "vespo") {
    // phi(w) = e^lambda w^k e^(-lambda w), w the sequence ratio, in log space;
    // a gradient-free weight on -A log p.
    torch::NoGradGuard no_grad;
    const double lower = std::log(1e-8);
    const auto seq = (log_ratio.detach().clamp(-20.0, 20.0) * m).sum(-1, true);
    const auto log_w = seq.clamp(lower, 20.0);
    const auto nonneg = adv >= 0;
    const auto k = torch::where(nonneg, torch::full_like(adv, o.vespo_k_pos), torch::full_like(adv, o.vespo_k_neg));
    const auto lambda = torch::where(nonneg, torch::full_like(adv, o.vespo_lambda_pos),
                                     torch::full_like(adv, o.vespo_lambda_neg))
                            .clamp_min(1e-4);
    t.phi = torch::nan_to_num(torch::exp(lambda + k * log_w - lambda * torch::exp(log_w)), 0.0, 0.0, 0.0);
  }
  if (o.loss_type == "vespo") {
    loss = -t.phi * adv * logps;
  } else if (o.loss_type != "cispo" && o.loss_type != "sapo") {
    const auto coef_2 = torch::clamp(coef_1, 1 - o.epsilon_low, 1 + o.epsilon_high);
    const auto c1 = o.delta ? torch::clamp_max(coef_1, *o.delta) : coef_1;
    loss = -torch::min(c1 * adv, coef_2 * adv);
  }
  if (o.off_policy_mask_threshold) {
    // Keep a sequence with a non-negative advantage, or one whose mean KL
    // from the generating policy is small.
    const auto kl = torch::nan_to_num(old_logps - logps.detach(), 0.0);
    const auto avg = (kl * m).sum(1, true) / m.sum(1, true).clamp_min(1.0);
    loss = loss * ((adv >= 0) | (avg <= *o.off_policy_mask_threshold)).to(loss.scalar_type());
  }
  if (entropy_mask.defined()) loss = loss * entropy_mask.to(loss.scalar_type());
  if (o.beta != 0) loss = loss + o.beta * t.per_token_kl;
  t.per_token_loss = loss;
  return t;
}

bool loss_sums_over_round(const std::string& loss_type) {
  return loss_type == "dapo" || loss_type == "cispo" || loss_type == "vespo";
}

torch::Tensor reduce_policy_loss(const torch::Tensor& per_token_loss, const torch::Tensor& mask,
                                 const PolicyLossReduction& r) {
  const auto masked = (per_token_loss * mask);
  const auto& type = r.loss_type;
  const double b = static_cast<double>(per_token_loss.size(0));
  if (type == "grpo" || type == "sapo") return (masked.sum(-1) / mask.sum(-1).clamp_min(1.0)).mean();
  if (type == "bnpo") return masked.sum() / mask.sum().clamp_min(1.0);
  if (type == "dr_grpo") return masked.sum() / (b * static_cast<double>(r.max_completion_length));
  if (type == "luspo") return masked.sum(-1).mean();
  if (!loss_sums_over_round(type)) throw std::invalid_argument("reduce_policy_loss: unknown loss type " + type);
  if (!r.round_completion_tokens.defined())
    throw std::invalid_argument("reduce_policy_loss: " + type + " needs round_completion_tokens");
  // The factor is computed on the device (no host read per micro-batch), in
  // double and rounded to the loss's dtype as a scalar factor would be.
  const auto n = r.round_completion_tokens.to(masked.device(), torch::kFloat64).clamp_min(1.0);
  const auto factor = static_cast<double>(r.micro_batches_per_round) * r.world_size / n;
  return masked.sum() * factor.to(masked.scalar_type());
}

torch::Tensor masked_entropy_mean(const torch::Tensor& entropy, const torch::Tensor& mask,
                                  const torch::Tensor& entropy_mask) {
  const auto counted = entropy_mask.defined() ? mask * entropy_mask.to(mask.scalar_type()) : mask;
  return (entropy * counted).sum() / counted.sum().clamp_min(1.0);
}

double next_entropy_coef(double coef, double entropy, const EntropyControl& c) {
  return entropy <= c.target ? std::min(coef + c.delta, c.max) : std::max(coef - c.delta, c.min);
}

double applied_entropy_coef(double coef, bool adaptive, double last_entropy, double target) {
  if (!adaptive) return coef;
  return last_entropy <= target ? coef : 0.0;
}

ClipIndicators clip_indicators(const torch::Tensor& ratio, const torch::Tensor& advantages, double epsilon_low,
                               double epsilon_high, at::ScalarType dtype) {
  const auto r = ratio.detach();
  ClipIndicators out;
  out.low = ((r < 1 - epsilon_low) & (advantages < 0)).to(dtype);
  out.high = ((r > 1 + epsilon_high) & (advantages > 0)).to(dtype);
  out.region = torch::clamp_max(out.low + out.high, 1.0);
  return out;
}

RlooLossTerms rloo_loss(const torch::Tensor& logps, const torch::Tensor& old_logps, const torch::Tensor& mask,
                        const torch::Tensor& advantages, double epsilon_low, double epsilon_high) {
  // The whole completion's log-prob against the generating policy's.
  const auto seq = (logps * mask).sum(1);
  const auto old = old_logps.defined() ? (old_logps * mask).sum(1) : seq.detach();
  RlooLossTerms t;
  t.ratio = torch::exp(seq - old);
  const auto clipped = torch::clamp(t.ratio, 1 - epsilon_low, 1 + epsilon_high);
  t.loss_sum = (-torch::min(t.ratio * advantages, clipped * advantages)).sum();
  return t;
}

}  // namespace trlx::losses
