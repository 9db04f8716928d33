// PPO's rewards, whitening, GAE and clipped losses as pure tensor functions.
#include "losses/ppo.hpp"

#include <algorithm>
#include <vector>

#include "core/error.hpp"

namespace trlx::losses {

torch::Tensor masked_mean(const torch::Tensor& x, const torch::Tensor& mask) { return (x * mask).sum() / mask.sum(); }

torch::Tensor masked_whiten(const torch::Tensor& x, const torch::Tensor& mask, bool shift_mean) {
  const auto mean = masked_mean(x, mask);
  const auto n = mask.sum();
  if (n.item<double>() <= 1)
    throw InputError("ppo: whitening needs at least 2 response tokens in a rollout batch; raise "
                     "per_device_train_batch_size or response_length");
  const auto var = masked_mean((x - mean).pow(2), mask) * (n / (n - 1));
  auto out = (x - mean) * torch::rsqrt(var + 1e-8);
  if (!shift_mean) out = out + mean;
  return out;
}

PpoRewards ppo_rewards(const torch::Tensor& logprobs, const torch::Tensor& ref_logprobs, const torch::Tensor& scores,
                       const torch::Tensor& sequence_lengths, double kl_coef, const std::string& kl_estimator) {
  const int64_t n = logprobs.size(0), t = logprobs.size(1);
  PpoRewards r;
  const auto logr = ref_logprobs - logprobs;
  r.kl = kl_estimator == "k1" ? -logr : (logr.exp() - 1) - logr;
  r.non_score_reward = -kl_coef * r.kl;
  r.rewards = r.non_score_reward.clone();
  const auto& seq = sequence_lengths;
  const auto end = torch::where(seq + 1 < t, seq + 1, seq);
  r.rewards.index_put_({torch::arange(n, seq.options()), end}, scores, /*accumulate=*/true);
  return r;
}

PpoAdvantages ppo_advantages(const torch::Tensor& rewards, const torch::Tensor& values, const torch::Tensor& keep,
                             const torch::Tensor& padding, double gamma, double lam) {
  const int64_t n = values.size(0), t = values.size(1);
  std::vector<torch::Tensor> adv_rev;
  torch::Tensor lastgaelam = torch::zeros({n}, values.options());
  for (int64_t k = t - 1; k >= 0; --k) {
    const auto next = k < t - 1 ? values.select(1, k + 1) : torch::zeros({n}, values.options());
    const auto delta = rewards.select(1, k) + gamma * next - values.select(1, k);
    lastgaelam = delta + gamma * lam * lastgaelam;
    adv_rev.push_back(lastgaelam);
  }
  std::reverse(adv_rev.begin(), adv_rev.end());
  PpoAdvantages a;
  a.raw = torch::stack(adv_rev, 1);
  a.returns = a.raw + values;
  a.advantages = masked_whiten(a.raw, keep, true).masked_fill(padding, 0.0);
  return a;
}

PpoLossOutput ppo_loss(const torch::Tensor& new_logprobs, const torch::Tensor& old_logprobs,
                       const torch::Tensor& vpred, const torch::Tensor& old_values, const torch::Tensor& returns,
                       const torch::Tensor& advantages, const torch::Tensor& keep, const torch::Tensor& keep_p1,
                       const PpoLossOptions& o) {
  PpoLossOutput out;
  // The clipped value loss.
  const auto vclipped = torch::max(torch::min(vpred, old_values + o.cliprange_value), old_values - o.cliprange_value);
  const auto vf1 = (vpred - returns).pow(2), vf2 = (vclipped - returns).pow(2);
  out.vf_loss = 0.5 * masked_mean(torch::max(vf1, vf2), keep_p1);
  // The clipped policy loss.
  const auto diff = new_logprobs - old_logprobs;
  const auto ratio = diff.exp();
  const auto pg1 = -advantages * ratio;
  const auto pg2 = -advantages * ratio.clamp(1.0 - o.cliprange, 1.0 + o.cliprange);
  out.pg_loss = masked_mean(torch::max(pg1, pg2), keep);
  out.loss = out.pg_loss + o.vf_coef * out.vf_loss;
  torch::NoGradGuard no_grad;
  out.approxkl = 0.5 * diff.pow(2).mean();
  out.pg_clipfrac = masked_mean((pg2 > pg1).to(torch::kFloat32), keep);
  out.vf_clipfrac = masked_mean((vf2 > vf1).to(torch::kFloat32), keep_p1);
  out.ratio_mean = ratio.mean();
  return out;
}

}  // namespace trlx::losses
