// Preference and reward losses against TRL 1.16's numbers
// (tests/data/preference_losses, from scripts/fixtures/preference_loss_fixtures.py):
// loss, per-example losses where TRL defines them, logged metrics, and the
// gradient with respect to the policy inputs.
#include "catch_torch.hpp"

#include <algorithm>
#include <cmath>
#include <fstream>
#include <set>

#include <nlohmann/json.hpp>

#include "losses/preference.hpp"
#include "golden.hpp"
#include "support.hpp"

using nlohmann::json;
using torch::Tensor;
namespace L = trlx::losses;

namespace {

json load(const std::string& name) { return trlx::test::load_golden("preference_losses", name); }

Tensor vec(const json& a) { return trlx::test::golden_vec(a); }

Tensor leaf(const json& a) { return vec(a).requires_grad_(true); }

void check_value(const std::string& what, double got, double want) { trlx::test::check_golden(what, got, want); }

void check_vec(const std::string& what, const Tensor& got, const json& want) {
  // An input the loss does not use (sft alone and the rejected side) gets no gradient: 0.
  const Tensor g = got.defined() ? got.detach().to(torch::kFloat64).reshape(-1)
                                 : torch::zeros({static_cast<int64_t>(want.size())}, torch::kFloat64);
  REQUIRE(g.numel() == static_cast<int64_t>(want.size()));
  for (int64_t i = 0; i < g.numel(); ++i) check_value(what + "[" + std::to_string(i) + "]", g[i].item<double>(), want[i]);
}

std::vector<std::string> strings(const json& a) { return a.get<std::vector<std::string>>(); }

L::DpoLossOptions dpo_options(const json& o) {
  L::DpoLossOptions opt;
  opt.beta = o.value("beta", 0.1);
  opt.loss_type = strings(o.at("loss_type"));
  if (o.contains("loss_weights")) opt.loss_weights = o.at("loss_weights").get<std::vector<double>>();
  opt.label_smoothing = o.value("label_smoothing", 0.0);
  opt.f_divergence_type = o.value("f_divergence_type", "reverse_kl");
  opt.f_alpha_divergence_coef = o.value("f_alpha_divergence_coef", 0.5);
  opt.discopop_tau = o.value("discopop_tau", 0.05);
  if (o.contains("ld_alpha")) opt.ld_alpha = o.at("ld_alpha").get<double>();
  opt.use_weighting = o.value("use_weighting", false);
  return opt;
}

}  // namespace

TEST_CASE("dpo: every loss type and option equals TRL's loss, per-pair losses, metrics and gradient",
          "[losses][dpo]") {
  const json j = load("dpo");
  const json& in = j.at("inputs");
  REQUIRE(j.at("cases").size() > 50);
  for (const auto& c : j.at("cases")) {
    const std::string name = c.at("name");
    SECTION(name) {
      const L::DpoLossOptions opt = dpo_options(c.at("options"));
      L::DpoInputs x;
      const bool ld = opt.ld_alpha.has_value();
      x.chosen_logps = leaf(in.at(ld ? "chosen_shared_logps" : "chosen_logps"));
      x.rejected_logps = leaf(in.at(ld ? "rejected_shared_logps" : "rejected_logps"));
      x.ref_chosen_logps = vec(in.at(ld ? "chosen_ref_shared_logps" : "chosen_ref_logps"));
      x.ref_rejected_logps = vec(in.at(ld ? "rejected_ref_shared_logps" : "rejected_ref_logps"));
      if (ld) {
        x.chosen_tail_logps = leaf(in.at("chosen_tail_logps"));
        x.rejected_tail_logps = leaf(in.at("rejected_tail_logps"));
        x.ref_chosen_tail_logps = vec(in.at("chosen_ref_tail_logps"));
        x.ref_rejected_tail_logps = vec(in.at("rejected_ref_tail_logps"));
      }
      x.chosen_tokens = vec(in.at("chosen_tokens"));
      x.rejected_tokens = vec(in.at("rejected_tokens"));
      x.chosen_wpo_logps = vec(in.at("chosen_wpo_logps"));
      x.rejected_wpo_logps = vec(in.at("rejected_wpo_logps"));

      const L::DpoLossOutput out = L::dpo_loss(x, opt);
      check_value("loss", out.loss.item<double>(), c.at("loss"));
      if (c.contains("losses")) check_vec("losses", out.losses, c.at("losses"));
      check_value("mean(losses)", out.losses.mean().item<double>(), c.at("loss"));

      for (const auto& [k, v] :
           L::preference_metrics(L::preference_metric_sums(out.chosen_rewards, out.rejected_rewards,
                                                           out.chosen_logps, out.rejected_logps)))
        check_value(k, v, c.at("metrics").at(k));

      out.loss.backward();
      const json& g = c.at("grad");
      check_vec("grad chosen", x.chosen_logps.grad(), g.at("chosen_logps"));
      check_vec("grad rejected", x.rejected_logps.grad(), g.at("rejected_logps"));
      if (ld) {
        // TRL's gradient reaches a tail only through its tokens; an empty tail
        // (sum exactly 0) has none, and the fixture records 0 there.
        for (const char* side : {"chosen", "rejected"}) {
          const std::string key = std::string(side) + "_tail_logps";
          const Tensor& t = std::string(side) == "chosen" ? x.chosen_tail_logps : x.rejected_tail_logps;
          const Tensor has_tail = t.detach() != 0;
          check_vec("grad " + key, t.grad() * has_tail, g.at(key));
        }
      }
    }
  }
}

TEST_CASE("dpo: the fixture covers every loss type trlx accepts", "[losses][dpo]") {
  const json j = load("dpo");
  std::set<std::string> seen;
  for (const auto& c : j.at("cases"))
    for (const auto& t : c.at("options").at("loss_type")) seen.insert(t.get<std::string>());
  for (const auto& t : L::dpo_loss_type_names()) {
    INFO(t);
    CHECK(seen.count(t) == 1);
  }
}

TEST_CASE("dpo: bad options are input errors", "[losses][dpo]") {
  L::DpoInputs x;
  x.chosen_logps = x.rejected_logps = x.ref_chosen_logps = x.ref_rejected_logps = torch::zeros({2});
  const auto err = [&](L::DpoLossOptions o) { return trlx::test::input_error_of([&] { L::dpo_loss(x, o); }); };
  L::DpoLossOptions o;
  o.loss_type = {"sigmoid", "kto_pair"};
  CHECK_THAT(err(o), Catch::Contains("kto_pair"));
  o = {};
  o.loss_type = {"sigmoid", "hinge"};
  o.loss_weights = {1.0};
  CHECK_THAT(err(o), Catch::Contains("loss_weights"));
  o = {};
  o.loss_type = {"bco_pair"};
  o.f_divergence_type = "js_divergence";
  CHECK_THAT(err(o), Catch::Contains("bco_pair"));
  o = {};
  o.f_divergence_type = "hellinger";
  CHECK_THAT(err(o), Catch::Contains("hellinger"));
  o = {};
  o.loss_type = {"exo_pair"};
  CHECK_THAT(err(o), Catch::Contains("label_smoothing"));
  o = {};
  o.loss_type = {"aot"};
  o.use_weighting = true;
  CHECK_THAT(err(o), Catch::Contains("use_weighting"));
  o = {};
  o.loss_type = {};
  CHECK_THAT(err(o), Catch::Contains("loss_type"));
}

TEST_CASE("dpo: per-pair losses and rewards follow the pairs, and losses average to the loss", "[losses][dpo]") {
  // Swapping chosen and rejected flips the sigmoid loss to -logsigmoid(-x) and the rewards' roles.
  L::DpoInputs x;
  x.chosen_logps = torch::tensor({-3.0f, -7.0f, -1.5f});
  x.rejected_logps = torch::tensor({-5.0f, -6.0f, -9.0f});
  x.ref_chosen_logps = torch::tensor({-4.0f, -6.5f, -2.0f});
  x.ref_rejected_logps = torch::tensor({-4.5f, -6.0f, -8.0f});
  L::DpoLossOptions o;
  o.loss_type = {"sigmoid", "hinge"};
  o.loss_weights = {0.25, 2.0};
  const auto out = L::dpo_loss(x, o);
  const Tensor d = ((x.chosen_logps - x.ref_chosen_logps) - (x.rejected_logps - x.ref_rejected_logps)) * 0.1;
  const Tensor want = -torch::log_sigmoid(d) * 0.25 + torch::relu(1 - d) * 2.0;
  CHECK(torch::allclose(out.losses, want, 1e-6, 1e-6));
  CHECK(trlx::test::near_golden(out.loss.item<double>(), want.mean().item<double>()));
  CHECK(torch::allclose(out.chosen_rewards, (x.chosen_logps - x.ref_chosen_logps) * 0.1));
}

TEST_CASE("kto: kto and apo_zero_unpaired equal TRL's loss, metrics and gradient", "[losses][kto]") {
  const json j = load("kto");
  const json& in = j.at("inputs");
  for (const auto& c : j.at("cases")) {
    const std::string name = c.at("name");
    SECTION(name) {
      const json& o = c.at("options");
      L::KtoLossOptions opt;
      opt.beta = o.value("beta", 0.1);
      opt.loss_type = o.value("loss_type", "kto");
      opt.desirable_weight = o.value("desirable_weight", 1.0);
      opt.undesirable_weight = o.value("undesirable_weight", 1.0);
      L::KtoInputs x;
      x.logps = leaf(in.at("logps"));
      x.ref_logps = vec(in.at("ref_logps"));
      std::vector<uint8_t> labels;
      for (const auto& b : c.at("labels")) labels.push_back(b.get<bool>() ? 1 : 0);
      x.labels = torch::tensor(labels, torch::kUInt8).to(torch::kBool);
      if (!c.at("kl_input").is_null())
        x.kl = L::kto_local_kl(vec(in.at("kl_logps")), vec(in.at(c.at("kl_input").get<std::string>())));

      const L::KtoLossOutput out = L::kto_loss(x, opt);
      check_value("loss", out.loss.item<double>(), c.at("loss"));
      check_value("mean(losses)", out.losses.mean().item<double>(), c.at("loss"));
      const json& m = c.at("metrics");
      for (const auto& [k, v] : L::kto_metrics(L::kto_metric_sums(out), out.kl.item<double>()))
        check_value(k, v, m.at(k));
      for (const char* k : {"rewards/chosen", "rewards/rejected", "rewards/margins", "kl"}) {
        const auto got = L::kto_metrics(L::kto_metric_sums(out), out.kl.item<double>());
        const bool have = std::any_of(got.begin(), got.end(), [&](const auto& p) { return p.first == k; });
        INFO(k);
        CHECK(have == m.contains(k));
      }
      out.loss.backward();
      check_vec("grad", x.logps.grad(), c.at("grad"));
    }
  }
}

TEST_CASE("kto: unknown loss type is an input error", "[losses][kto]") {
  L::KtoInputs x;
  x.logps = x.ref_logps = torch::zeros({2});
  x.labels = torch::ones({2}, torch::kBool);
  L::KtoLossOptions o;
  o.loss_type = "bco";
  CHECK_THAT(trlx::test::input_error_of([&] { L::kto_loss(x, o); }), Catch::Contains("bco"));
}

TEST_CASE("cpo: every loss type equals TRL's loss, per-pair losses, metrics and gradient", "[losses][cpo]") {
  const json j = load("cpo");
  const json& in = j.at("inputs");
  for (const auto& c : j.at("cases")) {
    const std::string name = c.at("name");
    SECTION(name) {
      const json& o = c.at("options");
      L::CpoLossOptions opt;
      opt.beta = o.value("beta", 0.1);
      opt.loss_type = o.at("loss_type");
      opt.label_smoothing = o.value("label_smoothing", 0.0);
      opt.cpo_alpha = o.value("cpo_alpha", 1.0);
      opt.simpo_gamma = o.value("simpo_gamma", 0.5);
      opt.alpha = o.value("alpha", 0.0);
      const bool avg = c.at("logps") == "avg";
      CHECK(L::cpo_uses_average_logps(opt) == (opt.loss_type == "ipo" || opt.loss_type == "simpo" ||
                                               opt.loss_type == "alphapo"));
      L::CpoInputs x;
      x.chosen_logps = leaf(in.at(avg ? "chosen_avg_logps" : "chosen_sum_logps"));
      x.rejected_logps = leaf(in.at(avg ? "rejected_avg_logps" : "rejected_sum_logps"));
      x.nll_loss = torch::tensor(in.at("nll_loss").get<float>()).requires_grad_(true);

      const L::CpoLossOutput out = L::cpo_loss(x, opt);
      check_value("loss", out.loss.item<double>(), c.at("loss"));
      check_vec("losses", out.losses, c.at("losses"));
      const json& m = c.at("metrics");
      for (const auto& [k, v] : L::preference_metrics(L::preference_metric_sums(
               out.chosen_rewards, out.rejected_rewards, x.chosen_logps, x.rejected_logps)))
        check_value(k, v, m.at(k));
      check_value("nll_loss", out.nll_loss.item<double>(), m.at("nll_loss"));
      out.loss.backward();
      const json& g = c.at("grad");
      check_vec("grad chosen", x.chosen_logps.grad(), g.at("chosen_logps"));
      check_vec("grad rejected", x.rejected_logps.grad(), g.at("rejected_logps"));
      const double nll_grad = x.nll_loss.grad().defined() ? x.nll_loss.grad().item<double>() : 0.0;
      check_value("grad nll", nll_grad, g.at("nll_loss"));
    }
  }
}

TEST_CASE("cpo: unknown loss type is an input error", "[losses][cpo]") {
  L::CpoInputs x;
  x.chosen_logps = x.rejected_logps = torch::zeros({2});
  L::CpoLossOptions o;
  o.loss_type = "dpo";
  CHECK_THAT(trlx::test::input_error_of([&] { L::cpo_loss(x, o); }), Catch::Contains("dpo"));
}

TEST_CASE("orpo: odds-ratio loss equals TRL's loss, metrics and gradient", "[losses][orpo]") {
  const json j = load("orpo");
  const json& in = j.at("inputs");
  for (const auto& c : j.at("cases")) {
    const std::string name = c.at("name");
    SECTION(name) {
      L::OrpoLossOptions opt;
      opt.beta = c.at("options").at("beta");
      L::OrpoInputs x;
      x.chosen_logps = leaf(in.at("chosen_logps"));
      x.rejected_logps = leaf(in.at("rejected_logps"));
      x.nll_loss = torch::tensor(in.at("nll_loss").get<float>()).requires_grad_(true);
      const L::OrpoLossOutput out = L::orpo_loss(x, opt);
      check_value("loss", out.loss.item<double>(), c.at("loss"));
      check_vec("losses", out.losses, c.at("losses"));
      const json& m = c.at("metrics");
      for (const auto& [k, v] : L::preference_metrics(L::preference_metric_sums(
               out.chosen_rewards, out.rejected_rewards, x.chosen_logps, x.rejected_logps)))
        check_value(k, v, m.at(k));
      check_value("log_odds_ratio", out.log_odds_ratio.item<double>(), m.at("log_odds_ratio"));
      check_value("log_odds_chosen", out.log_odds_chosen.item<double>(), m.at("log_odds_chosen"));
      check_value("nll_loss", out.nll_loss.item<double>(), m.at("nll_loss"));
      out.loss.backward();
      const json& g = c.at("grad");
      check_vec("grad chosen", x.chosen_logps.grad(), g.at("chosen_logps"));
      check_vec("grad rejected", x.rejected_logps.grad(), g.at("rejected_logps"));
      check_value("grad nll", x.nll_loss.grad().item<double>(), g.at("nll_loss"));
    }
  }
}

TEST_CASE("reward: Bradley-Terry with margin and centering equals TRL's loss, metrics and gradient",
          "[losses][reward]") {
  const json j = load("reward");
  const json& in = j.at("inputs");
  for (const auto& c : j.at("cases")) {
    const std::string name = c.at("name");
    SECTION(name) {
      const json& o = c.at("options");
      L::RewardLossOptions opt;
      if (!o.at("center_rewards_coefficient").is_null())
        opt.center_rewards_coefficient = o.at("center_rewards_coefficient").get<double>();
      L::RewardInputs x;
      x.chosen_rewards = leaf(in.at("chosen_rewards"));
      x.rejected_rewards = leaf(in.at("rejected_rewards"));
      if (o.at("margin").get<bool>()) x.margin = vec(in.at("margin"));
      const L::RewardLossOutput out = L::reward_loss(x, opt);
      check_value("loss", out.loss.item<double>(), c.at("loss"));
      const json& m = c.at("metrics");
      check_value("accuracy", out.accuracy.item<double>(), m.at("accuracy"));
      check_value("margin", out.margin.item<double>(), m.at("margin"));
      check_value("min_reward", out.min_reward.item<double>(), m.at("min_reward"));
      check_value("mean_reward", out.mean_reward.item<double>(), m.at("mean_reward"));
      check_value("max_reward", out.max_reward.item<double>(), m.at("max_reward"));
      out.loss.backward();
      check_vec("grad chosen", x.chosen_rewards.grad(), c.at("grad").at("chosen_rewards"));
      check_vec("grad rejected", x.rejected_rewards.grad(), c.at("grad").at("rejected_rewards"));
    }
  }
}
