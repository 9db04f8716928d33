// The one log-prob path: per-token log-probs and entropy, chunked with an online log-sum-exp.
#include "losses/logprobs.hpp"

#include <torch/torch.h>

#include <ATen/autocast_mode.h>
#include <limits>
#include <fmt/ranges.h>
#include <torch/csrc/autograd/custom_function.h>

#include "core/error.hpp"
#include "losses/kernel_support.hpp"

namespace trlx::losses {

namespace {

using detail::AutocastOff;
using detail::shape;

// fp32 logits of some hidden rows [c, H] against weight [V, H] (soft cap and
// temperature applied), rounded to the compute dtype first exactly as a
// matmul in that dtype rounds them.
torch::Tensor chunk_logits(const torch::Tensor& hidden_rows, const torch::Tensor& weight, double temperature,
                           double softcap) {
  auto logits = torch::mm(hidden_rows, weight.t()).to(torch::kFloat32);
  if (softcap > 0) logits.div_(softcap).tanh_().mul_(softcap);
  if (temperature != 1.0) logits.div_(temperature);
  return logits;
}

// d log p(target) / d logits for rows of logits, formed in place in `d`
// (which holds those rows' logits on entry): (onehot(t) - softmax) times the
// upstream gradient g, through the temperature and the soft cap. `local` are
// the targets' columns within `d`; `here` says which of them fall inside it.
void logits_grad_in_place(torch::Tensor& d, const torch::Tensor& lse, const torch::Tensor& g,
                          const torch::Tensor& local, const torch::Tensor& here, double temperature, double softcap) {
  // tanh(raw / cap) is what the capped logits are made of; read it back
  // before the softmax overwrites them.
  torch::Tensor capped;
  if (softcap > 0) capped = d * (temperature / softcap);
  d.sub_(lse).exp_().mul_(-g);
  d.scatter_add_(1, local, here.defined() ? g * here : g);
  if (temperature != 1.0) d.div_(temperature);
  if (softcap > 0) d.mul_(1 - capped.square_());
}

// Log-probs of targets over token chunks and vocabulary tiles: at most
// [chunk_size x vocab_tile] logits exist at a time, in forward (an online
// log-sum-exp over the tiles, as flash attention does over keys) and again in
// backward, which recomputes them from the saved hidden states and per-token
// log-sum-exp instead of keeping [tokens x vocab] alive between the passes.
//   inputs: hidden [N, H], weight [V, H] (both in the compute dtype),
//           rows [n] int64 (the tokens whose mask is set), targets [n] int64
//   outputs: logps [N] fp32, then entropy [N] fp32 and correct [N] bool when
//            asked (both without gradient); 0 / false outside `rows`.
struct ChunkedLogProbs : public torch::autograd::Function<ChunkedLogProbs> {
  static torch::autograd::variable_list forward(torch::autograd::AutogradContext* ctx, const torch::Tensor& hidden,
                                                const torch::Tensor& weight, const torch::Tensor& rows,
                                                const torch::Tensor& targets, int64_t chunk_size, int64_t vocab_tile,
                                                double temperature, double softcap, bool want_entropy,
                                                bool want_accuracy) {
    AutocastOff no_autocast(hidden.device().type());
    const int64_t n_tokens = hidden.size(0), n_rows = rows.size(0), vocab = weight.size(0);
    auto f32 = hidden.options().dtype(torch::kFloat32);
    auto logps = torch::zeros({n_tokens}, f32);
    auto lse = torch::empty({n_rows}, f32);
    torch::Tensor entropy, correct;
    if (want_entropy) entropy = torch::zeros({n_tokens}, f32);
    if (want_accuracy) correct = torch::zeros({n_tokens}, hidden.options().dtype(torch::kBool));
    for (int64_t s = 0; s < n_rows; s += chunk_size) {
      const int64_t e = std::min(n_rows, s + chunk_size);
      auto rows_c = rows.slice(0, s, e);
      auto t_c = targets.slice(0, s, e);
      auto h_c = hidden.index_select(0, rows_c);
      // Per row, against the running maximum m: sum_exp = sum exp(z - m),
      // sum_ez = sum exp(z - m) (z - m); the target's logit; the first argmax.
      auto m = torch::full({e - s}, -std::numeric_limits<double>::infinity(), f32);
      auto sum_exp = torch::zeros({e - s}, f32), picked = torch::zeros({e - s}, f32);
      torch::Tensor sum_ez, best, best_idx;
      if (want_entropy) sum_ez = torch::zeros({e - s}, f32);
      if (want_accuracy) {
        best = torch::full({e - s}, -std::numeric_limits<double>::infinity(), f32);
        best_idx = torch::zeros({e - s}, t_c.options());
      }
      for (int64_t v0 = 0; v0 < vocab; v0 += vocab_tile) {
        const int64_t vt = std::min(vocab_tile, vocab - v0);
        auto z = chunk_logits(h_c, weight.narrow(0, v0, vt), temperature, softcap);
        auto local = t_c - v0;
        auto here = local.ge(0).logical_and(local.lt(vt));
        picked = torch::where(here, z.gather(1, local.clamp(0, vt - 1).unsqueeze(1)).squeeze(1), picked);
        auto [tile_max, tile_arg] = z.max(1);
        if (want_accuracy) {
          auto better = tile_max.gt(best);  // strictly: ties keep the earlier token, as argmax does
          best = torch::where(better, tile_max, best);
          best_idx = torch::where(better, tile_arg + v0, best_idx);
        }
        // A new maximum m' scales what was summed by r = exp(m - m'):
        // sum_exp' = r sum_exp, sum_ez' = r (sum_ez + (m - m') sum_exp).
        auto new_m = v0 == 0 ? tile_max : torch::maximum(m, tile_max);
        if (v0 > 0) {
          auto shift = m - new_m;
          auto scale = shift.exp();
          if (want_entropy) sum_ez.add_(shift.mul_(sum_exp)).mul_(scale);
          sum_exp.mul_(scale);
        }
        z.sub_(new_m.unsqueeze(1));
        auto ez = z.exp();
        sum_exp.add_(ez.sum(1));
        if (want_entropy) sum_ez.add_(ez.mul_(z).sum(1));
        m = new_m;
      }
      auto log_sum = sum_exp.log();
      auto lse_c = lse.slice(0, s, e);
      lse_c.copy_(m + log_sum);
      logps.index_copy_(0, rows_c, picked - lse_c);
      // H = -sum p log p with p = exp(z - m) / sum_exp: log sum_exp - sum_ez / sum_exp.
      if (want_entropy) entropy.index_copy_(0, rows_c, log_sum - sum_ez / sum_exp);
      if (want_accuracy) correct.index_copy_(0, rows_c, best_idx == t_c);
    }
    ctx->save_for_backward({hidden, weight, rows, targets, lse});
    ctx->saved_data["chunk_size"] = chunk_size;
    ctx->saved_data["vocab_tile"] = vocab_tile;
    ctx->saved_data["temperature"] = temperature;
    ctx->saved_data["softcap"] = softcap;
    torch::autograd::variable_list out{logps};
    if (want_entropy) out.push_back(entropy);
    if (want_accuracy) out.push_back(correct);
    if (out.size() > 1) ctx->mark_non_differentiable(torch::autograd::variable_list(out.begin() + 1, out.end()));
    return out;
  }

  static torch::autograd::variable_list backward(torch::autograd::AutogradContext* ctx,
                                                 torch::autograd::variable_list grad_outputs) {
    const auto saved = ctx->get_saved_variables();
    const auto &hidden = saved[0], &weight = saved[1], &rows = saved[2], &targets = saved[3], &lse = saved[4];
    const int64_t chunk_size = ctx->saved_data["chunk_size"].toInt();
    const int64_t vocab_tile = ctx->saved_data["vocab_tile"].toInt();
    const double temperature = ctx->saved_data["temperature"].toDouble();
    const double softcap = ctx->saved_data["softcap"].toDouble();
    const bool need_hidden = ctx->needs_input_grad(0), need_weight = ctx->needs_input_grad(1);
    torch::autograd::variable_list grads(11);
    const auto& grad_logps = grad_outputs[0];
    if (!grad_logps.defined() || !(need_hidden || need_weight)) return grads;
    AutocastOff no_autocast(hidden.device().type());
    const auto compute = hidden.scalar_type();
    const int64_t vocab = weight.size(0);
    torch::Tensor grad_hidden, grad_weight;
    if (need_hidden) grad_hidden = torch::zeros_like(hidden);
    // Reduced-precision weights accumulate their gradient over chunks in
    // fp32 and round to their dtype once at the end; so do the hidden
    // states' over vocabulary tiles. (Each tile's product comes out of its
    // matmul rounded to the compute dtype before it is added: one full-size
    // matmul would round only its sum.)
    if (need_weight) grad_weight = torch::zeros(weight.sizes(), weight.options().dtype(torch::kFloat32));
    const int64_t n_rows = rows.size(0);
    for (int64_t s = 0; s < n_rows; s += chunk_size) {
      const int64_t e = std::min(n_rows, s + chunk_size);
      auto rows_c = rows.slice(0, s, e);
      auto t_c = targets.slice(0, s, e);
      auto g = grad_logps.index_select(0, rows_c).to(torch::kFloat32).unsqueeze(1);
      auto h_c = hidden.index_select(0, rows_c);
      auto lse_c = lse.slice(0, s, e).unsqueeze(1);
      torch::Tensor gh;
      if (need_hidden) gh = torch::zeros({e - s, hidden.size(1)}, hidden.options().dtype(torch::kFloat32));
      for (int64_t v0 = 0; v0 < vocab; v0 += vocab_tile) {
        const int64_t vt = std::min(vocab_tile, vocab - v0);
        auto w_t = weight.narrow(0, v0, vt);
        auto local = (t_c - v0).unsqueeze(1);
        auto here = local.ge(0).logical_and(local.lt(vt));
        auto d = chunk_logits(h_c, w_t, temperature, softcap);
        logits_grad_in_place(d, lse_c, g, local.clamp(0, vt - 1), here, temperature, softcap);
        auto d_c = d.to(compute);
        if (need_hidden) {
          if (compute == torch::kFloat32)
            gh.addmm_(d_c, w_t);
          else
            gh.add_(torch::mm(d_c, w_t));
        }
        if (need_weight) {
          auto gw = grad_weight.narrow(0, v0, vt);
          if (compute == torch::kFloat32)
            gw.addmm_(d_c.t(), h_c);
          else
            gw.add_(torch::mm(d_c.t(), h_c));
        }
      }
      if (need_hidden) grad_hidden.index_copy_(0, rows_c, gh.to(compute));
    }
    grads[0] = grad_hidden;
    if (need_weight) grads[1] = grad_weight.to(weight.scalar_type());
    return grads;
  }
};

// Rows of [rows x vocab] logits worked on at a time by the passes over
// them: about a million values (4 MiB in float32).
int64_t rows_per_block(int64_t vocab) { return std::max<int64_t>(1, (int64_t{1} << 20) / std::max<int64_t>(1, vocab)); }

// Log-probs of targets through full [rows x vocab] logits that stay alive
// until backward, which turns them into their own gradient in place: one
// [rows x vocab] buffer over forward and backward, where autograd through
// logsumexp and gather holds three or four. The fastest path when that buffer
// fits; ChunkedLogProbs never builds it.
//   inputs and outputs as ChunkedLogProbs.
struct StoredLogProbs : public torch::autograd::Function<StoredLogProbs> {
  static torch::autograd::variable_list forward(torch::autograd::AutogradContext* ctx, const torch::Tensor& hidden,
                                                const torch::Tensor& weight, const torch::Tensor& rows,
                                                const torch::Tensor& targets, double temperature, double softcap,
                                                bool want_entropy, bool want_accuracy) {
    AutocastOff no_autocast(hidden.device().type());
    const int64_t n_tokens = hidden.size(0), n_rows = rows.size(0), vocab = weight.size(0);
    auto f32 = hidden.options().dtype(torch::kFloat32);
    auto logits = chunk_logits(hidden.index_select(0, rows), weight, temperature, softcap);
    // Row block by row block: each block's log-sum-exp, entropy and argmax
    // while it is in cache, their temporaries the block's size (and reused),
    // not the logits' (a [rows x vocab] temporary per pass, which the CPU
    // also page-faults in afresh each time).
    const int64_t block = rows_per_block(vocab);
    auto lse = torch::empty({n_rows}, f32);
    torch::Tensor entropy_rows, argmax, logp, p;
    if (want_entropy) {
      entropy_rows = torch::empty({n_rows}, f32);
      logp = torch::empty({std::min(block, n_rows), vocab}, f32);
      p = torch::empty_like(logp);
    }
    if (want_accuracy) argmax = torch::empty({n_rows}, targets.options());
    for (int64_t s = 0; s < n_rows; s += block) {
      const int64_t e = std::min(n_rows, s + block);
      const auto l = logits.slice(0, s, e);
      auto lse_b = lse.slice(0, s, e);
      at::logsumexp_out(lse_b, l, {1}, false);
      if (want_entropy) {
        auto lp = logp.narrow(0, 0, e - s), pb = p.narrow(0, 0, e - s);
        auto ent_b = entropy_rows.slice(0, s, e);
        at::sub_out(lp, l, lse_b.unsqueeze(1));
        at::exp_out(pb, lp);
        pb.mul_(lp);
        at::sum_out(ent_b, pb, {1});
        ent_b.neg_();
      }
      if (want_accuracy) {
        auto am = argmax.slice(0, s, e);
        at::argmax_out(am, l, 1);
      }
    }
    auto picked = logits.gather(1, targets.unsqueeze(1)).squeeze(1);
    auto logps = torch::zeros({n_tokens}, f32).index_copy_(0, rows, picked - lse);
    torch::autograd::variable_list out{logps};
    if (want_entropy) out.push_back(torch::zeros({n_tokens}, f32).index_copy_(0, rows, entropy_rows));
    if (want_accuracy)
      out.push_back(
          torch::zeros({n_tokens}, hidden.options().dtype(torch::kBool)).index_copy_(0, rows, argmax == targets));
    if (out.size() > 1) ctx->mark_non_differentiable(torch::autograd::variable_list(out.begin() + 1, out.end()));
    // Without gradients (reference models, evaluation) there is no graph to
    // keep this: the logits go when apply() returns.
    ctx->save_for_backward({hidden, weight, rows, targets, lse, logits});
    ctx->saved_data["temperature"] = temperature;
    ctx->saved_data["softcap"] = softcap;
    ctx->saved_data["consumed"] = false;
    return out;
  }

  static torch::autograd::variable_list backward(torch::autograd::AutogradContext* ctx,
                                                 torch::autograd::variable_list grad_outputs) {
    // The logits become the gradient in place, so a second backward through
    // a retained graph would read a gradient as logits. Refuse it.
    if (ctx->saved_data["consumed"].toBool())
      fail("log-probs: a second backward through the same graph (retain_graph) is not supported by the plain "
           "log-prob path; set use_liger_kernel: true for the chunked path");
    ctx->saved_data["consumed"] = true;
    auto saved = ctx->get_saved_variables();
    const auto &hidden = saved[0], &weight = saved[1], &rows = saved[2], &targets = saved[3], &lse = saved[4];
    auto d = std::move(saved[5]);
    const bool need_hidden = ctx->needs_input_grad(0), need_weight = ctx->needs_input_grad(1);
    torch::autograd::variable_list grads(8);
    const auto& grad_logps = grad_outputs[0];
    if (!grad_logps.defined() || !(need_hidden || need_weight)) return grads;
    AutocastOff no_autocast(hidden.device().type());
    auto g = grad_logps.index_select(0, rows).to(torch::kFloat32).unsqueeze(1);
    // Block by block while each is in cache, as in forward, the copy in the
    // compute dtype written as each block is done.
    const int64_t n_rows = d.size(0);
    const bool cast = hidden.scalar_type() != d.scalar_type();
    auto d_c = cast ? torch::empty(d.sizes(), d.options().dtype(hidden.scalar_type())) : d;
    const int64_t block = rows_per_block(d.size(1));
    for (int64_t s = 0; s < n_rows; s += block) {
      const int64_t e = std::min(n_rows, s + block);
      auto db = d.slice(0, s, e);
      logits_grad_in_place(db, lse.slice(0, s, e).unsqueeze(1), g.slice(0, s, e), targets.slice(0, s, e).unsqueeze(1),
                           torch::Tensor(), ctx->saved_data["temperature"].toDouble(),
                           ctx->saved_data["softcap"].toDouble());
      if (cast) d_c.slice(0, s, e).copy_(db);
    }
    d = torch::Tensor();
    if (need_hidden)
      grads[0] = torch::zeros_like(hidden).index_copy_(0, rows, torch::mm(d_c, weight));
    if (need_weight) grads[1] = torch::mm(d_c.t(), hidden.index_select(0, rows));
    return grads;
  }
};

}  // namespace

TokenLogProbs token_logprobs(const torch::Tensor& hidden, const torch::Tensor& weight, const torch::Tensor& targets,
                             const torch::Tensor& mask, const LogProbOptions& o) {
  if (o.chunk_size < 0) fail_input("log-prob chunk size must be 0 (off) or a positive token count, got {}", o.chunk_size);
  if (o.temperature <= 0.0) fail_input("temperature must be positive, got {}", o.temperature);
  if (o.logit_softcap < 0.0) fail_input("logit soft cap must be 0 (off) or positive, got {}", o.logit_softcap);
  if (hidden.dim() < 1 || weight.dim() != 2 || hidden.size(-1) != weight.size(1))
    fail("log-probs: hidden {} does not match the head weight {}", shape(hidden.sizes()),
         shape(weight.sizes()));
  const auto token_shape = hidden.sizes().slice(0, hidden.dim() - 1);
  if (targets.sizes() != token_shape || mask.sizes() != token_shape)
    fail("log-probs: hidden {} needs targets and mask of shape {}, got {} and {}", shape(hidden.sizes()),
         shape(token_shape), shape(targets.sizes()), shape(mask.sizes()));
  // The matmul dtype is the one a matmul here would use: the autocast dtype
  // when autocast is on, otherwise the inputs' common dtype.
  // Casting here, outside the Function, lets autograd return each input's
  // gradient in that input's own dtype.
  const auto device = hidden.device().type();
  auto compute = c10::promoteTypes(hidden.scalar_type(), weight.scalar_type());
  if (at::autocast::is_autocast_enabled(device) && compute != torch::kFloat64)
    compute = at::autocast::get_autocast_dtype(device);
  const int64_t h = hidden.size(-1);
  auto flat_hidden = hidden.reshape({-1, h}).to(compute);
  auto flat_mask = mask.reshape({-1}).to(torch::kBool);
  auto rows = flat_mask.nonzero().squeeze(1);
  auto row_targets = targets.reshape({-1}).index_select(0, rows).to(torch::kInt64);
  auto head = weight.to(compute);
  auto outs = o.chunk_size > 0
                  ? ChunkedLogProbs::apply(flat_hidden, head, rows, row_targets, o.chunk_size,
                                           std::max<int64_t>(1, o.vocab_tile), o.temperature, o.logit_softcap,
                                           o.entropy, o.accuracy)
                  : StoredLogProbs::apply(flat_hidden, head, rows, row_targets, o.temperature, o.logit_softcap,
                                          o.entropy, o.accuracy);
  TokenLogProbs out;
  size_t i = 0;
  out.logps = outs[i++].view(token_shape);
  if (o.entropy) out.entropy = outs[i++].view(token_shape);
  if (o.accuracy) out.correct = outs[i++].view(token_shape);
  return out;
}

}  // namespace trlx::losses
