// Both log-prob paths against a log-softmax written out in the test itself
// (values, gradients with respect to hidden states and head weight, entropy,
// accuracy), and the chunked path against the plain one.
#include "catch_torch.hpp"

#include <ATen/autocast_mode.h>

#include "core/error.hpp"
#include "losses/logprobs.hpp"

using namespace trlx;
using losses::LogProbOptions;
using losses::token_logprobs;

namespace {

// Hidden states, head weight, targets and a mask with masked-out positions
// (prompt at the start, padding at the end of the second row). Masked targets
// are -100, as collators write them.
struct Inputs {
  torch::Tensor hidden, weight, targets, mask, upstream;
};

Inputs make_inputs(int64_t b, int64_t t, int64_t h, int64_t v, torch::Dtype dtype = torch::kFloat32,
                   uint64_t seed = 0) {
  torch::manual_seed(seed);
  Inputs in;
  in.hidden = torch::randn({b, t, h}).to(dtype);
  in.weight = (torch::randn({v, h}) * 0.5).to(dtype);
  in.mask = torch::ones({b, t}, torch::kInt64);
  in.mask.slice(1, 0, 2).zero_();
  if (b > 1) in.mask[1].slice(0, t - 3).zero_();
  in.targets = torch::randint(0, v, {b, t}, torch::kInt64).masked_fill(in.mask == 0, -100);
  // A loss that weights tokens differently, so a gradient summed over the
  // wrong tokens or scaled wrongly shows.
  in.upstream = torch::rand({b, t}) + 0.5;
  return in;
}

struct Run {
  losses::TokenLogProbs out;
  torch::Tensor grad_hidden, grad_weight;
};

Run run(const Inputs& in, const LogProbOptions& o, bool hidden_grad = true, bool weight_grad = true) {
  auto h = in.hidden.detach().clone().requires_grad_(hidden_grad);
  auto w = in.weight.detach().clone().requires_grad_(weight_grad);
  Run r;
  r.out = token_logprobs(h, w, in.targets, in.mask, o);
  if (hidden_grad || weight_grad) (r.out.logps * in.upstream).sum().backward();
  r.grad_hidden = h.grad();
  r.grad_weight = w.grad();
  return r;
}

// Targets at positions [lo, hi) of every row become the argmax of the
// logits there, so accuracy has true cases to find.
void targets_at_argmax(Inputs& in, int64_t lo, int64_t hi) {
  auto logits = torch::einsum("bth,vh->btv", {in.hidden, in.weight});
  in.targets.slice(1, lo, hi).copy_(logits.argmax(-1).slice(1, lo, hi));
}

LogProbOptions with_metrics() {
  LogProbOptions o;
  o.entropy = true;
  o.accuracy = true;
  return o;
}

double max_diff(const torch::Tensor& a, const torch::Tensor& b) {
  REQUIRE(a.defined());
  REQUIRE(b.defined());
  REQUIRE(a.sizes() == b.sizes());
  return (a.to(torch::kFloat64) - b.to(torch::kFloat64)).abs().max().item<double>();
}

LogProbOptions chunked(LogProbOptions o, int64_t chunk) {
  o.chunk_size = chunk;
  return o;
}

void require_same(const Run& plain, const Run& chunk, double tol) {
  CHECK(chunk.out.logps.scalar_type() == torch::kFloat32);
  CHECK(max_diff(plain.out.logps, chunk.out.logps) <= tol);
  if (plain.grad_hidden.defined() || chunk.grad_hidden.defined()) {
    CHECK(chunk.grad_hidden.scalar_type() == plain.grad_hidden.scalar_type());
    CHECK(max_diff(plain.grad_hidden, chunk.grad_hidden) <= tol);
  }
  if (plain.grad_weight.defined() || chunk.grad_weight.defined()) {
    CHECK(chunk.grad_weight.scalar_type() == plain.grad_weight.scalar_type());
    CHECK(max_diff(plain.grad_weight, chunk.grad_weight) <= tol);
  }
  if (plain.out.entropy.defined()) CHECK(max_diff(plain.out.entropy, chunk.out.entropy) <= tol);
  if (plain.out.correct.defined()) CHECK(torch::equal(plain.out.correct, chunk.out.correct));
}

}  // namespace

TEST_CASE("chunked log-probs equal a log-softmax written out in the test", "[losses][logprobs]") {
  auto in = make_inputs(2, 7, 8, 23);
  auto r = run(in, chunked({}, 4));

  auto h = in.hidden.to(torch::kFloat64).requires_grad_(true);
  auto w = in.weight.to(torch::kFloat64).requires_grad_(true);
  auto logp = torch::log_softmax(torch::einsum("bth,vh->btv", {h, w}), -1);
  auto m = in.mask.to(torch::kBool);
  auto want = logp.gather(-1, in.targets.clamp_min(0).unsqueeze(-1)).squeeze(-1) * m;
  (want * in.upstream).sum().backward();

  CHECK(max_diff(r.out.logps, want.detach()) <= 1e-5);
  CHECK(max_diff(r.grad_hidden, h.grad()) <= 1e-5);
  CHECK(max_diff(r.grad_weight, w.grad()) <= 1e-5);
  // Masked positions are exactly 0 and get no gradient.
  CHECK(r.out.logps.masked_select(~m).abs().max().item<float>() == 0.0f);
  CHECK(r.grad_hidden.slice(1, 0, 2).abs().max().item<float>() == 0.0f);
  // Log-probs are real log-probabilities, not something merely equal to the plain path.
  CHECK(r.out.logps.masked_select(m).max().item<float>() < 0.0f);
}

// The same quantities through autograd in fp64, as the test writes them:
// soft cap, then temperature, then log-softmax.
Run written_out(const Inputs& in, const LogProbOptions& o) {
  auto h = in.hidden.to(torch::kFloat64).requires_grad_(true);
  auto w = in.weight.to(torch::kFloat64).requires_grad_(true);
  auto logits = torch::einsum("bth,vh->btv", {h, w});
  if (o.logit_softcap > 0) logits = torch::tanh(logits / o.logit_softcap) * o.logit_softcap;
  auto logp = torch::log_softmax(logits / o.temperature, -1);
  auto m = in.mask.to(torch::kBool);
  Run r;
  r.out.logps = logp.gather(-1, in.targets.clamp_min(0).unsqueeze(-1)).squeeze(-1) * m;
  r.out.entropy = (-(logp.exp() * logp).sum(-1) * m).detach();
  r.out.correct = logp.argmax(-1).eq(in.targets).logical_and(m);
  (r.out.logps * in.upstream).sum().backward();
  // In the inputs' dtype, as the paths under test return them.
  r.out.logps = r.out.logps.detach().to(torch::kFloat32);
  r.out.entropy = r.out.entropy.to(torch::kFloat32);
  r.grad_hidden = h.grad().to(in.hidden.scalar_type());
  r.grad_weight = w.grad().to(in.weight.scalar_type());
  return r;
}

TEST_CASE("plain log-probs equal a log-softmax written out in the test", "[losses][logprobs]") {
  auto in = make_inputs(2, 9, 8, 23);
  // Some targets are the argmax, so accuracy is not trivially all false.
  targets_at_argmax(in, 2, 5);
  LogProbOptions o = with_metrics();
  o.temperature = GENERATE(1.0, 0.7);
  o.logit_softcap = GENERATE(0.0, 2.5);
  CAPTURE(o.temperature, o.logit_softcap);
  auto want = written_out(in, o);
  auto plain = run(in, o);
  require_same(want, plain, 1e-5);
  CHECK(plain.out.correct.sum().item<int64_t>() >= 3);
  CHECK_FALSE(plain.out.entropy.requires_grad());
  // The chunked path too, against the same written-out values.
  require_same(want, run(in, chunked(o, 5)), 1e-5);
}

TEST_CASE("plain log-probs with a frozen head, frozen hidden states, or no gradient", "[losses][logprobs]") {
  auto in = make_inputs(2, 7, 8, 19);
  LogProbOptions o;
  auto want = written_out(in, o);
  auto frozen_head = run(in, o, true, false);
  CHECK_FALSE(frozen_head.grad_weight.defined());
  CHECK(max_diff(frozen_head.grad_hidden, want.grad_hidden) <= 1e-5);
  auto frozen_hidden = run(in, o, false, true);
  CHECK_FALSE(frozen_hidden.grad_hidden.defined());
  CHECK(max_diff(frozen_hidden.grad_weight, want.grad_weight) <= 1e-5);
  torch::NoGradGuard no_grad;
  auto h = in.hidden.clone().requires_grad_(true);
  auto out = token_logprobs(h, in.weight, in.targets, in.mask, o);
  CHECK_FALSE(out.logps.requires_grad());
  CHECK(max_diff(out.logps, want.out.logps) <= 1e-5);
}

TEST_CASE("plain log-probs refuse a second backward through a retained graph", "[losses][logprobs]") {
  // The plain path turns its saved logits into their gradient in place; a
  // second backward would read that gradient as logits and be silently wrong.
  auto in = make_inputs(1, 6, 8, 13);
  auto h = in.hidden.clone().requires_grad_(true);
  auto out = token_logprobs(h, in.weight, in.targets, in.mask);
  auto loss = out.logps.sum();
  loss.backward({}, /*retain_graph=*/true);
  auto first = h.grad().clone();
  CHECK_THROWS_WITH(loss.backward(), Catch::Matchers::Contains("second backward"));
  CHECK(torch::equal(h.grad(), first));
}

TEST_CASE("chunked log-probs equal the plain path", "[losses][logprobs]") {
  auto in = make_inputs(2, 11, 16, 57);  // 22 tokens, 17 of them counted
  LogProbOptions o;
  o.entropy = true;
  o.accuracy = true;
  o.temperature = GENERATE(1.0, 0.7, 1.9);
  const int64_t chunk = GENERATE(1, 5, 7, 17, 64);  // 5 and 7 leave a short last chunk; 64 > tokens
  CAPTURE(o.temperature, chunk);
  auto plain = run(in, o);
  auto chunk_run = run(in, chunked(o, chunk));
  require_same(plain, chunk_run, 1e-5);
  REQUIRE(chunk_run.out.entropy.defined());
  REQUIRE(chunk_run.out.correct.dtype() == torch::kBool);
  CHECK_FALSE(chunk_run.out.entropy.requires_grad());
}

TEST_CASE("chunked entropy and accuracy against the test's own formulas", "[losses][logprobs]") {
  auto in = make_inputs(1, 9, 8, 13);
  // Make a few targets the argmax so that accuracy is not trivially false.
  auto logits = torch::einsum("bth,vh->btv", {in.hidden, in.weight});
  in.targets.slice(1, 2, 5).copy_(logits.argmax(-1).slice(1, 2, 5));
  LogProbOptions o;
  o.entropy = true;
  o.accuracy = true;
  o.temperature = 0.5;
  o.chunk_size = 4;
  auto out = token_logprobs(in.hidden, in.weight, in.targets, in.mask, o);
  auto logp = torch::log_softmax(logits.to(torch::kFloat64) / 0.5, -1);
  auto m = in.mask.to(torch::kBool);
  auto entropy = -(logp.exp() * logp).sum(-1) * m;
  auto correct = (logits.argmax(-1) == in.targets).logical_and(m);
  CHECK(max_diff(out.entropy, entropy) <= 1e-5);
  CHECK(torch::equal(out.correct, correct));
  CHECK(out.correct.sum().item<int64_t>() >= 3);
}

TEST_CASE("chunked log-probs with a frozen head or frozen hidden states", "[losses][logprobs]") {
  auto in = make_inputs(2, 6, 8, 19);
  LogProbOptions o;
  o.temperature = 0.8;
  SECTION("frozen head weight (LoRA)") {
    auto plain = run(in, o, true, false);
    auto chunk = run(in, chunked(o, 4), true, false);
    CHECK_FALSE(chunk.grad_weight.defined());
    require_same(plain, chunk, 1e-5);
  }
  SECTION("hidden states without gradient") {
    auto plain = run(in, o, false, true);
    auto chunk = run(in, chunked(o, 4), false, true);
    CHECK_FALSE(chunk.grad_hidden.defined());
    require_same(plain, chunk, 1e-5);
  }
  SECTION("nothing requires grad, or grad mode is off") {
    auto chunk = run(in, chunked(o, 4), false, false);
    CHECK_FALSE(chunk.out.logps.requires_grad());
    torch::NoGradGuard no_grad;
    auto h = in.hidden.clone().requires_grad_(true);
    auto out = token_logprobs(h, in.weight, in.targets, in.mask, chunked(o, 3));
    CHECK_FALSE(out.logps.requires_grad());
    CHECK(max_diff(out.logps, chunk.out.logps) <= 1e-6);
  }
}

TEST_CASE("chunked log-probs on a sliced (non-contiguous) hidden", "[losses][logprobs]") {
  auto in = make_inputs(2, 9, 8, 21);
  // How callers pass "positions that predict": hidden[:, :-1] against ids[:, 1:].
  auto h = in.hidden.clone().requires_grad_(true);
  auto h2 = in.hidden.clone().requires_grad_(true);
  auto targets = in.targets.slice(1, 1), mask = in.mask.slice(1, 1);
  auto a = token_logprobs(h.slice(1, 0, 8), in.weight, targets, mask);
  auto b = token_logprobs(h2.slice(1, 0, 8), in.weight, targets, mask, chunked({}, 3));
  a.logps.sum().backward();
  b.logps.sum().backward();
  CHECK(max_diff(a.logps, b.logps) <= 1e-5);
  CHECK(max_diff(h.grad(), h2.grad()) <= 1e-5);
}

TEST_CASE("chunked log-probs when no token counts", "[losses][logprobs]") {
  auto in = make_inputs(1, 4, 8, 11);
  in.mask.zero_();
  in.targets.fill_(-100);
  LogProbOptions o;
  o.entropy = true;
  o.accuracy = true;
  auto r = run(in, chunked(o, 2));
  CHECK(r.out.logps.abs().sum().item<float>() == 0.0f);
  CHECK(r.out.entropy.abs().sum().item<float>() == 0.0f);
  CHECK(r.out.correct.sum().item<int64_t>() == 0);
  CHECK(r.grad_hidden.abs().sum().item<float>() == 0.0f);
  CHECK(r.grad_weight.abs().sum().item<float>() == 0.0f);
}

TEST_CASE("chunked log-probs on bf16 inputs", "[losses][logprobs]") {
  auto in = make_inputs(2, 10, 32, 45, torch::kBFloat16);
  LogProbOptions o;
  o.entropy = true;
  o.temperature = 0.9;
  auto plain = run(in, o);
  auto chunk = run(in, chunked(o, 6));
  CHECK(chunk.out.logps.scalar_type() == torch::kFloat32);
  CHECK(chunk.grad_hidden.scalar_type() == torch::kBFloat16);
  CHECK(chunk.grad_weight.scalar_type() == torch::kBFloat16);
  // Both round the logits to bf16 before the fp32 softmax, so values agree
  // closely; gradients differ by bf16 rounding of the matmul outputs.
  CHECK(max_diff(plain.out.logps, chunk.out.logps) <= 1e-3);
  CHECK(max_diff(plain.out.entropy, chunk.out.entropy) <= 1e-3);
  CHECK(max_diff(plain.grad_hidden, chunk.grad_hidden) <= 2e-2);
  CHECK(max_diff(plain.grad_weight, chunk.grad_weight) <= 5e-2);
}

TEST_CASE("chunked log-probs under bf16 autocast with an fp32 head", "[losses][logprobs]") {
  // As the engine calls it with bf16 mixed precision: bf16 hidden states,
  // fp32 master weight, autocast on.
  auto in = make_inputs(2, 10, 32, 45);
  in.hidden = in.hidden.to(torch::kBFloat16);
  auto with_autocast = [&](const LogProbOptions& o) {
    at::autocast::set_autocast_enabled(at::kCPU, true);
    at::autocast::set_autocast_dtype(at::kCPU, at::kBFloat16);
    auto h = in.hidden.clone().requires_grad_(true);
    auto w = in.weight.clone().requires_grad_(true);
    auto out = token_logprobs(h, w, in.targets, in.mask, o);
    at::autocast::set_autocast_enabled(at::kCPU, false);
    at::autocast::clear_cache();
    (out.logps * in.upstream).sum().backward();
    return Run{out, h.grad(), w.grad()};
  };
  auto plain = with_autocast({});
  auto chunk = with_autocast(chunked({}, 7));
  CHECK(chunk.out.logps.scalar_type() == torch::kFloat32);
  CHECK(chunk.grad_hidden.scalar_type() == torch::kBFloat16);
  CHECK(chunk.grad_weight.scalar_type() == torch::kFloat32);
  CHECK(max_diff(plain.out.logps, chunk.out.logps) <= 1e-3);
  CHECK(max_diff(plain.grad_hidden, chunk.grad_hidden) <= 2e-2);
  CHECK(max_diff(plain.grad_weight, chunk.grad_weight) <= 5e-2);
}

TEST_CASE("log-prob options that make no sense are input errors", "[losses][logprobs]") {
  auto in = make_inputs(1, 4, 8, 11);
  LogProbOptions o;
  o.chunk_size = -1;
  CHECK_THROWS_AS(token_logprobs(in.hidden, in.weight, in.targets, in.mask, o), InputError);
  o.chunk_size = 2;
  o.temperature = 0.0;
  CHECK_THROWS_AS(token_logprobs(in.hidden, in.weight, in.targets, in.mask, o), InputError);
}

TEST_CASE("chunked log-probs over vocabulary tiles equal the plain path", "[losses][logprobs]") {
  auto in = make_inputs(2, 11, 16, 57);
  // Make some targets the argmax (accuracy), one of them in a later tile.
  targets_at_argmax(in, 2, 6);
  LogProbOptions o = with_metrics();
  o.temperature = GENERATE(1.0, 0.7);
  const int64_t tile = GENERATE(1, 5, 16, 56, 57, 100);  // 57 is the vocabulary
  CAPTURE(o.temperature, tile);
  auto plain = run(in, o);
  auto c = chunked(o, 7);
  c.vocab_tile = tile;
  auto chunk_run = run(in, c);
  require_same(plain, chunk_run, 1e-5);
  CHECK(chunk_run.out.correct.sum().item<int64_t>() >= 3);
}
