// The distillation divergence, chunk by chunk, with its gradient formed in the forward pass.
#include "losses/distill.hpp"

#include <torch/torch.h>

#include <ATen/autocast_mode.h>
#include <cmath>
#include <fmt/ranges.h>
#include <torch/csrc/autograd/custom_function.h>

#include "core/error.hpp"
#include "losses/kernel_support.hpp"

namespace trlx::losses {

namespace {

using detail::AutocastOff;
using detail::shape;

// Row-wise dot products of two [n, V] tiles, without a third tile. In full
// float32 even where tf32 lets cuBLAS round float32 products to 10-bit
// mantissas: the divergence is a difference of such sums, which that
// rounding would swamp (the reference sums products element by element).
torch::Tensor rowdot(const torch::Tensor& a, const torch::Tensor& b) {
  struct FullFloat32 {
    bool was = false;
    explicit FullFloat32(bool cuda) : was(cuda && at::globalContext().allowTF32CuBLAS()) {
      if (was) at::globalContext().setAllowTF32CuBLAS(false);
    }
    ~FullFloat32() {
      if (was) at::globalContext().setAllowTF32CuBLAS(true);
    }
  } full(a.is_cuda());
  return torch::bmm(a.unsqueeze(1), b.unsqueeze(2)).view({a.size(0)});
}

// Logits of rows against `weight` into `out` ([n, V] fp32; the matmul in the
// inputs' dtype, as a matmul there rounds them), soft-capped, then divided
// by the temperature; in place, with no tile but `out`. With a cap,
// `cap_factor` ([n, V]) receives d capped / d raw, 1 - tanh^2, for the
// gradient.
void project(torch::Tensor& out, const torch::Tensor& rows, const torch::Tensor& weight, double temperature,
             double softcap, torch::Tensor* cap_factor) {
  if (rows.scalar_type() == torch::kFloat32)
    torch::mm_out(out, rows, weight.t());
  else
    out.copy_(torch::mm(rows, weight.t()));
  if (softcap > 0) {
    out.div_(softcap).tanh_();
    if (cap_factor) cap_factor->copy_(out).square_().neg_().add_(1);
    out.mul_(softcap);
  }
  if (temperature != 1.0) out.div_(temperature);
}

// Turns logits `z` into log-probabilities in place, and `p` into the
// probabilities, using `p` as the only scratch.
void log_softmax_and_probs(torch::Tensor& z, torch::Tensor& p) {
  const auto m = std::get<0>(z.max(1, /*keepdim=*/true));
  p.copy_(z).sub_(m).exp_();
  const auto sum = p.sum(1, /*keepdim=*/true);
  z.sub_(m + sum.log());
  p.div_(sum);
}

// inputs: student hidden [N, Hs] and weight [V, Hs] (compute dtype), teacher
// hidden [N, Ht] and weight [V, Ht], rows [n] int64 (the tokens counted),
// row_weights [n] fp32.
// outputs: loss_sum (scalar fp32), divergence [N] and entropy [N] (fp32, no
// gradient). The gradients of loss_sum are formed here and kept for
// backward when `need_hidden` / `need_weight`.
struct ChunkedDivergence : public torch::autograd::Function<ChunkedDivergence> {
  static torch::autograd::variable_list forward(torch::autograd::AutogradContext* ctx, const torch::Tensor& hs,
                                                const torch::Tensor& ws, const torch::Tensor& ht,
                                                const torch::Tensor& wt, const torch::Tensor& rows,
                                                const torch::Tensor& row_weights, double beta, double temperature,
                                                double s_cap, double t_cap, int64_t chunk, bool need_hidden,
                                                bool need_weight) {
    AutocastOff no_autocast(hs.device().type());
    torch::NoGradGuard no_grad;
    const int64_t n_tokens = hs.size(0), n_rows = rows.size(0);
    const auto f32 = hs.options().dtype(torch::kFloat32);
    auto divergence = torch::zeros({n_tokens}, f32), entropy = torch::zeros({n_tokens}, f32);
    auto loss_sum = torch::zeros({}, f32);
    torch::Tensor grad_hidden, grad_weight;
    if (need_hidden) grad_hidden = torch::zeros_like(hs);
    if (need_weight) grad_weight = torch::zeros(ws.sizes(), ws.options().dtype(torch::kFloat32));
    const bool grads = need_hidden || need_weight;
    const double log_keep = beta > 0 && beta < 1 ? std::log1p(-beta) : 0, log_beta = beta > 0 ? std::log(beta) : 0;
    // The chunk's tiles, made once and reused: the student's logits then
    // log-probs (ls), the teacher's (lt), both distributions (ps, pt), the
    // mixture's log for the JSD, and 1 - tanh^2 under a student soft cap.
    const int64_t vocab = ws.size(0), rows_max = std::min(n_rows, chunk);
    const bool jsd = beta > 0 && beta < 1;
    auto tile = [&] { return torch::empty({rows_max, vocab}, f32); };
    torch::Tensor ls_buf = tile(), lt_buf = tile(), ps_buf = tile(), pt_buf = tile(), mix_buf, cap_buf;
    if (jsd) mix_buf = tile();
    if (grads && s_cap > 0) cap_buf = tile();
    for (int64_t s = 0; s < n_rows; s += chunk) {
      const int64_t e = std::min(n_rows, s + chunk), n = e - s;
      const auto rows_c = rows.slice(0, s, e);
      const auto h_c = hs.index_select(0, rows_c);
      auto ls = ls_buf.narrow(0, 0, n), lt = lt_buf.narrow(0, 0, n), ps = ps_buf.narrow(0, 0, n),
           pt = pt_buf.narrow(0, 0, n);
      torch::Tensor cap_factor = cap_buf.defined() ? cap_buf.narrow(0, 0, n) : torch::Tensor();
      project(ls, h_c, ws, temperature, s_cap, cap_factor.defined() ? &cap_factor : nullptr);
      log_softmax_and_probs(ls, ps);
      project(lt, ht.index_select(0, rows_c), wt, temperature, t_cap, nullptr);
      log_softmax_and_probs(lt, pt);
      const auto ent = -rowdot(ps, ls);
      torch::Tensor div, d;  // d: d divergence / d (student logits / T), per token
      if (beta == 0.0) {
        // KL(p_t || p_s); gradient p_s - p_t.
        div = rowdot(pt, lt.sub_(ls));
        if (grads) d = ps.sub_(pt);
      } else if (beta == 1.0) {
        // KL(p_s || p_t); gradient p_s (log p_s - log p_t - KL).
        auto gap = lt.neg_().add_(ls);
        div = rowdot(ps, gap);
        if (grads) d = gap.sub_(div.unsqueeze(1)).mul_(ps);
      } else {
        // log m = logaddexp(log p_s + log(1 - beta), log p_t + log beta).
        auto log_m = mix_buf.narrow(0, 0, n);
        // (as log beta + logaddexp(log p_s + log(1 - beta) - log beta, log p_t), in place)
        log_m.copy_(ls).add_(log_keep - log_beta);
        torch::logaddexp_out(log_m, log_m, lt);
        log_m.add_(log_beta);
        const auto kl_t = rowdot(pt, lt.sub_(log_m));
        auto gap = log_m.neg_().add_(ls);  // log p_s - log m
        const auto kl_s = rowdot(ps, gap);
        div = beta * kl_t + (1 - beta) * kl_s;
        // Gradient (1 - beta) p_s (log p_s - log m - KL(p_s || m)).
        if (grads) d = gap.sub_(kl_s.unsqueeze(1)).mul_(ps).mul_(1 - beta);
      }
      divergence.index_copy_(0, rows_c, div);
      entropy.index_copy_(0, rows_c, ent);
      const auto w_c = row_weights.slice(0, s, e);
      loss_sum.add_((div * w_c).sum());
      if (!grads) continue;
      // Through the row weights, the temperature and the soft cap to the
      // raw student logits, then into the hidden states and the weight.
      d.mul_((w_c / temperature).unsqueeze(1));
      if (cap_factor.defined()) d.mul_(cap_factor);
      const auto d_c = d.to(hs.scalar_type());
      if (need_hidden) grad_hidden.index_copy_(0, rows_c, torch::mm(d_c, ws));
      if (need_weight) {
        if (hs.scalar_type() == torch::kFloat32)
          grad_weight.addmm_(d_c.t(), h_c);
        else
          grad_weight.add_(torch::mm(d_c.t(), h_c));
      }
    }
    if (need_hidden) ctx->saved_data["grad_hidden"] = grad_hidden;
    if (need_weight) ctx->saved_data["grad_weight"] = grad_weight.to(ws.scalar_type());
    ctx->mark_non_differentiable({divergence, entropy});
    return {loss_sum, divergence, entropy};
  }

  static torch::autograd::variable_list backward(torch::autograd::AutogradContext* ctx,
                                                 torch::autograd::variable_list grad_outputs) {
    torch::autograd::variable_list grads(13);
    const auto& g = grad_outputs[0];
    if (!g.defined()) return grads;
    // The gradient of loss_sum, scaled by the upstream one; each is used once.
    if (ctx->saved_data.count("grad_hidden")) {
      auto gh = ctx->saved_data["grad_hidden"].toTensor();
      ctx->saved_data.erase("grad_hidden");
      grads[0] = gh.mul_(g.to(gh.scalar_type()));
    }
    if (ctx->saved_data.count("grad_weight")) {
      auto gw = ctx->saved_data["grad_weight"].toTensor();
      ctx->saved_data.erase("grad_weight");
      grads[1] = gw.mul_(g.to(gw.scalar_type()));
    }
    return grads;
  }
};

}  // namespace

TokenDivergence token_divergence(const torch::Tensor& student_hidden, const torch::Tensor& student_weight,
                                 const torch::Tensor& teacher_hidden, const torch::Tensor& teacher_weight,
                                 const torch::Tensor& weights, const DivergenceOptions& o) {
  if (!(o.beta >= 0 && o.beta <= 1)) fail_input("beta must be in [0, 1] (0 forward KL, 1 reverse KL), got {}", o.beta);
  if (!(o.temperature > 0)) fail_input("temperature must be positive, got {}", o.temperature);
  if (o.chunk_tokens < 0) fail_input("divergence chunk size must be 0 (automatic) or positive, got {}", o.chunk_tokens);
  if (student_hidden.dim() < 1 || student_weight.dim() != 2 || student_hidden.size(-1) != student_weight.size(1))
    fail("divergence: student hidden {} does not match its head weight {}", shape(student_hidden.sizes()),
         shape(student_weight.sizes()));
  if (teacher_hidden.dim() < 1 || teacher_weight.dim() != 2 || teacher_hidden.size(-1) != teacher_weight.size(1))
    fail("divergence: teacher hidden {} does not match its head weight {}", shape(teacher_hidden.sizes()),
         shape(teacher_weight.sizes()));
  if (student_weight.size(0) != teacher_weight.size(0))
    fail_input("divergence: the student's vocabulary has {} tokens and the teacher's {}; they must be the same",
               student_weight.size(0), teacher_weight.size(0));
  const auto tokens = student_hidden.sizes().slice(0, student_hidden.dim() - 1);
  if (teacher_hidden.sizes().slice(0, teacher_hidden.dim() - 1) != tokens || weights.sizes() != tokens)
    fail("divergence: student hidden {} needs teacher hidden and weights over the same tokens, got {} and {}",
         shape(student_hidden.sizes()), shape(teacher_hidden.sizes()), shape(weights.sizes()));
  const auto device = student_hidden.device().type();
  auto compute_of = [&](const torch::Tensor& h, const torch::Tensor& w) {
    auto c = c10::promoteTypes(h.scalar_type(), w.scalar_type());
    if (at::autocast::is_autocast_enabled(device) && c != torch::kFloat64) c = at::autocast::get_autocast_dtype(device);
    return c;
  };
  const auto s_dtype = compute_of(student_hidden, student_weight);
  const auto t_dtype = compute_of(teacher_hidden, teacher_weight);
  auto hs = student_hidden.reshape({-1, student_hidden.size(-1)}).to(s_dtype);
  auto ws = student_weight.to(s_dtype);
  auto ht = teacher_hidden.reshape({-1, teacher_hidden.size(-1)}).detach().to(t_dtype);
  auto wt = teacher_weight.detach().to(t_dtype);
  auto flat_w = weights.reshape({-1}).to(torch::kFloat32);
  auto rows = flat_w.ne(0).nonzero().squeeze(1);
  auto row_weights = flat_w.index_select(0, rows);
  const int64_t vocab = student_weight.size(0);
  const int64_t chunk =
      o.chunk_tokens > 0 ? o.chunk_tokens : std::max<int64_t>(16, (int64_t{1} << 23) / std::max<int64_t>(1, vocab));
  const bool grad_on = torch::GradMode::is_enabled();
  const bool need_hidden = grad_on && hs.requires_grad(), need_weight = grad_on && ws.requires_grad();
  auto outs = ChunkedDivergence::apply(hs, ws, ht, wt, rows, row_weights, o.beta, o.temperature, o.student_softcap,
                                       o.teacher_softcap, chunk, need_hidden, need_weight);
  TokenDivergence out;
  out.loss_sum = outs[0];
  out.divergence = outs[1].view(tokens);
  out.entropy = outs[2].view(tokens);
  return out;
}

}  // namespace trlx::losses
