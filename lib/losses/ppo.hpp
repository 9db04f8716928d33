#pragma once
// PPO's objectives as pure tensor functions: the KL-shaped per-token rewards,
// masked whitening, generalized advantage estimation, and the clipped policy
// and value losses. No I/O, no distributed code: each works on one rank's
// rollout batch (TRL's PPO whitens per process too).
//
// Numbers equal TRL's PPOTrainer (trl 0.26, trl.experimental.ppo;
// tests/data/policy_losses/ppo.json, made by
// scripts/fixtures/policy_losses_fixtures.py): the same operations in the same
// order, in the inputs' dtype.
#include <string>

#include <ATen/core/Tensor.h>

namespace trlx::losses {

// Mean of x over the entries where mask is 1 (mask: 0/1 of x's dtype).
at::Tensor masked_mean(const at::Tensor& x, const at::Tensor& mask);

// (x - mean) / std over the masked entries (unbiased variance, 1e-8 added
// under the root); the mean is added back when !shift_mean. Fewer than two
// masked entries is an InputError (the variance is undefined).
at::Tensor masked_whiten(const at::Tensor& x, const at::Tensor& mask, bool shift_mean);

struct PpoRewards {
  at::Tensor kl;                // [B, T] per-token KL estimate of the policy from the reference
  at::Tensor non_score_reward;  // [B, T] -kl_coef x kl
  at::Tensor rewards;           // [B, T] non_score_reward, the score added after the last token
};

// logprobs, ref_logprobs [B, T] (past a response's end both hold the same
// mark, so the KL there is 0); scores [B]; sequence_lengths [B] int64, the
// index of each response's last token (-1: none). kl_estimator "k1" (log
// ratio) or "k3" ((r - 1) - log r). The score lands on the token after the
// last one, or on the last one when that is the batch's last column.
PpoRewards ppo_rewards(const at::Tensor& logprobs, const at::Tensor& ref_logprobs, const at::Tensor& scores,
                       const at::Tensor& sequence_lengths, double kl_coef, const std::string& kl_estimator);

struct PpoAdvantages {
  at::Tensor advantages;  // [B, T] whitened over the response tokens, 0 past them
  at::Tensor returns;     // [B, T] advantages (before whitening) + values
  at::Tensor raw;         // [B, T] the advantages before whitening
};

// GAE(gamma, lam) backwards over the T columns of rewards and values [B, T]
// (the value past the last column is 0), then the advantages whitened over
// `keep` (1: a response token) and set to 0 on `padding` (bool, its
// complement).
PpoAdvantages ppo_advantages(const at::Tensor& rewards, const at::Tensor& values, const at::Tensor& keep,
                             const at::Tensor& padding, double gamma, double lam);

struct PpoLossOptions {
  double cliprange = 0.2;
  double cliprange_value = 0.2;
  double vf_coef = 0.1;
};

struct PpoLossOutput {
  at::Tensor loss;     // scalar: pg_loss + vf_coef x vf_loss
  at::Tensor pg_loss;  // scalar: masked mean of max(-A r, -A clip(r))
  at::Tensor vf_loss;  // scalar: 0.5 x masked mean of max((v - R)^2, (clip(v) - R)^2)
  // Detached metrics, TRL's policy/clipfrac_avg, val/clipfrac_avg,
  // policy/approxkl_avg and val/ratio (one micro-batch's values).
  at::Tensor pg_clipfrac, vf_clipfrac, approxkl, ratio_mean;
};

// new_logprobs, old_logprobs [B, T] (the same mark past a response's end);
// vpred, old_values, returns, advantages [B, T]; keep (response tokens) and
// keep_p1 (those and the token after) [B, T] 0/1 of the inputs' dtype.
PpoLossOutput ppo_loss(const at::Tensor& new_logprobs, const at::Tensor& old_logprobs,
                       const at::Tensor& vpred, const at::Tensor& old_values, const at::Tensor& returns,
                       const at::Tensor& advantages, const at::Tensor& keep, const at::Tensor& keep_p1,
                       const PpoLossOptions& options);

}  // namespace trlx::losses
