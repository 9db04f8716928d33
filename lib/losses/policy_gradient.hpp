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

#include <torch/torch.h>

namespace trlx::losses {

// Standard deviation ignoring NaN (Bessel-corrected; NaN with fewer than 2
// values), over `dim` or over everything.
torch::Tensor nanstd(const torch::Tensor& x, std::optional<int64_t> dim = std::nullopt, bool keepdim = false);

struct Advantages {
  torch::Tensor advantages;  // [N]; 0 where no function scored the completion
  torch::Tensor rewards;     // [N] weighted sum of the functions; NaN where none scored it
  torch::Tensor std_is_zero; // [N] or [groups]: the std the advantages were scaled by is 0 (frac_reward_zero_std)
};

// GRPO: rewards_per_func [N, F] (NaN: skipped), grouped in consecutive runs
// of `num_generations` completions of one prompt. `scale_rewards` group,
// batch or none; `aggregation` sum_then_normalize or normalize_then_sum.
Advantages grpo_advantages(const torch::Tensor& rewards_per_func, const torch::Tensor& weights,
                           int64_t num_generations, const std::string& scale_rewards, const std::string& aggregation);

// RLOO: the weighted reward (clipped to `clip_range`), minus beta x the
// sequence KL from the reference when given, against the mean of the other
// completions of the prompt; normalised over the batch when asked.
Advantages rloo_advantages(const torch::Tensor& rewards_per_func, const torch::Tensor& weights, int64_t num_generations,
                           const std::optional<std::pair<double, double>>& clip_range,
                           const std::optional<torch::Tensor>& sequence_kl, double beta, bool normalize);

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
  torch::Tensor per_token_loss;  // [B, T] (or [B, 1] when nothing depends on the token)
  torch::Tensor ratio;           // coef_1: [B, T], or [B, 1] at sequence level
  torch::Tensor per_token_kl;    // [B, T] when beta > 0
  torch::Tensor phi;             // [B, 1] vespo's weights
};

// logps, old_logps, ref_logps [B, T] (ref only with beta > 0); advantages
// [B]; mask [B, T]; entropy_mask [B, T] bool or undefined.
PolicyLossTerms policy_loss_terms(const torch::Tensor& logps, const torch::Tensor& old_logps,
                                  const torch::Tensor& ref_logps, const torch::Tensor& advantages,
                                  const torch::Tensor& mask, const torch::Tensor& entropy_mask,
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
  torch::Tensor round_completion_tokens;
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
torch::Tensor reduce_policy_loss(const torch::Tensor& per_token_loss, const torch::Tensor& mask,
                                 const PolicyLossReduction& reduction);

// ------------------------------------------------------------------- RLOO

struct RlooLossTerms {
  torch::Tensor loss_sum;  // scalar: sum over rows of -min(ratio A, clip(ratio) A)
  torch::Tensor ratio;     // [B] sequence-level ratio to the generating policy
};

// RLOO's clipped objective on whole sequences: logps and old_logps [B, T]
// per-token log-probs (old_logps undefined: the policy that generated is the
// one trained, a ratio of 1), mask [B, T], advantages [B]; the ratio of the
// summed log-probs clipped to [1 - epsilon_low, 1 + epsilon_high].
RlooLossTerms rloo_loss(const torch::Tensor& logps, const torch::Tensor& old_logps, const torch::Tensor& mask,
                        const torch::Tensor& advantages, double epsilon_low, double epsilon_high);

}  // namespace trlx::losses
