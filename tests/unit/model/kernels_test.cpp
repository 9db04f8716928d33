// trlx's CPU dropout: the drop rate, the scale, a backward through the
// same mask, masks that follow the generator's state, and the AVX-512 loop
// (where the CPU has it) giving the portable loop's results.
#include "model/kernels.hpp"

#include "catch_torch.hpp"

using namespace trlx;

TEST_CASE("the CPU dropout drops at rate p, scales the rest by 1/(1-p) and backpropagates through its mask",
          "[model][dropout]") {
  for (auto dtype : {torch::kFloat32, torch::kFloat64, torch::kBFloat16, torch::kHalf}) {
    for (double p : {0.05, 0.5}) {
      INFO(c10::toString(dtype) << " p " << p);
      torch::manual_seed(1);
      // An odd count: the last element takes half a draw.
      const auto x = (torch::rand({1001, 997}) + 1).to(dtype).requires_grad_(true);
      const auto y = model::dropout(x, p, true);
      const auto kept = y.ne(0);
      const double rate = 1.0 - kept.to(torch::kFloat64).mean().item<double>();
      // ~1e6 draws: the standard error of the rate is under 5e-4.
      CHECK(std::abs(rate - p) < 3e-3);
      // Multiplied by 1/(1-p) in float (double for double), rounded once:
      // what dropping out the float copy and rounding back gives.
      const auto wide = dtype == torch::kFloat64 ? torch::kFloat64 : torch::kFloat32;
      const auto scale = torch::scalar_tensor(1.0 / (1.0 - p), wide);
      const auto scaled = (x.detach().to(wide) * scale).to(dtype);
      CHECK(torch::equal(y.masked_select(kept), scaled.masked_select(kept)));
      // No stripes: both halves of each draw and every region drop at p.
      const auto k = kept.to(torch::kFloat64).reshape({-1});
      const auto even = k.narrow(0, 0, k.numel() - 1).view({-1, 2});
      CHECK(std::abs(1.0 - even.select(1, 0).mean().item<double>() - p) < 4e-3);
      CHECK(std::abs(1.0 - even.select(1, 1).mean().item<double>() - p) < 4e-3);
      // The halves are independent: both dropped at p^2.
      const double both = (1 - even.select(1, 0)).mul(1 - even.select(1, 1)).mean().item<double>();
      CHECK(std::abs(both - p * p) < 3e-3);
      const auto g = torch::randn(x.sizes()).to(dtype);
      y.backward(g);
      const auto expected = torch::where(kept, (g.to(wide) * scale).to(dtype), torch::zeros_like(g));
      CHECK(torch::equal(x.grad(), expected));
    }
  }
}

TEST_CASE("the CPU dropout's vector and portable loops draw the same masks", "[model][dropout]") {
  for (auto dtype : {torch::kFloat32, torch::kBFloat16, torch::kHalf}) {
    INFO(c10::toString(dtype));
    // Sizes around the 16-element vector step and the parallel chunks.
    for (int64_t n : {1, 15, 17, 33, 40001, 70003}) {
      const auto x = torch::randn({n}).to(dtype);
      torch::manual_seed(9);
      const auto vec = model::dropout(x, 0.1, true);
      model::kernels_scalar_only(true);
      torch::manual_seed(9);
      const auto portable = model::dropout(x, 0.1, true);
      model::kernels_scalar_only(false);
      CHECK(torch::equal(vec, portable));
    }
  }
}

TEST_CASE("dropping out a 16-bit tensor gives the rounding of dropping out its float32 copy", "[model][dropout]") {
  // What lets a LoRA layer under autocast skip the round trip through its
  // float32 adapters' dtype, forward and backward.
  for (auto dtype : {torch::kBFloat16, torch::kHalf}) {
    INFO(c10::toString(dtype));
    const auto x = torch::randn({333, 77}).to(dtype).requires_grad_(true);
    const auto x32 = x.detach().to(torch::kFloat32).requires_grad_(true);
    const auto g = torch::randn({333, 77}).to(dtype);
    torch::manual_seed(4);
    const auto y = model::dropout(x, 0.05, true);
    torch::manual_seed(4);
    const auto y32 = model::dropout(x32, 0.05, true);
    CHECK(torch::equal(y, y32.to(dtype)));
    y.backward(g);
    y32.backward(g.to(torch::kFloat32));
    CHECK(torch::equal(x.grad(), x32.grad().to(dtype)));
  }
}

TEST_CASE("the CPU dropout's mask follows the generator: the same state replays it, the next draw differs",
          "[model][dropout]") {
  const auto x = torch::ones({64, 64});
  torch::manual_seed(7);
  const auto a = model::dropout(x, 0.3, true), b = model::dropout(x, 0.3, true);
  torch::manual_seed(7);
  const auto c = model::dropout(x, 0.3, true);
  CHECK(torch::equal(a, c));
  CHECK_FALSE(torch::equal(a, b));
  // Off in evaluation and at p = 0: the input itself.
  CHECK(torch::equal(model::dropout(x, 0.3, false), x));
  CHECK(torch::equal(model::dropout(x, 0.0, true), x));
}

TEST_CASE("the nearest-code kernel buckets as bucketize does, ties to the lower code, in both loops",
          "[model][qlora]") {
  // 15 bounds (4-bit codes, the vector loop) and 255 (8-bit maps), values
  // drawn around them and exactly on them, zeros of both signs.
  torch::manual_seed(2);
  for (int64_t codes : {16, 256}) {
    INFO(codes << " codes");
    // Sorted code values, one of them 0.
    const auto sorted = std::get<0>(torch::sort(torch::cat({torch::rand({codes - 1}) * 2 - 1, torch::zeros({1})})));
    auto bounds = (sorted.narrow(0, 0, codes - 1) + sorted.narrow(0, 1, codes - 1)) / 2;
    const auto order = torch::randperm(codes).to(torch::kUInt8);
    const auto values =
        torch::cat({torch::rand({10007}) * 2.2 - 1.1, bounds, torch::tensor({0.0f, -0.0f, 1.0f, -1.0f})}).contiguous();
    const auto want =
        order.to(torch::kInt64).index_select(0, torch::bucketize(values, bounds, false)).to(torch::kUInt8);
    for (bool portable : {false, true}) {
      INFO("portable " << portable);
      model::kernels_scalar_only(portable);
      auto got = torch::empty({values.numel()}, torch::kUInt8);
      model::nearest_code_cpu(values.data_ptr<float>(), values.numel(), bounds.data_ptr<float>(), bounds.numel(),
                              order.data_ptr<uint8_t>(), got.data_ptr<uint8_t>());
      model::kernels_scalar_only(false);
      CHECK(torch::equal(got, want));
    }
  }
}
