#pragma once
// Preference and reward losses as pure tensor functions: DPO (every loss type,
// weighted lists, f-divergences, LD-DPO, WPO weighting), KTO, CPO, ORPO and the
// Bradley-Terry reward loss. They take per-sequence log-prob sums (and the few
// per-sequence extras a loss needs) and return the loss, per-example losses and
// the quantities the trainers log. No I/O and no collectives: where a value
// crosses ranks (KTO's KL estimate, metrics), the trainer reduces it and the
// functions say which reduction.
//
// Numbers equal TRL 1.16's (tests/data/preference_losses, made by
// scripts/fixtures/preference_loss_fixtures.py): the functions compute in the
// inputs' dtype with the same operations in the same order, so fp32 inputs give
// TRL's fp32 results.
#include <optional>
#include <string>
#include <utility>
#include <vector>

#include <ATen/core/Tensor.h>

namespace trlx::losses {

// ---------------------------------------------------------------------------- DPO

struct DpoLossOptions {
  double beta = 0.1;
  std::vector<std::string> loss_type = {"sigmoid"};
  std::vector<double> loss_weights;  // one per loss_type; empty: 1 each
  double label_smoothing = 0;        // used by robust, exo_pair, aot, aot_unpaired
  std::string f_divergence_type = "reverse_kl";  // reverse_kl, forward_kl, js_divergence, alpha_divergence
  double f_alpha_divergence_coef = 0.5;
  double discopop_tau = 0.05;
  std::optional<double> ld_alpha;  // LD-DPO: weight of the tokens past the pair's shared length
  bool use_weighting = false;      // WPO: weight each pair by its length-normalised probability
};

// The loss types dpo_loss accepts (TRL 1.16's list).
const std::vector<std::string>& dpo_loss_type_names();

// Rejects what TRL rejects, with InputError (exit 2): an unknown loss or
// divergence, loss_weights of the wrong length, an f-divergence other than
// reverse_kl with a loss it does not apply to, exo_pair without
// label_smoothing, use_weighting with aot/aot_unpaired. dpo_loss calls it.
void validate_dpo_loss(const DpoLossOptions& options);

// All tensors are [B], one row per pair, in the dtype the loss should run in.
struct DpoInputs {
  // Policy (with graph) and reference log-prob sums over each completion's
  // tokens. With ld_alpha these cover only the first min(len_chosen,
  // len_rejected) completion tokens of the pair, and the *_tail_logps below
  // hold the sums over the rest (0 for the shorter side).
  at::Tensor chosen_logps, rejected_logps;
  at::Tensor ref_chosen_logps, ref_rejected_logps;
  at::Tensor chosen_tail_logps, rejected_tail_logps;          // ld_alpha only
  at::Tensor ref_chosen_tail_logps, ref_rejected_tail_logps;  // ld_alpha only
  // Completion token counts; needed by ipo, sigmoid_norm, sft and use_weighting.
  at::Tensor chosen_tokens, rejected_tokens;
  // use_weighting only: per sequence, sum over completion tokens of
  // log p(token) - log sum_v p(v)^2 (the WPO-aligned log-prob; detached here).
  at::Tensor chosen_wpo_logps, rejected_wpo_logps;
};

struct DpoLossOutput {
  at::Tensor loss;    // scalar: sum over loss types of weight * mean over pairs
  at::Tensor losses;  // [B] sum over loss types of weight * per-pair loss (aot*: sorted order;
                         // sft: the batch value on every row); mean(losses) equals
                         // loss up to rounding
  at::Tensor chosen_rewards, rejected_rewards;  // [B] detached beta * (policy - ref)
  at::Tensor chosen_logps, rejected_logps;      // [B] detached policy log-probs as TRL logs them
                                                   // (ld_alpha applied)
};

DpoLossOutput dpo_loss(const DpoInputs& inputs, const DpoLossOptions& options);

// The sigmoid and IPO losses of a chosen-minus-rejected logit, per pair:
// -log sigmoid(logits x beta) and (logits - 1 / (2 beta))^2. dpo_loss and
// online_dpo_loss both compute them here. beta is a number, or a scalar
// tensor (online DPO keeps its per-epoch beta on the device).
at::Tensor sigmoid_pair_loss(const at::Tensor& logits, double beta);
at::Tensor sigmoid_pair_loss(const at::Tensor& logits, const at::Tensor& beta);
at::Tensor ipo_pair_loss(const at::Tensor& logits, double beta);
at::Tensor ipo_pair_loss(const at::Tensor& logits, const at::Tensor& beta);

// --------------------------------------------------------------------- Online DPO

// TRL's online DPO (trl.experimental.online_dpo in 1.16): the logit is
// (chosen - rejected) - (ref_chosen - ref_rejected) of whole-completion
// log-prob sums, and IPO takes it without dividing by token counts.
struct OnlineDpoInputs {
  at::Tensor chosen_logps, rejected_logps;          // [B] policy (with graph)
  at::Tensor ref_chosen_logps, ref_rejected_logps;  // [B] reference
  at::Tensor beta;                                  // scalar tensor
};

struct OnlineDpoLossOutput {
  at::Tensor losses;                            // [B] per-pair loss (the trainer sums or averages)
  at::Tensor chosen_rewards, rejected_rewards;  // [B] beta * (policy - ref), with graph (callers detach)
};

// loss_type: sigmoid or ipo.
OnlineDpoLossOutput online_dpo_loss(const OnlineDpoInputs& inputs, const std::string& loss_type);

// ------------------------------------------------------------------ shared metrics

// TRL's per-pair metrics of DPO, CPO and ORPO as sums plus a count, float64 [7]:
// rewards/chosen, rewards/rejected, rewards/accuracies, rewards/margins,
// logps/chosen, logps/rejected, count. All-reduce (sum) across ranks, then
// preference_metrics() divides; TRL's means over gathered pairs are the same.
at::Tensor preference_metric_sums(const at::Tensor& chosen_rewards, const at::Tensor& rejected_rewards,
                                     const at::Tensor& chosen_logps, const at::Tensor& rejected_logps);
std::vector<std::pair<std::string, double>> preference_metrics(const at::Tensor& sums);

// ---------------------------------------------------------------------------- KTO

struct KtoLossOptions {
  double beta = 0.1;
  std::string loss_type = "kto";  // kto, apo_zero_unpaired
  double desirable_weight = 1.0;
  double undesirable_weight = 1.0;
};

void validate_kto_loss(const KtoLossOptions& options);

// The rank-local KL estimate: mean over the batch of policy minus reference
// log-prob sums of the mismatched (prompt, other completion) sequences,
// detached. The trainer averages it over ranks (TRL gathers it and takes the
// mean) and passes the result as KtoInputs::kl.
at::Tensor kto_local_kl(const at::Tensor& kl_logps, const at::Tensor& ref_kl_logps);

struct KtoInputs {
  at::Tensor logps, ref_logps;  // [B] completion log-prob sums, policy (with graph) and reference
  at::Tensor labels;            // [B] bool: true = desirable
  at::Tensor kl;                // scalar, the cross-rank mean of kto_local_kl (kto only; clamped at 0 here)
  // Optional [n] int64 row indices of each kind, where labels lives, found
  // on the host (undefined: found here from labels, a read of the device).
  at::Tensor desirable_rows, undesirable_rows;
};

struct KtoLossOutput {
  at::Tensor loss;    // scalar: nan-mean over the batch of the weighted losses
  at::Tensor losses;  // [B] weighted per-example losses, batch order
  at::Tensor chosen_rewards, rejected_rewards;  // [n_desirable], [n_undesirable] detached beta * (policy - ref)
  at::Tensor chosen_logps, rejected_logps;      // same split, detached
  at::Tensor kl;                                // scalar used by the loss (0 for apo_zero_unpaired); metric "kl"
};

KtoLossOutput kto_loss(const KtoInputs& inputs, const KtoLossOptions& options);

// float64 [6]: sums of chosen rewards, chosen logps, count chosen, rejected
// rewards, rejected logps, count rejected (NaNs skipped, as TRL's nansum).
// The trainer keeps them as per-micro-batch device sums, summed over ranks
// at a logging step; kto_metrics() gives one micro-batch's values from them
// on the host: TRL's rewards/chosen, logps/chosen, rewards/rejected,
// logps/rejected, rewards/margins, each only when its side is non-empty,
// after "kl" (pass the loss's kl).
at::Tensor kto_metric_sums(const KtoLossOutput& out);
std::vector<std::pair<std::string, double>> kto_metrics(const at::Tensor& sums, double kl);

// ---------------------------------------------------------------------------- CPO

struct CpoLossOptions {
  double beta = 0.1;
  std::string loss_type = "sigmoid";  // sigmoid, hinge, ipo, simpo, alphapo (= simpo with cpo_alpha 0)
  double label_smoothing = 0;         // sigmoid, simpo
  double cpo_alpha = 1.0;             // weight of the chosen NLL term
  double simpo_gamma = 0.5;
  double alpha = 0;                   // AlphaPO reward shape; 0: log-prob rewards
};

void validate_cpo_loss(const CpoLossOptions& options);
// ipo, simpo and alphapo take average log-probs per completion token; the
// others take sums.
bool cpo_uses_average_logps(const CpoLossOptions& options);
// The cpo_alpha that applies (alphapo forces 0, as TRL's CPOConfig does).
double cpo_effective_alpha(const CpoLossOptions& options);

struct CpoInputs {
  at::Tensor chosen_logps, rejected_logps;  // [B] policy log-probs (sum or average, see above)
  at::Tensor nll_loss;  // scalar: cross-entropy mean over the chosen completions' tokens;
                           // may be undefined when cpo_effective_alpha() is 0
};

struct CpoLossOutput {
  at::Tensor loss;    // scalar: mean(losses) + cpo_alpha * nll_loss
  at::Tensor losses;  // [B] preference term per pair
  at::Tensor chosen_rewards, rejected_rewards;  // [B] detached beta * log-prob (AlphaPO: beta * its reward)
  at::Tensor nll_loss;                          // scalar, detached; metric "nll_loss" (mean over ranks)
};

CpoLossOutput cpo_loss(const CpoInputs& inputs, const CpoLossOptions& options);

// --------------------------------------------------------------------------- ORPO

struct OrpoLossOptions {
  double beta = 0.1;
};

struct OrpoInputs {
  at::Tensor chosen_logps, rejected_logps;  // [B] average log-prob per completion token
  at::Tensor nll_loss;  // scalar: cross-entropy mean over all attended tokens (prompt and completion) of
                           // the chosen sequences
};

struct OrpoLossOutput {
  at::Tensor loss;    // scalar: nll_loss + mean(losses)
  at::Tensor losses;  // [B] -beta * log sigmoid(log odds ratio), float32
  at::Tensor chosen_rewards, rejected_rewards;  // [B] detached beta * average log-prob
  // Scalars, detached, under TRL's names: "log_odds_ratio" is the mean of
  // log sigmoid(log odds), "log_odds_chosen" the mean log odds; "nll_loss".
  // Each is averaged over ranks.
  at::Tensor log_odds_ratio, log_odds_chosen, nll_loss;
};

OrpoLossOutput orpo_loss(const OrpoInputs& inputs, const OrpoLossOptions& options);

// ------------------------------------------------------------------------- Reward

struct RewardLossOptions {
  std::optional<double> center_rewards_coefficient;
};

struct RewardInputs {
  at::Tensor chosen_rewards, rejected_rewards;  // [B] score-head outputs
  at::Tensor margin;                            // [B] or undefined
};

struct RewardLossOutput {
  at::Tensor loss;  // scalar: mean -log sigmoid(chosen - rejected - margin) + centering term
  // Scalars, detached. TRL's metrics: "accuracy" and "margin" are per-rank
  // means averaged over ranks; "min_reward", "mean_reward", "max_reward" are
  // over every chosen and rejected reward of all ranks (min, mean, max).
  at::Tensor accuracy, margin, min_reward, mean_reward, max_reward;
};

RewardLossOutput reward_loss(const RewardInputs& inputs, const RewardLossOptions& options);

}  // namespace trlx::losses
