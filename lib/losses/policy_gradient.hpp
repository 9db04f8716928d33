#pragma once
// The online trainers' objectives as pure tensor functions: advantages from
// rewards (GRPO's group normalisation, RLOO's leave-one-out baseline), the
// clipped policy-gradient loss per token with each loss type's weighting, each
// GRPO loss type's reduction to one micro-batch's loss, and RLOO's clipped
// sequence objective. No I/O, no distributed code: callers gather rewards over
// ranks first and pass global statistics (the round's token count) in.
//
// The per-token terms, reductions and RLOO's loss equal TRL 1.16's
// (tests/data/policy_losses, made by
// scripts/fixtures/policy_losses_fixtures.py).
#include <optional>
#include <string>

#include <ATen/core/Tensor.h>

namespace trlx::losses {

// Standard deviation ignoring NaN (Bessel-corrected; NaN with fewer than 2
// values), over `dim` or over everything.
at::Tensor nanstd(const at::Tensor& x, std::optional<int64_t> dim = std::nullopt, bool keepdim = false);

struct Advantages {
  at::Tensor advantages;  // [N]; 0 where no function scored the completion
  at::Tensor rewards;     // [N] weighted sum of the functions; NaN where none scored it
  at::Tensor std_is_zero; // [N] or [groups]: the std the advantages were scaled by is 0 (frac_reward_zero_std)
};

// GRPO: rewards_per_func [N, F] (NaN: skipped), grouped in consecutive runs
// of `num_generations` completions of one prompt. `scale_rewards` group,
// batch or none; `aggregation` sum_then_normalize or normalize_then_sum.
Advantages grpo_advantages(const at::Tensor& rewards_per_func, const at::Tensor& weights,
                           int64_t num_generations, const std::string& scale_rewards, const std::string& aggregation);

// RLOO: the weighted reward (clipped to `clip_range`), minus beta x the
// sequence KL from the reference when given, against the mean of the other
// completions of the prompt; normalised over the batch when asked.
Advantages rloo_advantages(const at::Tensor& rewards_per_func, const at::Tensor& weights, int64_t num_generations,
                           const std::optional<std::pair<double, double>>& clip_range,
                           const std::optional<at::Tensor>& sequence_kl, double beta, bool normalize);

struct PolicyLossOptions {
  std::string loss_type = "dapo";
  bool sequence_level = false;  // importance_sampling_level: sequence
  double epsilon_low = 0.2, epsilon_high = 0.2;
  std::optional<double> delta;
  double beta = 0;
  bool bias_correction_kl = true;
  double sapo_temperature_pos = 1.0, sapo_temperature_neg = 1.05;
  double vespo_k_pos = 2, vespo_lambda_pos = 3, vespo_k_neg = 3, vespo_lambda_neg = 2;
  std::optional<double> off_policy_mask_threshold;
};

struct PolicyLossTerms {
  at::Tensor per_token_loss;  // [B, T] (or [B, 1] when nothing depends on the token)
  at::Tensor ratio;           // coef_1: [B, T], or [B, 1] at sequence level
  at::Tensor per_token_kl;    // [B, T] when beta > 0
  at::Tensor phi;             // [B, 1] vespo's weights
};

// logps, old_logps, ref_logps [B, T] (ref only with beta > 0); advantages
// [B]; mask [B, T]; entropy_mask [B, T] bool or undefined.
PolicyLossTerms policy_loss_terms(const at::Tensor& logps, const at::Tensor& old_logps,
                                  const at::Tensor& ref_logps, const at::Tensor& advantages,
                                  const at::Tensor& mask, const at::Tensor& entropy_mask,
                                  const PolicyLossOptions& options);

// ---------------------------------------------------------- GRPO's reductions

// The loss types whose micro-batch loss is a sum over tokens divided by the
// completion tokens of the whole generation round (dapo, cispo, vespo); the
// others reduce within the micro-batch.
bool loss_sums_over_round(const std::string& loss_type);

struct PolicyLossReduction {
  std::string loss_type = "dapo";
  int64_t max_completion_length = 0;  // dr_grpo: each row counts as this many tokens
  // dapo, cispo, vespo: the completion tokens of the whole generation round
  // on every rank (a scalar; the caller sums it over ranks), and how the
  // round is split: micro-batches per round on each rank (steps_per_generation
  // in training, 1 in evaluation) and ranks.
  at::Tensor round_completion_tokens;
  int64_t micro_batches_per_round = 1;
  int64_t world_size = 1;
};

// One micro-batch's loss from per_token_loss [B, T] (or [B, 1]) and mask
// [B, T] as the loss type reduces it: TRL's value before its division by the
// step's micro-batches (grpo, sapo: mean over rows of each row's token mean;
// bnpo: mean over the micro-batch's tokens; dr_grpo: sum over B x
// max_completion_length; luspo: mean over rows of each row's sum; dapo,
// cispo, vespo: sum x micro_batches_per_round x world_size over the round's
// tokens). Dividing by the step's micro-batches x world_size gives TRL's loss
// on each rank, whose gradients the ranks average.
at::Tensor reduce_policy_loss(const at::Tensor& per_token_loss, const at::Tensor& mask,
                                 const PolicyLossReduction& reduction);

// --------------------------------------------- GRPO's entropy bonus

// The mean entropy over the tokens that count: mask [B, T], times
// entropy_mask [B, T] (bool) when defined.
at::Tensor masked_entropy_mean(const at::Tensor& entropy, const at::Tensor& mask, const at::Tensor& entropy_mask);

struct EntropyControl {
  double target = 0, delta = 0, min = 0, max = 0;  // entropy_target, entropy_coef_delta/_min/_max
};
// The adaptive entropy coefficient after a step whose entropy over every
// rank's counted tokens was `entropy`: raised by delta (to at most max) at
// or below the target, lowered by delta (to at least min) above it.
double next_entropy_coef(double coef, double entropy, const EntropyControl& control);
// The coefficient the bonus applies in a step: the adaptive one only while
// the last step's entropy was at or below the target (none measured yet:
// +inf, so none applies); a fixed one always.
double applied_entropy_coef(double coef, bool adaptive, double last_entropy, double target);

// ------------------------------------------------------- clip metrics

struct ClipIndicators {
  at::Tensor low;     // ratio < 1 - epsilon_low where the advantage is negative (0/1)
  at::Tensor high;    // ratio > 1 + epsilon_high where the advantage is positive (0/1)
  at::Tensor region;  // either of the two (0/1)
};
// The clip_ratio metrics' indicators of GRPO and RLOO, in `dtype`;
// advantages broadcast against ratio ([B, 1] against [B, T], [B] against [B]).
ClipIndicators clip_indicators(const at::Tensor& ratio, const at::Tensor& advantages, double epsilon_low,
                               double epsilon_high, at::ScalarType dtype);

// ------------------------------------------------------------------- RLOO

struct RlooLossTerms {
  at::Tensor loss_sum;  // scalar: sum over rows of -min(ratio A, clip(ratio) A)
  at::Tensor ratio;     // [B] sequence-level ratio to the generating policy
};

// RLOO's clipped objective on whole sequences: logps and old_logps [B, T]
// per-token log-probs (old_logps undefined: the policy that generated is the
// one trained, a ratio of 1), mask [B, T], advantages [B]; the ratio of the
// summed log-probs clipped to [1 - epsilon_low, 1 + epsilon_high].
RlooLossTerms rloo_loss(const at::Tensor& logps, const at::Tensor& old_logps, const at::Tensor& mask,
                        const at::Tensor& advantages, double epsilon_low, double epsilon_high);

}  // namespace trlx::losses
