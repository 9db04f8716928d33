// The distillation divergence against TRL's ChunkedDivergenceFunction
// (tests/data/distill/divergence.json, scripts/fixtures/distill_fixtures.py):
// per-token divergence and entropy, and the gradients of a weighted sum with
// respect to the student's hidden states and head weight, for forward KL,
// reverse KL and the generalized JSD, temperatures and soft caps; in chunks
// of every size, and without building gradients where none is asked.
#include "catch_torch.hpp"

#include <fstream>

#include <ATen/autocast_mode.h>
#include <nlohmann/json.hpp>

#include "core/error.hpp"
#include "losses/distill.hpp"
#include "support.hpp"

using namespace trlx;

namespace {

torch::Tensor tensor_of(const nlohmann::json& a) {
  std::vector<double> flat;
  std::vector<int64_t> shape = {static_cast<int64_t>(a.size())};
  for (const auto& row : a) {
    if (row.is_array()) {
      if (shape.size() == 1) shape.push_back(static_cast<int64_t>(row.size()));
      for (const auto& x : row) flat.push_back(x.get<double>());
    } else {
      flat.push_back(row.get<double>());
    }
  }
  return torch::tensor(flat, torch::kFloat64).view(shape).to(torch::kFloat32);
}

double largest(const torch::Tensor& got, const torch::Tensor& want) {
  REQUIRE(got.sizes() == want.sizes());
  return ((got.to(torch::kFloat64) - want.to(torch::kFloat64)).abs() / want.to(torch::kFloat64).abs().clamp_min(1.0))
      .max()
      .item<double>();
}

nlohmann::json cases() {
  std::ifstream in(test::data_dir() / "distill" / "divergence.json");
  REQUIRE(in.good());
  return nlohmann::json::parse(in);
}

}  // namespace

TEST_CASE("distill divergence: values and gradients equal TRL's ChunkedDivergenceFunction, every case and chunk size",
          "[losses][distill][golden]") {
  const auto all = cases();
  REQUIRE(all.size() >= 8);
  for (const auto& cs : all) {
    for (int64_t chunk : {0, 1, 3, 7}) {
      DYNAMIC_SECTION(cs.at("name").get<std::string>() << " chunk " << chunk) {
        auto hs = tensor_of(cs.at("student_hidden")).requires_grad_(true);
        auto ws = tensor_of(cs.at("student_weight")).requires_grad_(true);
        const auto ht = tensor_of(cs.at("teacher_hidden"));
        const auto wt = tensor_of(cs.at("teacher_weight"));
        const auto g = tensor_of(cs.at("grad_out"));
        losses::DivergenceOptions o;
        o.beta = cs.at("beta").get<double>();
        o.temperature = cs.at("temperature").get<double>();
        if (!cs.at("student_softcap").is_null()) o.student_softcap = cs.at("student_softcap").get<double>();
        if (!cs.at("teacher_softcap").is_null()) o.teacher_softcap = cs.at("teacher_softcap").get<double>();
        o.chunk_tokens = chunk;
        // Tokens weighted by TRL's upstream gradient: the weighted sum's
        // gradient is TRL's backward with that gradient.
        const auto out = losses::token_divergence(hs, ws, ht, wt, g, o);
        out.loss_sum.backward();
        const double d_div = largest(out.divergence, tensor_of(cs.at("divergence")));
        const double d_ent = largest(out.entropy, tensor_of(cs.at("entropy")));
        const double d_gh = largest(hs.grad(), tensor_of(cs.at("grad_hidden")));
        const double d_gw = largest(ws.grad(), tensor_of(cs.at("grad_weight")));
        const double d_sum =
            std::abs(out.loss_sum.item<double>() - (tensor_of(cs.at("divergence")) * g).sum().item<double>());
        INFO("divergence " << d_div << ", entropy " << d_ent << ", grad hidden " << d_gh << ", grad weight " << d_gw
                           << ", loss sum " << d_sum);
        CHECK(d_div <= 1e-5);
        CHECK(d_ent <= 1e-5);
        CHECK(d_gh <= 1e-5);
        CHECK(d_gw <= 1e-5);
        CHECK(d_sum <= 1e-4);
      }
    }
  }
}

TEST_CASE("distill divergence: masked-out tokens count nowhere, and the teacher gets no gradient", "[losses][distill]") {
  const auto cs = cases().at(2);
  auto hs = tensor_of(cs.at("student_hidden")).requires_grad_(true);
  auto ws = tensor_of(cs.at("student_weight")).requires_grad_(true);
  auto ht = tensor_of(cs.at("teacher_hidden")).requires_grad_(true);
  const auto wt = tensor_of(cs.at("teacher_weight"));
  auto mask = torch::ones({hs.size(0)});
  mask[1] = 0;
  mask[4] = 0;
  losses::DivergenceOptions o;
  o.beta = cs.at("beta").get<double>();
  const auto out = losses::token_divergence(hs, ws, ht, wt, mask, o);
  out.loss_sum.backward();
  CHECK(out.divergence[1].item<float>() == 0);
  CHECK(out.entropy[4].item<float>() == 0);
  CHECK(hs.grad()[1].abs().sum().item<float>() == 0);
  CHECK(hs.grad()[0].abs().sum().item<float>() > 0);
  CHECK(!ht.grad().defined());
  // The sum is over the kept tokens only.
  CHECK(out.loss_sum.item<double>() == Approx((out.divergence * mask).sum().item<double>()).epsilon(1e-6));
}

TEST_CASE("distill divergence: without gradients nothing is kept, and bad input is refused", "[losses][distill]") {
  const auto cs = cases().at(0);
  const auto hs = tensor_of(cs.at("student_hidden")), ws = tensor_of(cs.at("student_weight"));
  const auto ht = tensor_of(cs.at("teacher_hidden")), wt = tensor_of(cs.at("teacher_weight"));
  const auto w = torch::ones({hs.size(0)});
  {
    torch::NoGradGuard no_grad;
    const auto out = losses::token_divergence(hs, ws.requires_grad_(true), ht, wt, w);
    CHECK(!out.loss_sum.requires_grad());
    ws.requires_grad_(false);
  }
  losses::DivergenceOptions bad;
  bad.beta = 1.5;
  CHECK_THROWS_AS(losses::token_divergence(hs, ws, ht, wt, w, bad), InputError);
  // A teacher with another vocabulary is refused with both sizes.
  CHECK_THROWS_WITH(losses::token_divergence(hs, ws, ht, wt.slice(0, 0, 30), w),
                    Catch::Matchers::Contains("37") && Catch::Matchers::Contains("30"));
}

TEST_CASE("distill divergence: bf16 autocast stays within bf16 tolerance of float32", "[losses][distill]") {
  const auto cs = cases().at(2);
  auto run = [&](bool bf16) {
    auto hs = tensor_of(cs.at("student_hidden")).requires_grad_(true);
    auto ws = tensor_of(cs.at("student_weight")).requires_grad_(true);
    at::autocast::set_autocast_enabled(at::kCPU, bf16);
    at::autocast::set_autocast_dtype(at::kCPU, at::kBFloat16);
    auto out = losses::token_divergence(hs, ws, tensor_of(cs.at("teacher_hidden")), tensor_of(cs.at("teacher_weight")),
                                        torch::ones({hs.size(0)}));
    at::autocast::set_autocast_enabled(at::kCPU, false);
    out.loss_sum.backward();
    CHECK(ws.grad().scalar_type() == torch::kFloat32);
    return std::make_pair(out.loss_sum.item<double>(), ws.grad());
  };
  const auto [f32, g32] = run(false);
  const auto [b16, g16] = run(true);
  CHECK(b16 == Approx(f32).epsilon(0.03));
  CHECK((g16 - g32).abs().max().item<double>() <= 0.05 * g32.abs().max().item<double>() + 1e-3);
}
