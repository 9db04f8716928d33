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

#include <torch/torch.h>

namespace trlx::losses {

// Mean of x over the entries where mask is 1 (mask: 0/1 of x's dtype).
torch::Tensor masked_mean(const torch::Tensor& x, const torch::Tensor& mask);

// (x - mean) / std over the masked entries (unbiased variance, 1e-8 added
// under the root); the mean is added back when !shift_mean. Fewer than two
// masked entries is an InputError (the variance is undefined).
torch::Tensor masked_whiten(const torch::Tensor& x, const torch::Tensor& mask, bool shift_mean);

struct PpoRewards {
  torch::Tensor kl;                // [B, T] per-token KL estimate of the policy from the reference
  torch::Tensor non_score_reward;  // [B, T] -kl_coef x kl
  torch::Tensor rewards;           // [B, T] non_score_reward, the score added after the last token
};

// logprobs, ref_logprobs [B, T] (past a response's end both hold the same
// mark, so the KL there is 0); scores [B]; sequence_lengths [B] int64, the
// index of each response's last token (-1: none). kl_estimator "k1" (log
// ratio) or "k3" ((r - 1) - log r). The score lands on the token after the
// last one, or on the last one when that is the batch's last column.
PpoRewards ppo_rewards(const torch::Tensor& logprobs, const torch::Tensor& ref_logprobs, const torch::Tensor& scores,
                       const torch::Tensor& sequence_lengths, double kl_coef, const std::string& kl_estimator);

struct PpoAdvantages {
  torch::Tensor advantages;  // [B, T] whitened over the response tokens, 0 past them
  torch::Tensor returns;     // [B, T] advantages (before whitening) + values
  torch::Tensor raw;         // [B, T] the advantages before whitening
};

// GAE(gamma, lam) backwards over the T columns of rewards and values [B, T]
// (the value past the last column is 0), then the advantages whitened over
// `keep` (1: a response token) and set to 0 on `padding` (bool, its
// complement).
PpoAdvantages ppo_advantages(const torch::Tensor& rewards, const torch::Tensor& values, const torch::Tensor& keep,
                             const torch::Tensor& padding, double gamma, double lam);

struct PpoLossOptions {
  double cliprange = 0.2;
  double cliprange_value = 0.2;
  double vf_coef = 0.1;
};

struct PpoLossOutput {
  torch::Tensor loss;     // scalar: pg_loss + vf_coef x vf_loss
  torch::Tensor pg_loss;  // scalar: masked mean of max(-A r, -A clip(r))
  torch::Tensor vf_loss;  // scalar: 0.5 x masked mean of max((v - R)^2, (clip(v) - R)^2)
  // Detached metrics, TRL's policy/clipfrac_avg, val/clipfrac_avg,
  // policy/approxkl_avg and val/ratio (one micro-batch's values).
  torch::Tensor pg_clipfrac, vf_clipfrac, approxkl, ratio_mean;
};

// new_logprobs, old_logprobs [B, T] (the same mark past a response's end);
// vpred, old_values, returns, advantages [B, T]; keep (response tokens) and
// keep_p1 (those and the token after) [B, T] 0/1 of the inputs' dtype.
PpoLossOutput ppo_loss(const torch::Tensor& new_logprobs, const torch::Tensor& old_logprobs,
                       const torch::Tensor& vpred, const torch::Tensor& old_values, const torch::Tensor& returns,
                       const torch::Tensor& advantages, const torch::Tensor& keep, const torch::Tensor& keep_p1,
                       const PpoLossOptions& options);

}  // namespace trlx::losses
