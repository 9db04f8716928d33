// Preference and reward losses (DPO, online DPO, KTO, CPO, ORPO, Bradley-Terry) as pure tensor functions.
#include "losses/preference.hpp"

#include <torch/torch.h>

#include <algorithm>
#include <cmath>
#include <set>

#include <fmt/format.h>
#include <fmt/ranges.h>

#include "core/error.hpp"

namespace trlx::losses {
namespace {

using torch::Tensor;

// Operations are spelled out in the order TRL applies them (x * beta, not
// beta folded elsewhere), so fp32 results round the same way.
Tensor neg_logsig(const Tensor& x) { return -torch::log_sigmoid(x); }

bool contains(const std::vector<std::string>& v, const std::string& s) {
  return std::find(v.begin(), v.end(), s) != v.end();
}

void need(const Tensor& t, const char* what, const std::string& why) {
  if (!t.defined()) fail("{}: {} must be given", why, what);
}

Tensor as_like(const Tensor& t, const Tensor& like) { return t.to(like.device(), like.scalar_type()); }

// f'(policy/ref ratio) of the chosen f-divergence, applied to log-ratios.
Tensor f_divergence_scores(const Tensor& logratios, const DpoLossOptions& o) {
  const auto& f = o.f_divergence_type;
  if (f == "reverse_kl") return logratios;
  if (f == "forward_kl") return 1 - torch::exp(-logratios);
  if (f == "js_divergence") return torch::log_sigmoid(logratios) + std::log(2.0);
  // alpha_divergence; at alpha = 1 it is reverse KL.
  const double a = o.f_alpha_divergence_coef;
  if (std::abs(a - 1.0) < 1e-6) return logratios;
  const double coef = 1.0 / (a - 1.0);
  Tensor t = logratios * (a - 1.0);
  const auto dtype = t.scalar_type();
  // Clamp so that exp stays representable once cast back to the input dtype.
  const double clamp_max = dtype == torch::kHalf ? 11.0 : 80.0;
  Tensor e = torch::clamp_max(t.to(torch::kFloat32), clamp_max);
  return (torch::exp(e) - 1.0).to(dtype) * coef;
}

Tensor average_by_tokens(const Tensor& scores, const Tensor& tokens) {
  return scores / as_like(tokens, scores).clamp_min(1.0);
}

// TRL's labels-smoothed logistic loss of the sorted (aot) deltas.
Tensor smoothed_logistic(const Tensor& delta, double beta, double ls) {
  return -torch::log_sigmoid(delta * beta) * (1 - ls) - torch::log_sigmoid(delta * -beta) * ls;
}

// One formula for a number and for a tensor beta. `beta * logits` is
// logits.mul(beta) for a number and beta.mul(logits) for a tensor: the
// operand order each caller has always used (it decides how a CPU scalar
// tensor rounds against bf16 logits).
template <class Beta>
Tensor sigmoid_pair(const Tensor& logits, const Beta& beta) {
  return neg_logsig(beta * logits);
}

template <class Beta>
Tensor ipo_pair(const Tensor& logits, const Beta& beta) {
  return (logits - 1 / (2 * beta)).pow(2);
}

const std::set<std::string>& f_divergence_loss_types() {
  static const std::set<std::string> s = {"sigmoid", "sigmoid_norm", "hinge", "ipo",
                                          "exo_pair", "robust",       "discopop", "sft"};
  return s;
}

}  // namespace

Tensor sigmoid_pair_loss(const Tensor& logits, double beta) { return sigmoid_pair(logits, beta); }
Tensor sigmoid_pair_loss(const Tensor& logits, const Tensor& beta) { return sigmoid_pair(logits, beta); }
Tensor ipo_pair_loss(const Tensor& logits, double beta) { return ipo_pair(logits, beta); }
Tensor ipo_pair_loss(const Tensor& logits, const Tensor& beta) { return ipo_pair(logits, beta); }

// ---------------------------------------------------------------------------- DPO

const std::vector<std::string>& dpo_loss_type_names() {
  static const std::vector<std::string> names = {
      "sigmoid", "hinge",  "ipo",      "exo_pair", "nca_pair", "robust", "bco_pair",    "sppo_hard",
      "aot",     "aot_unpaired", "apo_zero", "apo_down", "discopop", "sft", "sigmoid_norm"};
  return names;
}

void validate_dpo_loss(const DpoLossOptions& o) {
  if (o.loss_type.empty()) fail_input("loss_type: name at least one loss");
  for (const auto& t : o.loss_type)
    if (!contains(dpo_loss_type_names(), t))
      fail_input("loss_type: unknown DPO loss '{}'; expected one of {}", t, fmt::join(dpo_loss_type_names(), ", "));
  if (!o.loss_weights.empty() && o.loss_weights.size() != o.loss_type.size())
    fail_input("loss_weights: give one weight per loss ({} losses, {} weights)", o.loss_type.size(),
               o.loss_weights.size());
  static const std::vector<std::string> fdivs = {"reverse_kl", "forward_kl", "js_divergence", "alpha_divergence"};
  if (!contains(fdivs, o.f_divergence_type))
    fail_input("f_divergence_type: unknown divergence '{}'; expected one of {}", o.f_divergence_type,
               fmt::join(fdivs, ", "));
  if (o.f_divergence_type != "reverse_kl")
    for (const auto& t : o.loss_type)
      if (!f_divergence_loss_types().count(t))
        fail_input(
            "f_divergence_type: '{}' applies only to the losses {} (the f-divergence reward is valid only in a "
            "chosen-minus-rejected difference); loss '{}' needs reverse_kl",
            o.f_divergence_type, fmt::join(f_divergence_loss_types(), ", "), t);
  if (contains(o.loss_type, "exo_pair") && o.label_smoothing == 0.0)
    fail_input("label_smoothing: the exo_pair loss needs label_smoothing > 0 (its paper suggests 1e-3)");
  if (o.use_weighting && (contains(o.loss_type, "aot") || contains(o.loss_type, "aot_unpaired")))
    fail_input("use_weighting: aot and aot_unpaired sort the pairs, so per-pair weights cannot apply; turn one off");
  if (o.ld_alpha && (*o.ld_alpha < 0 || *o.ld_alpha > 1)) fail_input("ld_alpha: must lie in [0, 1], got {}", *o.ld_alpha);
  if (o.beta == 0 && (contains(o.loss_type, "ipo") || contains(o.loss_type, "sppo_hard")))
    fail_input("beta: ipo and sppo_hard divide by beta; it must not be 0");
}

DpoLossOutput dpo_loss(const DpoInputs& in, const DpoLossOptions& o) {
  validate_dpo_loss(o);
  const std::string why = "dpo_loss";
  need(in.chosen_logps, "chosen_logps", why);
  need(in.rejected_logps, "rejected_logps", why);
  need(in.ref_chosen_logps, "ref_chosen_logps", why);
  need(in.ref_rejected_logps, "ref_rejected_logps", why);
  const double beta = o.beta;

  // Log-probs as the loss sees them: with ld_alpha, shared part + ld_alpha * tail.
  Tensor chosen = in.chosen_logps, rejected = in.rejected_logps;
  Tensor ref_chosen = in.ref_chosen_logps, ref_rejected = in.ref_rejected_logps;
  if (o.ld_alpha) {
    const std::string ld = "dpo_loss with ld_alpha";
    need(in.chosen_tail_logps, "chosen_tail_logps", ld);
    need(in.rejected_tail_logps, "rejected_tail_logps", ld);
    need(in.ref_chosen_tail_logps, "ref_chosen_tail_logps", ld);
    need(in.ref_rejected_tail_logps, "ref_rejected_tail_logps", ld);
    const double a = *o.ld_alpha;
    chosen = in.chosen_logps + in.chosen_tail_logps * a;
    rejected = in.rejected_logps + in.rejected_tail_logps * a;
    ref_chosen = in.ref_chosen_logps + in.ref_chosen_tail_logps * a;
    ref_rejected = in.ref_rejected_logps + in.ref_rejected_tail_logps * a;
  }
  const Tensor chosen_logratios = chosen - ref_chosen;
  const Tensor rejected_logratios = rejected - ref_rejected;
  const Tensor chosen_scores = f_divergence_scores(chosen_logratios, o);
  const Tensor rejected_scores = f_divergence_scores(rejected_logratios, o);
  const Tensor delta = chosen_scores - rejected_scores;

  Tensor weights;  // WPO: per-pair product of the two sequences' mean aligned probabilities
  if (o.use_weighting) {
    const std::string w = "dpo_loss with use_weighting";
    need(in.chosen_wpo_logps, "chosen_wpo_logps", w);
    need(in.rejected_wpo_logps, "rejected_wpo_logps", w);
    need(in.chosen_tokens, "chosen_tokens", w);
    need(in.rejected_tokens, "rejected_tokens", w);
    const Tensor cw = torch::exp(in.chosen_wpo_logps.detach() / as_like(in.chosen_tokens, chosen).clamp_min(1));
    const Tensor rw = torch::exp(in.rejected_wpo_logps.detach() / as_like(in.rejected_tokens, chosen).clamp_min(1));
    weights = cw * rw;
  }

  Tensor loss, losses;
  for (size_t k = 0; k < o.loss_type.size(); ++k) {
    const std::string& t = o.loss_type[k];
    const double weight = o.loss_weights.empty() ? 1.0 : o.loss_weights[k];
    Tensor per;
    if (t == "sigmoid") {
      per = sigmoid_pair_loss(delta, beta);
    } else if (t == "hinge") {
      per = torch::relu(1 - delta * beta);
    } else if (t == "ipo" || t == "sigmoid_norm") {
      // Both compare per-token averages, so long completions do not dominate.
      need(in.chosen_tokens, "chosen_tokens", "dpo_loss " + t);
      need(in.rejected_tokens, "rejected_tokens", "dpo_loss " + t);
      const Tensor d = average_by_tokens(chosen_scores, in.chosen_tokens) -
                       average_by_tokens(rejected_scores, in.rejected_tokens);
      per = t == "ipo" ? ipo_pair_loss(d, beta) : sigmoid_pair_loss(d, beta);
    } else if (t == "exo_pair") {
      // The label-smoothing probability is a float32 scalar, as in TRL.
      const Tensor eps = torch::tensor(o.label_smoothing, torch::TensorOptions().dtype(torch::kFloat32).device(delta.device()));
      const Tensor x = delta * beta, nx = delta * -beta;
      per = torch::sigmoid(x) * (torch::log_sigmoid(x) - torch::log1p(-eps)) +
            torch::sigmoid(nx) * (torch::log_sigmoid(nx) - torch::log(eps));
    } else if (t == "nca_pair") {
      const Tensor cr = chosen_logratios * beta, rr = rejected_logratios * beta;
      per = -torch::log_sigmoid(cr) - torch::log_sigmoid(-cr) * 0.5 - torch::log_sigmoid(-rr) * 0.5;
    } else if (t == "robust") {
      const double ls = o.label_smoothing;
      const Tensor clean = torch::log_sigmoid(delta * beta) * -(1 - ls);
      const Tensor flipped = torch::log_sigmoid(delta * -beta) * -ls;
      per = (clean - flipped) / (1 - 2 * ls);
    } else if (t == "bco_pair") {
      per = -torch::log_sigmoid(chosen_logratios * beta) - torch::log_sigmoid(-(rejected_logratios * beta));
    } else if (t == "sppo_hard") {
      per = (chosen_logratios - 0.5 / beta).pow(2) + (rejected_logratios + 0.5 / beta).pow(2);
    } else if (t == "aot") {
      const Tensor sorted = std::get<0>(torch::sort(chosen - rejected, 0));
      const Tensor ref_sorted = std::get<0>(torch::sort(ref_chosen - ref_rejected, 0));
      per = smoothed_logistic(sorted - ref_sorted, beta, o.label_smoothing);
    } else if (t == "aot_unpaired") {
      const Tensor c = std::get<0>(torch::sort(chosen_logratios, 0));
      const Tensor r = std::get<0>(torch::sort(rejected_logratios, 0));
      per = smoothed_logistic(c - r, beta, o.label_smoothing);
    } else if (t == "apo_zero") {
      per = (1 - torch::sigmoid(chosen_logratios * beta)) + torch::sigmoid(rejected_logratios * beta);
    } else if (t == "apo_down") {
      per = torch::sigmoid(chosen_logratios * beta) +
            (1 - torch::sigmoid((chosen_logratios - rejected_logratios) * beta));
    } else if (t == "discopop") {
      const Tensor logits = delta * beta;
      const Tensor mix = torch::sigmoid(logits / o.discopop_tau);
      per = neg_logsig(logits) * (1 - mix) + torch::exp(-logits) * mix;
    } else if (t == "sft") {
      // Mean NLL over every chosen completion token of the batch, the same
      // value on every row. It reads the raw log-probs (no ld_alpha weight).
      need(in.chosen_tokens, "chosen_tokens", "dpo_loss sft");
      const Tensor raw = o.ld_alpha ? in.chosen_logps + in.chosen_tail_logps : in.chosen_logps;
      const Tensor nll = -(raw.sum() / as_like(in.chosen_tokens, raw).sum());
      per = nll.expand({raw.size(0)});
    } else {
      fail_input("loss_type: unknown DPO loss '{}'", t);
    }
    if (weights.defined()) per = per * weights;
    const Tensor term = per.mean() * weight;
    loss = loss.defined() ? loss + term : term;
    const Tensor row = per * weight;
    losses = losses.defined() ? losses + row : row;
  }

  DpoLossOutput out;
  out.loss = loss;
  out.losses = losses;
  out.chosen_rewards = chosen_logratios.detach() * beta;
  out.rejected_rewards = rejected_logratios.detach() * beta;
  out.chosen_logps = chosen.detach();
  out.rejected_logps = rejected.detach();
  return out;
}

// --------------------------------------------------------------------- Online DPO

OnlineDpoLossOutput online_dpo_loss(const OnlineDpoInputs& in, const std::string& loss_type) {
  const std::string why = "online_dpo_loss";
  need(in.chosen_logps, "chosen_logps", why);
  need(in.rejected_logps, "rejected_logps", why);
  need(in.ref_chosen_logps, "ref_chosen_logps", why);
  need(in.ref_rejected_logps, "ref_rejected_logps", why);
  need(in.beta, "beta", why);
  if (loss_type != "sigmoid" && loss_type != "ipo")
    fail_input("loss_type: online DPO takes sigmoid or ipo, not '{}'", loss_type);
  const auto& beta = in.beta;
  // As TRL: the policy's log-ratio minus the reference's.
  const auto logits = (in.chosen_logps - in.rejected_logps) - (in.ref_chosen_logps - in.ref_rejected_logps);
  OnlineDpoLossOutput out;
  out.losses = loss_type == "ipo" ? ipo_pair_loss(logits, beta) : sigmoid_pair_loss(logits, beta);
  out.chosen_rewards = beta * (in.chosen_logps - in.ref_chosen_logps);
  out.rejected_rewards = beta * (in.rejected_logps - in.ref_rejected_logps);
  return out;
}

// ------------------------------------------------------------------ shared metrics

torch::Tensor preference_metric_sums(const Tensor& chosen_rewards, const Tensor& rejected_rewards,
                                     const Tensor& chosen_logps, const Tensor& rejected_logps) {
  torch::NoGradGuard no_grad;
  const auto d = [](const Tensor& t) { return t.detach().to(torch::kFloat64); };
  const Tensor c = d(chosen_rewards), r = d(rejected_rewards);
  return torch::stack({c.sum(), r.sum(), (c > r).to(torch::kFloat64).sum(), (c - r).sum(), d(chosen_logps).sum(),
                       d(rejected_logps).sum(), torch::full({}, static_cast<double>(c.numel()), c.options())});
}

std::vector<std::pair<std::string, double>> preference_metrics(const Tensor& sums) {
  const Tensor s = sums.to(torch::kCPU, torch::kFloat64);
  const double n = s[6].item<double>();
  const auto mean = [&](int i) { return n > 0 ? s[i].item<double>() / n : 0.0; };
  return {{"rewards/chosen", mean(0)},  {"rewards/rejected", mean(1)}, {"rewards/accuracies", mean(2)},
          {"rewards/margins", mean(3)}, {"logps/chosen", mean(4)},     {"logps/rejected", mean(5)}};
}

// ---------------------------------------------------------------------------- KTO

void validate_kto_loss(const KtoLossOptions& o) {
  if (o.loss_type != "kto" && o.loss_type != "apo_zero_unpaired")
    fail_input("loss_type: unknown KTO loss '{}'; expected one of kto, apo_zero_unpaired", o.loss_type);
}

torch::Tensor kto_local_kl(const Tensor& kl_logps, const Tensor& ref_kl_logps) {
  return (kl_logps - ref_kl_logps).mean().detach();
}

KtoLossOutput kto_loss(const KtoInputs& in, const KtoLossOptions& o) {
  validate_kto_loss(o);
  need(in.logps, "logps", "kto_loss");
  need(in.ref_logps, "ref_logps", "kto_loss");
  need(in.labels, "labels", "kto_loss");
  const bool kto = o.loss_type == "kto";
  const double beta = o.beta;
  const Tensor labels = in.labels.to(in.logps.device(), torch::kBool);
  const Tensor chosen_idx = in.desirable_rows.defined() ? in.desirable_rows.to(labels.device())
                                                        : torch::nonzero(labels).view(-1);
  const Tensor rejected_idx = in.undesirable_rows.defined() ? in.undesirable_rows.to(labels.device())
                                                            : torch::nonzero(~labels).view(-1);

  Tensor kl;
  if (kto) {
    need(in.kl, "kl", "kto_loss with loss_type kto");
    kl = in.kl.detach().to(in.logps.device(), in.logps.scalar_type()).clamp_min(0);
  } else {
    kl = torch::zeros({1}, in.logps.options().requires_grad(false));
  }

  const Tensor chosen = in.logps.index_select(0, chosen_idx);
  const Tensor rejected = in.logps.index_select(0, rejected_idx);
  const Tensor chosen_logratios = chosen - in.ref_logps.to(in.logps.device()).index_select(0, chosen_idx);
  const Tensor rejected_logratios = rejected - in.ref_logps.to(in.logps.device()).index_select(0, rejected_idx);
  // Desirable examples are pushed above the KL baseline, undesirable ones below it.
  const Tensor chosen_losses =
      kto ? 1 - torch::sigmoid((chosen_logratios - kl) * beta) : 1 - torch::sigmoid(chosen_logratios * beta);
  const Tensor rejected_losses =
      kto ? 1 - torch::sigmoid((kl - rejected_logratios) * beta) : torch::sigmoid(rejected_logratios * beta);
  const Tensor weighted_chosen = chosen_losses * o.desirable_weight;
  const Tensor weighted_rejected = rejected_losses * o.undesirable_weight;

  KtoLossOutput out;
  out.loss = torch::cat({weighted_chosen, weighted_rejected}, 0).nanmean();
  out.losses = torch::zeros_like(in.logps)
                   .index_copy(0, chosen_idx, weighted_chosen)
                   .index_copy(0, rejected_idx, weighted_rejected);
  out.chosen_rewards = chosen_logratios.detach() * beta;
  out.rejected_rewards = rejected_logratios.detach() * beta;
  out.chosen_logps = chosen.detach();
  out.rejected_logps = rejected.detach();
  out.kl = kl.reshape({});
  return out;
}

torch::Tensor kto_metric_sums(const KtoLossOutput& out) {
  torch::NoGradGuard no_grad;
  const auto s = [](const Tensor& t) { return t.detach().to(torch::kFloat64).nansum(); };
  const auto n = [&](const Tensor& t) {  // made where t is: no copy from the host
    return torch::full({}, static_cast<double>(t.numel()), t.options().dtype(torch::kFloat64));
  };
  return torch::stack({s(out.chosen_rewards), s(out.chosen_logps), n(out.chosen_rewards), s(out.rejected_rewards),
                       s(out.rejected_logps), n(out.rejected_rewards)});
}

std::vector<std::pair<std::string, double>> kto_metrics(const Tensor& sums, double kl) {
  const Tensor s = sums.to(torch::kCPU, torch::kFloat64);
  std::vector<std::pair<std::string, double>> m = {{"kl", kl}};
  const double nc = s[2].item<double>(), nr = s[5].item<double>();
  if (nc > 0) {
    m.emplace_back("rewards/chosen", s[0].item<double>() / nc);
    m.emplace_back("logps/chosen", s[1].item<double>() / nc);
  }
  if (nr > 0) {
    m.emplace_back("rewards/rejected", s[3].item<double>() / nr);
    m.emplace_back("logps/rejected", s[4].item<double>() / nr);
  }
  if (nc > 0 && nr > 0)
    m.emplace_back("rewards/margins", s[0].item<double>() / nc - s[3].item<double>() / nr);
  return m;
}

// ---------------------------------------------------------------------------- CPO

void validate_cpo_loss(const CpoLossOptions& o) {
  static const std::vector<std::string> types = {"sigmoid", "hinge", "ipo", "simpo", "alphapo"};
  if (!contains(types, o.loss_type))
    fail_input("loss_type: unknown CPO loss '{}'; expected one of {}", o.loss_type, fmt::join(types, ", "));
  if (o.beta == 0 && o.loss_type != "sigmoid" && o.loss_type != "hinge")
    fail_input("beta: the {} loss divides by beta; it must not be 0", o.loss_type);
}

bool cpo_uses_average_logps(const CpoLossOptions& o) {
  return o.loss_type == "ipo" || o.loss_type == "simpo" || o.loss_type == "alphapo";
}

double cpo_effective_alpha(const CpoLossOptions& o) { return o.loss_type == "alphapo" ? 0.0 : o.cpo_alpha; }

CpoLossOutput cpo_loss(const CpoInputs& in, const CpoLossOptions& o) {
  validate_cpo_loss(o);
  need(in.chosen_logps, "chosen_logps", "cpo_loss");
  need(in.rejected_logps, "rejected_logps", "cpo_loss");
  const double beta = o.beta;
  const double cpo_alpha = cpo_effective_alpha(o);
  const bool simpo = o.loss_type == "simpo" || o.loss_type == "alphapo";

  // Rewards: log-probs, or AlphaPO's (1 - p^-alpha) / alpha.
  Tensor chosen_reward = in.chosen_logps, rejected_reward = in.rejected_logps;
  if (o.alpha != 0.0) {
    chosen_reward = (1 - torch::exp(in.chosen_logps).pow(-o.alpha)) / o.alpha;
    rejected_reward = (1 - torch::exp(in.rejected_logps).pow(-o.alpha)) / o.alpha;
  }
  Tensor logits = chosen_reward - rejected_reward;

  Tensor losses;
  const double ls = o.label_smoothing;
  if (simpo || o.loss_type == "sigmoid") {
    if (simpo) logits = logits - o.simpo_gamma / beta;
    losses = -torch::log_sigmoid(logits * beta) * (1 - ls) - torch::log_sigmoid(logits * -beta) * ls;
  } else if (o.loss_type == "hinge") {
    losses = torch::relu(1 - logits * beta);
  } else {  // ipo
    losses = (logits - 1 / (2 * beta)).pow(2);
  }

  Tensor nll;
  if (cpo_alpha == 0) {
    nll = torch::zeros({}, in.chosen_logps.options().requires_grad(false));
  } else {
    need(in.nll_loss, "nll_loss", "cpo_loss with cpo_alpha != 0");
    nll = in.nll_loss;
  }

  CpoLossOutput out;
  out.loss = losses.mean() + nll * cpo_alpha;
  out.losses = losses;
  out.chosen_rewards = chosen_reward.detach() * beta;
  out.rejected_rewards = rejected_reward.detach() * beta;
  out.nll_loss = nll.detach();
  return out;
}

// --------------------------------------------------------------------------- ORPO

namespace {
// log(1 - exp(x)) for x < 0, switching formulas at -ln 2 to avoid cancellation.
Tensor log1mexp(const Tensor& x) {
  return torch::where(x < -0.6931471805599453, torch::log1p(-torch::exp(x)), torch::log(-torch::expm1(x)));
}
}  // namespace

OrpoLossOutput orpo_loss(const OrpoInputs& in, const OrpoLossOptions& o) {
  need(in.chosen_logps, "chosen_logps", "orpo_loss");
  need(in.rejected_logps, "rejected_logps", "orpo_loss");
  need(in.nll_loss, "nll_loss", "orpo_loss");
  const Tensor c = in.chosen_logps.to(torch::kFloat32);
  const Tensor r = in.rejected_logps.to(torch::kFloat32);
  // log odds(chosen) - log odds(rejected), odds = p / (1 - p), from average log-probs.
  const Tensor log_odds = (c - r) - (log1mexp(c) - log1mexp(r));
  const Tensor ratio = torch::log_sigmoid(log_odds);
  const Tensor scaled = ratio * o.beta;

  OrpoLossOutput out;
  out.loss = in.nll_loss - scaled.mean();
  out.losses = -scaled;
  out.chosen_rewards = c.detach() * o.beta;
  out.rejected_rewards = r.detach() * o.beta;
  out.log_odds_ratio = ratio.mean().detach();
  out.log_odds_chosen = log_odds.mean().detach();
  out.nll_loss = in.nll_loss.detach();
  return out;
}

// ------------------------------------------------------------------------- Reward

RewardLossOutput reward_loss(const RewardInputs& in, const RewardLossOptions& o) {
  need(in.chosen_rewards, "chosen_rewards", "reward_loss");
  need(in.rejected_rewards, "rejected_rewards", "reward_loss");
  const Tensor& c = in.chosen_rewards;
  const Tensor& r = in.rejected_rewards;
  Tensor diff = c - r;
  if (in.margin.defined()) diff = diff - in.margin.to(c.device());
  RewardLossOutput out;
  out.loss = -torch::log_sigmoid(diff).mean();
  // Pulls the rewards' mean towards 0, so scores stay comparable across runs.
  if (o.center_rewards_coefficient) out.loss = out.loss + (c + r).pow(2).mean() * *o.center_rewards_coefficient;
  torch::NoGradGuard no_grad;
  const Tensor all = torch::cat({c.detach(), r.detach()});
  out.accuracy = (c.detach() > r.detach()).to(torch::kFloat32).mean();
  out.margin = (c.detach() - r.detach()).mean();
  out.min_reward = all.min();
  out.mean_reward = all.mean();
  out.max_reward = all.max();
  return out;
}

}  // namespace trlx::losses
