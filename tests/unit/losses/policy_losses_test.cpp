// The online trainers' objectives against TRL's numbers (tests/data/policy_losses,
// from scripts/fixtures/policy_losses_fixtures.py): GRPO's per-token terms and
// every loss type's reduction, RLOO's clipped sequence objective, online DPO's
// sigmoid and IPO losses, and PPO's rewards, whitening, GAE and clipped losses;
// values and gradients.
#include "catch_torch.hpp"

#include <algorithm>
#include <cmath>
#include <fstream>
#include <limits>
#include <set>

#include <nlohmann/json.hpp>

#include "core/error.hpp"
#include "losses/policy_gradient.hpp"
#include "losses/ppo.hpp"
#include "losses/preference.hpp"
#include "golden.hpp"
#include "support.hpp"

using nlohmann::json;
using torch::Tensor;
namespace L = trlx::losses;

namespace {

json load(const std::string& name) { return trlx::test::load_golden("policy_losses", name); }

Tensor vec(const json& a) { return trlx::test::golden_vec(a); }

Tensor mat(const json& a) {
  std::vector<Tensor> rows;
  for (const auto& r : a) rows.push_back(vec(r));
  return torch::stack(rows);
}

void check_value(const std::string& what, double got, double want) { trlx::test::check_golden(what, got, want); }

void check_all(const std::string& what, const Tensor& got, const Tensor& want) {
  // No gradient reached the tensor: 0 everywhere.
  const Tensor g = got.defined() ? got.detach().to(torch::kFloat64).reshape(-1) : torch::zeros({want.numel()}, torch::kFloat64);
  const Tensor w = want.to(torch::kFloat64).reshape(-1);
  REQUIRE(g.numel() == w.numel());
  for (int64_t i = 0; i < g.numel(); ++i)
    check_value(what + "[" + std::to_string(i) + "]", g[i].item<double>(), w[i].item<double>());
}

}  // namespace

// ---------------------------------------------------------------------------- GRPO

TEST_CASE("grpo: every loss type's terms and reduction equal TRL's loss and gradient", "[losses][grpo]") {
  const json j = load("grpo");
  const json& in = j.at("inputs");
  const Tensor mask = mat(in.at("mask"));
  const Tensor old = mat(in.at("old_logps")), ref = mat(in.at("ref_logps"));
  const Tensor adv = vec(in.at("advantages"));
  REQUIRE(j.at("cases").size() > 20);
  for (const auto& c : j.at("cases")) {
    const std::string name = c.at("name");
    SECTION(name) {
      const json& o = c.at("options");
      L::PolicyLossOptions opt;
      opt.loss_type = o.at("loss_type").get<std::string>();
      opt.sequence_level = o.at("importance_sampling_level") == "sequence";
      opt.epsilon_low = o.at("epsilon");
      opt.epsilon_high = o.at("epsilon_high").is_null() ? opt.epsilon_low : o.at("epsilon_high").get<double>();
      if (!o.at("delta").is_null()) opt.delta = o.at("delta").get<double>();
      opt.beta = o.at("beta");
      opt.bias_correction_kl = o.at("use_bias_correction_kl");
      opt.sapo_temperature_pos = o.at("sapo_temperature_pos");
      opt.sapo_temperature_neg = o.at("sapo_temperature_neg");
      opt.vespo_k_pos = o.at("vespo_k_pos");
      opt.vespo_lambda_pos = o.at("vespo_lambda_pos");
      opt.vespo_k_neg = o.at("vespo_k_neg");
      opt.vespo_lambda_neg = o.at("vespo_lambda_neg");
      if (!o.at("off_policy_mask_threshold").is_null())
        opt.off_policy_mask_threshold = o.at("off_policy_mask_threshold").get<double>();
      const Tensor entropy_mask = c.contains("entropy_mask") ? mat(c.at("entropy_mask")).to(torch::kBool) : Tensor();

      const Tensor logps = mat(in.at("logps")).requires_grad_(true);
      const auto terms = L::policy_loss_terms(logps, old, opt.beta != 0 ? ref : Tensor(), adv, mask, entropy_mask, opt);

      const bool training = o.at("training");
      L::PolicyLossReduction r;
      r.loss_type = opt.loss_type;
      r.max_completion_length = o.at("max_completion_length");
      // As the trainer passes them: the round's tokens of every rank as a
      // float64 scalar, one micro-batch per round in evaluation.
      r.round_completion_tokens = torch::full({}, o.at("num_items_in_batch").get<double>(), torch::kFloat64);
      r.micro_batches_per_round = training ? o.at("steps_per_generation").get<int64_t>() : 1;
      r.world_size = o.at("num_processes");
      const Tensor reduced = L::reduce_policy_loss(terms.per_token_loss, mask, r);
      // TRL's loss is the reduced one divided by the step's micro-batches
      // (what the engine divides by) in training.
      const double ga = training ? o.at("gradient_accumulation_steps").get<double>() : 1.0;
      const Tensor loss = reduced / ga;
      check_value("loss", loss.item<double>(), c.at("loss"));
      loss.backward();
      check_all("grad", logps.grad(), mat(c.at("grad")));
    }
  }
}

TEST_CASE("grpo: the fixture covers every loss type trlx accepts", "[losses][grpo]") {
  const json j = load("grpo");
  std::set<std::string> seen;
  for (const auto& c : j.at("cases")) seen.insert(c.at("options").at("loss_type").get<std::string>());
  for (const char* t : {"grpo", "bnpo", "dr_grpo", "dapo", "cispo", "sapo", "vespo", "luspo"}) {
    INFO(t);
    CHECK(seen.count(t) == 1);
  }
}

TEST_CASE("grpo: which loss types divide by the round's tokens", "[losses][grpo]") {
  for (const char* t : {"dapo", "cispo", "vespo"}) CHECK(L::loss_sums_over_round(t));
  for (const char* t : {"grpo", "bnpo", "dr_grpo", "sapo", "luspo"}) CHECK_FALSE(L::loss_sums_over_round(t));
  L::PolicyLossReduction r;
  r.loss_type = "dapo";  // without the round's token count
  CHECK_THROWS(L::reduce_policy_loss(torch::ones({2, 3}), torch::ones({2, 3}), r));
  r.loss_type = "nope";
  CHECK_THROWS(L::reduce_policy_loss(torch::ones({2, 3}), torch::ones({2, 3}), r));
}

TEST_CASE("grpo: the entropy bonus's mean and its adaptive coefficient follow TRL's rule", "[losses][grpo]") {
  // Entropy over the counted tokens: the mask, times the entropy mask.
  const Tensor entropy = torch::tensor({{1.0, 2.0, 3.0}, {4.0, 5.0, 6.0}});
  const Tensor mask = torch::tensor({{1.0, 1.0, 0.0}, {1.0, 0.0, 0.0}});
  CHECK(L::masked_entropy_mean(entropy, mask, Tensor()).item<double>() == Approx(7.0 / 3.0));
  const Tensor high = torch::tensor({{false, true, true}, {true, false, false}});
  CHECK(L::masked_entropy_mean(entropy, mask, high).item<double>() == Approx(3.0));
  // Nothing counted: 0, not NaN.
  CHECK(L::masked_entropy_mean(entropy, torch::zeros({2, 3}), Tensor()).item<double>() == 0.0);

  // TRL's controller (GRPOTrainer._compute_loss): up by delta at or below
  // the target, down by delta above it, within [min, max].
  const L::EntropyControl c{.target = 0.5, .delta = 0.01, .min = 0.0, .max = 0.03};
  CHECK(L::next_entropy_coef(0.02, 0.5, c) == Approx(0.03));
  CHECK(L::next_entropy_coef(0.025, 0.1, c) == 0.03);
  CHECK(L::next_entropy_coef(0.02, 0.51, c) == Approx(0.01));
  CHECK(L::next_entropy_coef(0.005, 0.9, c) == 0.0);
  // Applied only while the last step's entropy was at or below the target;
  // before any step (+inf) none; a fixed coefficient always.
  const double inf = std::numeric_limits<double>::infinity();
  CHECK(L::applied_entropy_coef(0.02, true, inf, 0.5) == 0.0);
  CHECK(L::applied_entropy_coef(0.02, true, 0.5, 0.5) == 0.02);
  CHECK(L::applied_entropy_coef(0.02, true, 0.6, 0.5) == 0.0);
  CHECK(L::applied_entropy_coef(0.02, false, 0.6, 0.5) == 0.02);
}

TEST_CASE("grpo and rloo: the clip indicators count a clip only on the side the advantage pushes", "[losses][grpo]") {
  // Per token [B, T] against per-row advantages [B, 1], epsilon 0.2 / 0.28.
  const Tensor ratio = torch::tensor({{0.7, 0.9, 1.3}, {0.7, 1.1, 1.3}});
  const Tensor adv = torch::tensor({-1.0, 1.0}).unsqueeze(1);
  const auto c = L::clip_indicators(ratio, adv, 0.2, 0.28, torch::kFloat32);
  CHECK(c.low.scalar_type() == torch::kFloat32);
  CHECK(torch::equal(c.low, torch::tensor({{1.0f, 0.0f, 0.0f}, {0.0f, 0.0f, 0.0f}})));
  CHECK(torch::equal(c.high, torch::tensor({{0.0f, 0.0f, 0.0f}, {0.0f, 0.0f, 1.0f}})));
  CHECK(torch::equal(c.region, torch::tensor({{1.0f, 0.0f, 0.0f}, {0.0f, 0.0f, 1.0f}})));
  // A zero advantage is never clipped.
  const auto z = L::clip_indicators(torch::tensor({0.1, 5.0}), torch::zeros({2}), 0.2, 0.2, torch::kFloat64);
  CHECK(z.region.sum().item<double>() == 0.0);
}

// ---------------------------------------------------------------------------- RLOO

TEST_CASE("rloo: the clipped sequence objective equals TRL's loss and gradient", "[losses][rloo]") {
  const json j = load("rloo");
  const json& in = j.at("inputs");
  const Tensor mask = mat(in.at("mask"));
  const Tensor adv = vec(in.at("advantages"));
  for (const auto& c : j.at("cases")) {
    const std::string name = c.at("name");
    SECTION(name) {
      const Tensor logps = mat(in.at("logps")).requires_grad_(true);
      const Tensor old = c.at("with_old_logps").get<bool>() ? mat(in.at("old_logps")) : Tensor();
      const double lo = c.at("epsilon_low"), hi = c.at("epsilon_high");
      const auto t = L::rloo_loss(logps, old, mask, adv, lo, hi);
      // The trainer's loss_sum is divided by the rows (its num_items): TRL's mean.
      const Tensor loss = t.loss_sum / static_cast<double>(adv.size(0));
      check_value("loss", loss.item<double>(), c.at("loss"));
      // TRL's clip metrics from the ratio the loss returns.
      const auto clip = L::clip_indicators(t.ratio, adv, lo, hi, torch::kFloat32);
      check_value("clip_ratio/low_mean", clip.low.mean().item<double>(), c.at("clip_ratio/low_mean"));
      check_value("clip_ratio/high_mean", clip.high.mean().item<double>(), c.at("clip_ratio/high_mean"));
      loss.backward();
      check_all("grad", logps.grad(), mat(c.at("grad")));
    }
  }
}

// ---------------------------------------------------------------------- online DPO

TEST_CASE("online dpo: sigmoid and ipo equal TRL's loss, rewards and gradient", "[losses][online_dpo]") {
  const json j = load("online_dpo");
  for (const auto& c : j.at("cases")) {
    const std::string name = c.at("name");
    SECTION(name) {
      L::OnlineDpoInputs x;
      x.chosen_logps = vec(c.at("chosen_logps")).requires_grad_(true);
      x.rejected_logps = vec(c.at("rejected_logps")).requires_grad_(true);
      x.ref_chosen_logps = vec(c.at("ref_chosen_logps"));
      x.ref_rejected_logps = vec(c.at("ref_rejected_logps"));
      // As the trainer keeps it: a float64 scalar tensor.
      x.beta = torch::full({}, c.at("beta").get<double>(), torch::kFloat64);
      const auto out = L::online_dpo_loss(x, c.at("loss_type").get<std::string>());
      const Tensor loss = out.losses.mean();
      check_value("loss", loss.item<double>(), c.at("loss"));
      check_value("rewards/chosen", out.chosen_rewards.mean().item<double>(), c.at("rewards/chosen"));
      check_value("rewards/rejected", out.rejected_rewards.mean().item<double>(), c.at("rewards/rejected"));
      const Tensor margins = (out.chosen_rewards - out.rejected_rewards).detach();
      check_value("rewards/margins", margins.mean().item<double>(), c.at("rewards/margins"));
      check_value("rewards/accuracies", (margins > 0).to(torch::kFloat32).mean().item<double>(),
                  c.at("rewards/accuracies"));
      loss.backward();
      check_all("grad chosen", x.chosen_logps.grad(), vec(c.at("grad_chosen")));
      check_all("grad rejected", x.rejected_logps.grad(), vec(c.at("grad_rejected")));
    }
  }
  CHECK_THROWS_AS(L::online_dpo_loss({torch::zeros({1}), torch::zeros({1}), torch::zeros({1}), torch::zeros({1}),
                                      torch::full({}, 0.1, torch::kFloat64)},
                                     "hinge"),
                  trlx::InputError);
}

TEST_CASE("online dpo and dpo share the sigmoid and ipo losses", "[losses][online_dpo]") {
  // A number and a scalar tensor beta give the same fp32 losses.
  const Tensor logits = torch::tensor({-2.5f, -0.3f, 0.0f, 0.7f, 3.1f});
  for (double beta : {0.1, 0.37}) {
    const Tensor tb = torch::full({}, beta, torch::kFloat64);
    CHECK(torch::equal(L::sigmoid_pair_loss(logits, beta), L::sigmoid_pair_loss(logits, tb)));
    CHECK(torch::equal(L::ipo_pair_loss(logits, beta), L::ipo_pair_loss(logits, tb)));
  }
}

// ----------------------------------------------------------------------------- PPO

TEST_CASE("ppo: rewards, whitening, GAE and whitened advantages equal TRL's", "[losses][ppo]") {
  const json j = load("ppo");
  const Tensor seq = torch::tensor(j.at("sequence_lengths").get<std::vector<int64_t>>(), torch::kInt64);
  const Tensor scores = vec(j.at("scores"));
  for (const auto& c : j.at("rollouts")) {
    const std::string name = c.at("name");
    SECTION(name) {
      const json& a = c.at("args");
      const Tensor padding = mat(c.at("padding")).to(torch::kBool), padding_p1 = mat(c.at("padding_p1")).to(torch::kBool);
      const Tensor keep = padding.logical_not().to(torch::kFloat32), keep_p1 = padding_p1.logical_not().to(torch::kFloat32);
      const auto shaped = L::ppo_rewards(mat(c.at("logprobs")), mat(c.at("ref_logprobs")), scores, seq,
                                         a.at("kl_coef").get<double>(), a.at("kl_estimator").get<std::string>());
      check_all("kl", shaped.kl, mat(c.at("kl")));
      check_all("non_score_reward", shaped.non_score_reward, mat(c.at("non_score_reward")));
      check_all("rewards", shaped.rewards, mat(c.at("shaped_rewards")));
      Tensor rewards = shaped.rewards;
      if (a.at("whiten_rewards").get<bool>())
        rewards = L::masked_whiten(rewards, keep_p1, false).masked_fill(padding_p1, 0.0);
      check_all("whitened rewards", rewards, mat(c.at("rewards")));
      const auto gae = L::ppo_advantages(rewards, mat(c.at("values")), keep, padding, a.at("gamma").get<double>(), a.at("lam").get<double>());
      check_all("raw advantages", gae.raw, mat(c.at("raw_advantages")));
      check_all("returns", gae.returns, mat(c.at("returns")));
      check_all("advantages", gae.advantages, mat(c.at("advantages")));
    }
  }
}

TEST_CASE("ppo: the clipped policy and value losses equal TRL's, metrics and gradients", "[losses][ppo]") {
  const json j = load("ppo");
  const json& in = j.at("loss_inputs");
  const Tensor padding = mat(in.at("padding")).to(torch::kBool), padding_p1 = mat(in.at("padding_p1")).to(torch::kBool);
  const Tensor keep = padding.logical_not().to(torch::kFloat32), keep_p1 = padding_p1.logical_not().to(torch::kFloat32);
  for (const auto& c : j.at("losses")) {
    const std::string name = c.at("name");
    SECTION(name) {
      const json& a = c.at("args");
      L::PpoLossOptions o;
      o.cliprange = a.at("cliprange");
      o.cliprange_value = a.at("cliprange_value");
      o.vf_coef = a.at("vf_coef");
      const Tensor new_leaf = mat(in.at("new_logprobs")).requires_grad_(true);
      const Tensor v_leaf = mat(in.at("vpred")).requires_grad_(true);
      // As the trainer masks them: the log-prob mark past a response, no value past the token after it.
      const auto out = L::ppo_loss(new_leaf.masked_fill(padding, 1.0), mat(in.at("old_logprobs")),
                                   v_leaf.masked_fill(padding_p1, 0.0), mat(in.at("old_values")),
                                   mat(in.at("returns")), mat(in.at("advantages")), keep, keep_p1, o);
      check_value("loss", out.loss.item<double>(), c.at("loss"));
      check_value("pg_loss", out.pg_loss.item<double>(), c.at("pg_loss"));
      check_value("vf_loss", out.vf_loss.item<double>(), c.at("vf_loss"));
      check_value("pg_clipfrac", out.pg_clipfrac.item<double>(), c.at("pg_clipfrac"));
      check_value("vf_clipfrac", out.vf_clipfrac.item<double>(), c.at("vf_clipfrac"));
      check_value("approxkl", out.approxkl.item<double>(), c.at("approxkl"));
      check_value("ratio_mean", out.ratio_mean.item<double>(), c.at("ratio_mean"));
      out.loss.backward();
      check_all("grad logprobs", new_leaf.grad(), mat(c.at("grad_logprobs")));
      check_all("grad values", v_leaf.grad(), mat(c.at("grad_values")));
    }
  }
}

TEST_CASE("ppo: whitening fewer than two tokens is an input error", "[losses][ppo]") {
  const Tensor x = torch::tensor({1.0f, 2.0f, 3.0f});
  CHECK_THROWS_AS(L::masked_whiten(x, torch::tensor({0.0f, 1.0f, 0.0f}), true), trlx::InputError);
  CHECK_NOTHROW(L::masked_whiten(x, torch::tensor({1.0f, 1.0f, 0.0f}), true));
}
