// The Llama-family decoder (Llama, Mistral, Qwen2/3, Phi-3, Gemma 1-3) as LibTorch modules.
#include "model/decoder.hpp"

#include <ATen/autocast_mode.h>

#include <algorithm>
#include <cmath>
#include <limits>
#include <map>
#include <mutex>
#include <set>

#include <fmt/ranges.h>

#include "core/error.hpp"
#include "core/log.hpp"
#include "model/kernels.hpp"
#include "model/quant4.hpp"

namespace trlx::model {

namespace F = torch::nn::functional;

// ---------------------------------------------------------------- norms, rope, masks

RMSNormImpl::RMSNormImpl(int64_t dim, double eps, bool plus_one, bool scale_fp32)
    : eps_(eps), plus_one_(plus_one), scale_fp32_(scale_fp32) {
  weight = register_parameter("weight", plus_one ? torch::zeros({dim}) : torch::ones({dim}));
}

torch::Tensor RMSNormImpl::forward(const torch::Tensor& x) {
  // Computed in fp32 whatever the weights' dtype, then cast back before the
  // scale (Llama) or after it (Gemma), as the reference does: bf16 runs
  // match it.
  auto h = x.to(torch::kFloat32);
  auto var = h.pow(2).mean(-1, /*keepdim=*/true);
  h = h * torch::rsqrt(var + eps_);
  if (plus_one_) return (h * (1.0 + weight.to(torch::kFloat32))).to(x.scalar_type());
  if (scale_fp32_) return (weight.to(torch::kFloat32) * h).to(x.scalar_type());
  return weight * h.to(x.scalar_type());
}

std::pair<torch::Tensor, double> rope_frequencies(const ModelConfig& c, const RopeConfig& r, int64_t seq_len) {
  const int64_t dim = rotary_dims(c, r);
  // theta^(2i/dim) for i < dim/2, in fp32 as the reference computes it.
  auto exponents = torch::arange(0, dim, 2, torch::kInt64).to(torch::kFloat32) / static_cast<double>(dim);
  auto powers = [&](double base) { return torch::pow(torch::tensor(base, torch::kFloat32), exponents); };
  const double max_len = static_cast<double>(c.max_position_embeddings);
  if (r.type == "linear") return {1.0 / powers(r.theta) / r.factor, 1.0};
  if (r.type == "dynamic") {
    // NTK-aware: the base grows with the sequence beyond the configured length.
    const double len = std::max(static_cast<double>(seq_len), max_len);
    const double base = r.theta * std::pow(r.factor * len / max_len - (r.factor - 1), static_cast<double>(dim) / (dim - 2));
    return {1.0 / powers(base), 1.0};
  }
  if (r.type == "llama3") {
    auto inv_freq = 1.0 / powers(r.theta);
    const double old_len = static_cast<double>(r.original_max_position_embeddings);
    const double low_wavelen = old_len / r.low_freq_factor;
    const double high_wavelen = old_len / r.high_freq_factor;
    auto wavelen = 2.0 * M_PI / inv_freq;
    auto scaled = torch::where(wavelen > low_wavelen, inv_freq / r.factor, inv_freq);
    auto smooth = (old_len / wavelen - r.low_freq_factor) / (r.high_freq_factor - r.low_freq_factor);
    auto smoothed = (1 - smooth) * scaled / r.factor + smooth * scaled;
    auto medium = torch::logical_not(wavelen < high_wavelen).logical_and(torch::logical_not(wavelen > low_wavelen));
    return {torch::where(medium, smoothed, scaled), 1.0};
  }
  if (r.type == "yarn") {
    auto mscale = [](double scale, double m) { return scale <= 1 ? 1.0 : 0.1 * m * std::log(scale) + 1.0; };
    double attention = r.attention_factor ? *r.attention_factor
                       : (r.mscale && r.mscale_all_dim && *r.mscale != 0 && *r.mscale_all_dim != 0)
                           ? mscale(r.factor, *r.mscale) / mscale(r.factor, *r.mscale_all_dim)
                           : mscale(r.factor, 1.0);
    // Dimensions that rotate fewer than beta_slow times over the original
    // length are interpolated, more than beta_fast extrapolated, a linear
    // ramp between.
    const double orig = static_cast<double>(r.original_max_position_embeddings);
    auto correction_dim = [&](double rotations) {
      return (dim * std::log(orig / (rotations * 2 * M_PI))) / (2 * std::log(r.theta));
    };
    double low = correction_dim(r.beta_fast), high = correction_dim(r.beta_slow);
    if (r.truncate) {
      low = std::floor(low);
      high = std::ceil(high);
    }
    low = std::max(low, 0.0);
    high = std::min(high, static_cast<double>(dim - 1));
    if (low == high) high += 0.001;
    auto pos_freqs = powers(r.theta);
    auto ramp = ((torch::arange(dim / 2, torch::kFloat32) - low) / (high - low)).clamp(0, 1);
    auto extrapolation = 1 - ramp;
    auto inv = (1.0 / (r.factor * pos_freqs)) * (1 - extrapolation) + (1.0 / pos_freqs) * extrapolation;
    return {inv, attention};
  }
  if (r.type == "longrope") {
    const double orig = static_cast<double>(r.original_max_position_embeddings);
    const double attention = r.attention_factor ? *r.attention_factor
                             : r.factor <= 1.0  ? 1.0
                                                : std::sqrt(1 + std::log(r.factor) / std::log(orig));
    const auto& ext = seq_len > r.original_max_position_embeddings ? r.long_factor : r.short_factor;
    auto factors = torch::tensor(ext, torch::kFloat64).to(torch::kFloat32);
    return {1.0 / (factors * powers(r.theta)), attention};
  }
  return {1.0 / powers(r.theta), 1.0};
}

Rotary::Rotary(const ModelConfig& model, const RopeConfig& rope)
    : model_(model),
      rope_(rope),
      rotary_dim_(rotary_dims(model, rope)),
      cached_len_(model.max_position_embeddings) {
  std::tie(inv_freq_, scale_) = rope_frequencies(model_, rope_);
  original_inv_freq_ = inv_freq_;
  if (rope_.type == "longrope")
    long_inv_freq_ = rope_frequencies(model_, rope_, rope_.original_max_position_embeddings + 1).first;
}

std::pair<torch::Tensor, torch::Tensor> Rotary::tables(const torch::Tensor& positions, torch::Dtype dtype) {
  if (rope_.type == "dynamic" || rope_.type == "longrope") {
    // The longest sequence of this forward (a host read, only for these types).
    const int64_t len = positions.max().item<int64_t>() + 1;
    if (rope_.type == "longrope") {
      inv_freq_ = len > rope_.original_max_position_embeddings ? long_inv_freq_ : original_inv_freq_;
    } else {
      if (len > cached_len_) {  // growth
        inv_freq_ = rope_frequencies(model_, rope_, len).first;
        cached_len_ = len;
      }
      if (len < model_.max_position_embeddings && cached_len_ > model_.max_position_embeddings) {  // reset
        inv_freq_ = original_inv_freq_;
        cached_len_ = model_.max_position_embeddings;
      }
    }
  }
  // The frequencies move to the positions' device once (and again only when
  // they change), not on every forward: a host-to-device copy per decode
  // step would stall the step and keep it from being captured as a graph.
  if (!placed_inv_freq_.defined() || placed_inv_freq_.device() != positions.device() || !placed_from_.is_same(inv_freq_)) {
    placed_inv_freq_ = inv_freq_.to(positions.device());
    placed_from_ = inv_freq_;
  }
  auto freqs = positions.to(torch::kFloat32).unsqueeze(-1) * placed_inv_freq_.view({1, 1, -1});
  auto emb = torch::cat({freqs, freqs}, -1);
  auto cos = emb.cos(), sin = emb.sin();
  if (scale_ != 1.0) {
    cos = cos * scale_;
    sin = sin * scale_;
  }
  return {cos.to(dtype), sin.to(dtype)};
}

namespace {

// A query that may see no key sees itself, so that no row is all -inf; one
// that sees some key does not (a padding query after real tokens sees just
// those tokens, as transformers' padding mask gives it).
torch::Tensor self_if_alone(const torch::Tensor& allowed, const torch::Tensor& diagonal) {
  return allowed.logical_or(diagonal.logical_and(allowed.any(-1, /*keepdim=*/true).logical_not()));
}

}  // namespace

torch::Tensor additive_mask(const torch::Tensor& mask, torch::Dtype dtype) {
  if (!mask.defined()) return mask;
  auto sizes = mask.sizes().vec();
  const int64_t cols = sizes.back();
  sizes.back() = (cols + 15) / 16 * 16;
  return torch::zeros(sizes, mask.options().dtype(dtype))
      .narrow(-1, 0, cols)
      .masked_fill_(mask.logical_not(), -std::numeric_limits<double>::infinity());
}

torch::Tensor build_attention_mask(const torch::Tensor& key_mask, int64_t num_queries,
                                   std::optional<int64_t> sliding_window) {
  const int64_t tk = key_mask.size(1);
  auto opts = torch::TensorOptions().dtype(torch::kInt64).device(key_mask.device());
  auto q = torch::arange(tk - num_queries, tk, opts).view({num_queries, 1});
  auto k = torch::arange(0, tk, opts).view({1, tk});
  auto allowed = k <= q;
  if (sliding_window) allowed = allowed.logical_and((q - k) < *sliding_window);
  allowed = allowed.view({1, 1, num_queries, tk}).logical_and(key_mask.to(torch::kBool).view({-1, 1, 1, tk}));
  return self_if_alone(allowed, (k == q).view({1, 1, num_queries, tk}));
}

torch::Tensor position_ids_from_mask(const torch::Tensor& attention_mask) {
  auto m = attention_mask.to(torch::kInt64);
  return (m.cumsum(-1) - 1).masked_fill(m == 0, 1);
}

torch::Tensor branch_reach(const torch::Tensor& position_ids, const torch::Tensor& document_ids,
                           const torch::Tensor& key_mask) {
  const int64_t b = position_ids.size(0), t = position_ids.size(1);
  auto pos_t = position_ids.to(torch::kCPU, torch::kInt64).contiguous();
  auto doc_t = document_ids.to(torch::kCPU, torch::kInt64).contiguous();
  auto real_t = key_mask.to(torch::kCPU, torch::kBool).contiguous();
  const auto* pos = pos_t.data_ptr<int64_t>();
  const auto* doc = doc_t.data_ptr<int64_t>();
  const auto* real = real_t.data_ptr<bool>();
  // A restart: a real token at or below the position of the row's previous
  // real token of the same document (padding between them does not count).
  bool branches = false;
  for (int64_t r = 0; r < b && !branches; ++r) {
    int64_t prev = -1;
    for (int64_t i = r * t; i < (r + 1) * t && !branches; ++i) {
      if (!real[i]) continue;
      branches = prev >= 0 && doc[i] == doc[prev] && pos[i] <= pos[prev];
      prev = i;
    }
  }
  if (!branches) return torch::empty({0}, torch::kInt64);
  // Query q sees key k < q (a real token) while every position between them,
  // q's included, is above k's: a restart at or below k's position hides k
  // from there on. Padding is never visible, but its positions count: padding
  // laid out in a branch continues that branch, and a padding query walks by
  // its own position too. Every query sees itself. So with next[k] the first
  // j > k whose position is at or below k's (T if none), q sees k exactly
  // when k < q < next[k]: one stack pass per row ([B, T]), no T x T work.
  auto next_t = torch::empty({b, t}, torch::kInt64);
  auto* next = next_t.data_ptr<int64_t>();
  std::vector<int64_t> stack;
  for (int64_t r = 0; r < b; ++r) {
    const int64_t* p = pos + r * t;
    stack.clear();
    for (int64_t k = t - 1; k >= 0; --k) {
      while (!stack.empty() && p[stack.back()] > p[k]) stack.pop_back();
      next[r * t + k] = stack.empty() ? t : stack.back();
      stack.push_back(k);
    }
  }
  return next_t;
}

torch::Tensor branch_mask_from_reach(const torch::Tensor& reach, const torch::Tensor& key_mask) {
  if (reach.numel() == 0) return {};
  const int64_t t = key_mask.size(1);
  const auto device = key_mask.device();
  const auto idx = torch::arange(t, torch::dtype(torch::kInt64).device(device));
  const auto q = idx.view({1, t, 1}), k = idx.view({1, 1, t});
  const auto next = reach.to(device).unsqueeze(1);  // [B, 1 (query), T (key)]
  const auto real_keys = key_mask.to(torch::kBool).unsqueeze(1);
  auto out = k.lt(q).logical_and(q.lt(next)).logical_and(real_keys).logical_or(k.eq(q));
  return out.unsqueeze(1);
}

torch::Tensor branch_mask(const torch::Tensor& position_ids, const torch::Tensor& document_ids,
                          const torch::Tensor& key_mask) {
  return branch_mask_from_reach(branch_reach(position_ids, document_ids, key_mask), key_mask);
}

namespace {

torch::Tensor rotate_half(const torch::Tensor& x) {
  const int64_t half = x.size(-1) / 2;
  return torch::cat({-x.narrow(-1, half, half), x.narrow(-1, 0, half)}, -1);
}

Linear linear(int64_t in, int64_t out, bool bias) { return Linear(in, out, bias); }

}  // namespace

void KVCache::keep_slots(const std::vector<int64_t>& kept) {
  for (auto* layer_tensors : {&keys, &values})
    for (auto& t : *layer_tensors)
      if (t.defined()) t = t.index_select(0, torch::tensor(kept, torch::kInt64).to(t.device()));
  slots_ = static_cast<int64_t>(kept.size());
}

// ---------------------------------------------------------------- layers

LinearImpl::LinearImpl(int64_t in_features, int64_t out_features, bool with_bias) {
  weight = register_parameter("weight", torch::empty({out_features, in_features}));
  if (with_bias) bias = register_parameter("bias", torch::empty({out_features}));
}

namespace {

// A 4-bit layer's product x W^T (+ b): the weight is dequantized for the
// forward and again for the backward, never kept between them, as
// bitsandbytes' MatMul4Bit does; only the input gets a gradient (the 4-bit
// base is frozen). Inside a checkpoint's recompute, whose backward follows
// at once (KeepDequantizedWeights), the forward's weight is kept for it
// instead. Autograd keeps a raw pointer to the codes, which the layer's
// `quant4` owns for as long as the model, and so any graph through it,
// lives.
class Quant4Linear : public torch::autograd::Function<Quant4Linear> {
 public:
  static torch::Tensor forward(torch::autograd::AutogradContext* ctx, const torch::Tensor& x, int64_t weights) {
    const auto* q = reinterpret_cast<const Quant4Weight*>(weights);
    ctx->saved_data["weights"] = weights;
    auto w = dequantize_4bit(*q, x.scalar_type());
    if (KeepDequantizedWeights::active()) ctx->save_for_backward({w});
    return torch::linear(x, w);
  }
  static torch::autograd::variable_list backward(torch::autograd::AutogradContext* ctx,
                                                 torch::autograd::variable_list grads) {
    const auto* q = reinterpret_cast<const Quant4Weight*>(ctx->saved_data["weights"].toInt());
    const auto& g = grads.at(0);
    const auto kept = ctx->get_saved_variables();
    auto w = kept.empty() ? dequantize_4bit(*q, g.scalar_type()) : kept[0].to(g.scalar_type());
    return {torch::matmul(g, w), torch::Tensor()};
  }
};

// The layer's base product on `x` (in the compute dtype of a 4-bit layer),
// with or without its bias.
torch::Tensor base_product(const LinearImpl& l, const torch::Tensor& x, const torch::Tensor& base_weight,
                           const torch::Tensor& base_bias) {
  if (!l.quant4) return torch::linear(x, base_weight, base_bias);
  auto y = Quant4Linear::apply(x, reinterpret_cast<int64_t>(l.quant4.get()));
  return base_bias.defined() ? y + base_bias : y;
}

}  // namespace

torch::Tensor LinearImpl::forward_quantized(const torch::Tensor& x) {
  // As bitsandbytes' Linear4bit: the input in the compute dtype, the weight
  // dequantized to it, the output back in the input's dtype.
  const auto compute = quant4->compute_dtype;
  const auto h = x.to(compute);
  const auto b = bias.defined() ? bias.to(compute) : bias;
  torch::Tensor y;
  if (!lora_A || !lora_enabled) y = base_product(*this, h, {}, b);
  else y = forward_with_lora(h, {}, b);
  return y.to(x.scalar_type());
}

torch::Tensor LinearImpl::forward_with_lora(const torch::Tensor& x, const torch::Tensor& base_weight,
                                            const torch::Tensor& base_bias) {
  // base_weight is undefined for a 4-bit layer, whose product dequantizes.
  auto y = base_product(*this, x, base_weight, base_bias);
  const bool dropped = lora_dropout > 0.0 && is_training();
  if (!lora_magnitude.defined()) {
    // The adapter may keep a wider dtype than the base (fp32 adapters on a
    // bf16 model): its input is cast to it and its output back. Under
    // autocast in the input's own dtype the adapter's products run in that
    // dtype anyway, so the input goes in as it is: the round trip would
    // give the same values. With dropout that holds for trlx's CPU dropout
    // (which scales in float32 whatever the dtype), not for torch::dropout
    // elsewhere (which would scale by 1/(1-p) rounded to bf16).
    const auto dev = x.device().type();
    const bool as_is = at::autocast::is_autocast_enabled(dev) &&
                       at::autocast::get_autocast_dtype(dev) == x.scalar_type() && (!dropped || x.is_cpu());
    auto h = as_is ? x : x.to(lora_A->weight.scalar_type());
    if (dropped) h = model::dropout(h, lora_dropout, /*train=*/true);
    // The scale applied to the rank-r product (r values a token, not one
    // per output), and y + a B^T as one addmm where the dtypes agree.
    auto a = torch::linear(h, lora_A->weight) * lora_scale;
    if (a.scalar_type() != y.scalar_type()) return y + torch::linear(a, lora_B->weight).to(y.scalar_type());
    const int64_t out = y.size(-1);
    return torch::addmm(y.reshape({-1, out}), a.reshape({-1, a.size(-1)}), lora_B->weight.t()).view(y.sizes());
  }
  auto h = x.to(lora_A->weight.scalar_type());
  if (dropped) h = model::dropout(h, lora_dropout, /*train=*/true);
  auto delta = torch::linear(torch::linear(h, lora_A->weight), lora_B->weight) * lora_scale;
  // DoRA, as PEFT computes it: each output row of W + scale * B A rescaled
  // to its learned magnitude, the row norms taken as constants (not
  // differentiated, as the DoRA paper advises). With W x the base output
  // (without bias; from the dropped-out input when dropout is on):
  //   y + (m / |W + s B A| - 1) * W x + (m / |W + s B A|) * s B A x
  const auto dtype = h.scalar_type();
  torch::Tensor norm;
  {
    torch::NoGradGuard no_grad;
    const auto w = quant4 ? dequantize_4bit(*quant4, dtype) : base_weight.to(dtype);
    norm = torch::linalg_vector_norm(w + torch::matmul(lora_B->weight, lora_A->weight) * lora_scale, 2, {1});
  }
  const auto factor = lora_magnitude / norm;
  // Under dropout the base product of the dropped-out input, in the
  // adapters' dtype as PEFT computes it.
  const auto base = !dropped ? (base_bias.defined() ? y - base_bias : y).to(dtype)
                    : quant4 ? base_product(*this, h, {}, {})
                             : torch::linear(h, base_weight.to(dtype));
  return y + ((factor - 1) * base + factor * delta).to(y.scalar_type());
}

EmbeddingImpl::EmbeddingImpl(int64_t num, int64_t dim, std::optional<int64_t> padding_idx) {
  weight = register_parameter("weight", torch::empty({num, dim}));
  if (padding_idx && *padding_idx >= 0 && *padding_idx < num) padding_idx_ = *padding_idx;
}

AttentionImpl::AttentionImpl(const ModelConfig& c, int64_t layer)
    : layer_(layer),
      heads_(c.num_attention_heads),
      kv_heads_(c.num_key_value_heads),
      head_dim_(c.head_dim),
      v_dim_(c.kv_lora_rank > 0 ? c.v_head_dim : c.head_dim),
      nope_dim_(c.qk_nope_head_dim),
      rope_dim_(c.qk_rope_head_dim),
      kv_rank_(c.kv_lora_rank),
      interleave_(c.rope_interleave),
      scale_(c.attention_scale > 0 ? c.attention_scale : 1.0 / std::sqrt(static_cast<double>(c.head_dim))),
      softcap_(c.attn_logit_softcapping) {
  const bool qkv_bias = c.attention_bias || c.qkv_bias;
  if (c.kv_lora_rank > 0) {
    // Latent attention (DeepSeek-V3); its two norms keep eps 1e-6 whatever rms_norm_eps says.
    if (c.q_lora_rank > 0) {
      q_a_proj = register_module("q_a_proj", linear(c.hidden_size, c.q_lora_rank, c.attention_bias));
      q_a_layernorm = register_module("q_a_layernorm", RMSNorm(c.q_lora_rank, 1e-6));
      q_b_proj = register_module("q_b_proj", linear(c.q_lora_rank, heads_ * head_dim_, false));
    } else {
      q_proj = register_module("q_proj", linear(c.hidden_size, heads_ * head_dim_, false));
    }
    kv_a_proj_with_mqa =
        register_module("kv_a_proj_with_mqa", linear(c.hidden_size, c.kv_lora_rank + c.qk_rope_head_dim, c.attention_bias));
    kv_a_layernorm = register_module("kv_a_layernorm", RMSNorm(c.kv_lora_rank, 1e-6));
    kv_b_proj = register_module("kv_b_proj",
                                linear(c.kv_lora_rank, heads_ * (c.qk_nope_head_dim + c.v_head_dim), false));
    o_proj = register_module("o_proj", linear(heads_ * c.v_head_dim, c.hidden_size, c.attention_bias));
    return;
  }
  if (c.fused_projections) {
    qkv_proj = register_module("qkv_proj", linear(c.hidden_size, (heads_ + 2 * kv_heads_) * head_dim_, qkv_bias));
  } else {
    q_proj = register_module("q_proj", linear(c.hidden_size, heads_ * head_dim_, qkv_bias));
    k_proj = register_module("k_proj", linear(c.hidden_size, kv_heads_ * head_dim_, qkv_bias));
    v_proj = register_module("v_proj", linear(c.hidden_size, kv_heads_ * head_dim_, qkv_bias));
  }
  o_proj = register_module("o_proj", linear(heads_ * head_dim_, c.hidden_size, c.attention_bias));
  if (c.qk_norm) {
    q_norm = register_module("q_norm", RMSNorm(head_dim_, c.rms_norm_eps, c.norm_plus_one));
    k_norm = register_module("k_norm", RMSNorm(head_dim_, c.rms_norm_eps, c.norm_plus_one));
  }
  if (c.attention_sinks) sinks = register_parameter("sinks", torch::empty({heads_}));
}

namespace {

// Rotary embedding of the first cos.size(-1) dims of x [B, H, T, D]; the
// rest (partial rotary) pass through.
torch::Tensor rotate(const torch::Tensor& x, const torch::Tensor& cos, const torch::Tensor& sin) {
  const int64_t dims = cos.size(-1);
  if (dims == x.size(-1)) return x * cos + rotate_half(x) * sin;
  auto r = x.narrow(-1, 0, dims);
  return torch::cat({r * cos + rotate_half(r) * sin, x.narrow(-1, dims, x.size(-1) - dims)}, -1);
}

// The dtype a device computes attention in: autocast's where it is on,
// else `otherwise` (the tensors' own).
torch::Dtype compute_dtype(c10::DeviceType device, torch::Dtype otherwise) {
  return at::autocast::is_autocast_enabled(device) ? at::autocast::get_autocast_dtype(device) : otherwise;
}

// Attention with what SDPA does not offer: tanh soft-capped scores,
// cap * tanh(q k^T * scale / cap) (Gemma 2), and sinks (gpt-oss), one logit
// per head joining each query's softmax as one more key whose value is 0;
// masked, softmax in fp32.
torch::Tensor unfused_attention(const torch::Tensor& q, torch::Tensor k, torch::Tensor v, const torch::Tensor& mask,
                                double scale, std::optional<double> cap, const torch::Tensor& sinks) {
  const int64_t groups = q.size(1) / k.size(1);
  if (groups > 1) {
    k = k.repeat_interleave(groups, 1);
    v = v.repeat_interleave(groups, 1);
  }
  auto scores = torch::matmul(q, k.transpose(2, 3)) * scale;
  if (cap) scores = torch::tanh(scores / *cap) * *cap;
  if (mask.defined()) {
    if (mask.scalar_type() == torch::kBool)
      scores = scores.masked_fill(mask.logical_not(), -std::numeric_limits<double>::infinity());
    else
      scores = scores + mask.to(scores.scalar_type());
  } else if (q.size(2) == k.size(2)) {
    auto causal = torch::ones({q.size(2), k.size(2)}, torch::dtype(torch::kBool).device(q.device())).tril();
    scores = scores.masked_fill(causal.logical_not(), -std::numeric_limits<double>::infinity());
  }
  if (sinks.defined()) {
    auto sink = sinks.to(scores.scalar_type()).view({1, -1, 1, 1}).expand({scores.size(0), -1, scores.size(2), 1});
    auto weights = torch::softmax(torch::cat({scores, sink}, -1), -1, torch::kFloat32);
    return torch::matmul(weights.narrow(-1, 0, scores.size(-1)).to(q.scalar_type()), v);
  }
  auto weights = torch::softmax(scores, -1, torch::kFloat32).to(q.scalar_type());
  return torch::matmul(weights, v);
}

}  // namespace

namespace {

std::mutex attention_mutex;
FlashKernel flash_override;
std::optional<AttentionDevice> device_override;
std::map<std::pair<std::string, int>, AttentionDevice> probed;

torch::Tensor libtorch_flash(const FlashArgs& a) {
  const bool varlen = a.cu_q.defined();
  std::optional<at::Tensor> cu_q, cu_k, used;
  if (varlen) {
    cu_q = a.cu_q;
    cu_k = a.cu_k;
  }
  if (a.seqused_k.defined()) used = a.seqused_k;
  std::optional<int64_t> left, right;
  if (a.window) {
    left = *a.window - 1;
    right = 0;
  }
  return std::get<0>(at::_flash_attention_forward(a.q, a.k, a.v, cu_q, cu_k, a.max_q, a.max_k, /*dropout_p=*/0.0,
                                                  /*is_causal=*/true, /*return_debug_mask=*/false, a.scale, left,
                                                  right, used));
}

torch::Tensor run_flash(const FlashArgs& a) {
  FlashKernel k;
  {
    std::lock_guard<std::mutex> lock(attention_mutex);
    k = flash_override;
  }
  return k ? k(a) : libtorch_flash(a);
}

AttentionDevice probe_device(const torch::Device& device, torch::Dtype dtype) {
  AttentionDevice d;
  if (!device.is_cuda()) return d;
  d.cuda = true;
  torch::NoGradGuard no_grad;
  const auto o = torch::TensorOptions().dtype(dtype).device(device);
  auto q = torch::zeros({1, 4, 16, 64}, o), k = torch::zeros({1, 2, 16, 64}, o);
  auto mask = torch::zeros({1, 1, 16, 16}, o);
  try {
    FlashArgs a{q.transpose(1, 2), k.transpose(1, 2), k.transpose(1, 2), {}, {}, {}, 16, 16, 0.125, std::nullopt};
    libtorch_flash(a);
    d.flash = true;
  } catch (const std::exception&) {
    d.flash = false;
  }
  // SDPA's own choice (0: math) for a masked call, grouped and not.
  const int64_t math = 0;
  auto kx = k.repeat_interleave(2, 1);
  d.fused_masked = at::_fused_sdp_choice(q, kx, kx, mask, 0.0, false, std::nullopt, false) != math;
  d.fused_masked_grouped = at::_fused_sdp_choice(q, k, k, mask, 0.0, false, std::nullopt, true) != math;
  return d;
}

}  // namespace

void set_flash_kernel(FlashKernel kernel) {
  std::lock_guard<std::mutex> lock(attention_mutex);
  flash_override = std::move(kernel);
}

void set_attention_device(std::optional<AttentionDevice> device) {
  std::lock_guard<std::mutex> lock(attention_mutex);
  device_override = device;
  probed.clear();
}

AttentionDevice attention_device(const torch::Device& device, torch::Dtype dtype) {
  std::lock_guard<std::mutex> lock(attention_mutex);
  if (device_override) return *device_override;
  const auto key = std::make_pair(device.str(), static_cast<int>(dtype));
  auto it = probed.find(key);
  if (it == probed.end()) it = probed.emplace(key, probe_device(device, dtype)).first;
  return it->second;
}

std::pair<torch::Tensor, int64_t> document_segments(const torch::Tensor& document_ids) {
  auto d = document_ids.to(torch::kCPU, torch::kInt64).contiguous();
  const int64_t b = d.size(0), t = d.size(1);
  const auto* p = d.data_ptr<int64_t>();
  std::vector<int32_t> cu = {0};
  int64_t longest = 0, start = 0;
  for (int64_t r = 0; r < b; ++r) {
    for (int64_t j = 1; j <= t; ++j) {
      if (j < t && p[r * t + j] == p[r * t + j - 1]) continue;
      const int64_t end = r * t + j;
      longest = std::max(longest, end - start);
      cu.push_back(static_cast<int32_t>(end));
      start = end;
    }
  }
  return {torch::tensor(cu, torch::kInt32), longest};
}

torch::Tensor AttentionImpl::forward(const torch::Tensor& x, const torch::Tensor& cos, const torch::Tensor& sin,
                                     const LayerAttention& attn, KVCache* cache) {
  const int64_t b = x.size(0), t = x.size(1), s = attn.query_start, tq = t - s;
  TORCH_CHECK(s == 0 || (!cache && s > 0 && s < t), "queries must start inside the sequence, without a KV cache");
  torch::Tensor q, k, v;
  if (kv_a_proj_with_mqa) {
    // Latent attention: per head [rope | nope] (the rotary dims first, so
    // that the partial rotary below turns them; q.k is the same in any
    // order both share), values padded with zeros to the key width.
    const auto xq = s ? x.narrow(1, s, tq) : x;
    q = (q_a_proj ? q_b_proj->forward(q_a_layernorm->forward(q_a_proj->forward(xq))) : q_proj->forward(xq))
            .view({b, tq, heads_, head_dim_});
    const auto ckv = kv_a_proj_with_mqa->forward(x);
    auto k_pe = ckv.narrow(-1, kv_rank_, rope_dim_).view({b, t, 1, rope_dim_});
    const auto kv = kv_b_proj->forward(kv_a_layernorm->forward(ckv.narrow(-1, 0, kv_rank_)))
                        .view({b, t, heads_, nope_dim_ + v_dim_});
    auto q_pe = q.narrow(-1, nope_dim_, rope_dim_);
    if (interleave_) {
      // Pairs (2i, 2i + 1) turn together: even dims first, then odd, for rotate-half.
      auto split = [](const torch::Tensor& t) {
        auto sz = t.sizes().vec();
        auto shape = sz;
        shape.back() /= 2;
        shape.push_back(2);
        return t.reshape(shape).transpose(-1, -2).reshape(sz);
      };
      q_pe = split(q_pe);
      k_pe = split(k_pe);
    }
    q = torch::cat({q_pe, q.narrow(-1, 0, nope_dim_)}, -1);
    k = torch::cat({k_pe.expand({b, t, heads_, rope_dim_}), kv.narrow(-1, 0, nope_dim_)}, -1);
    v = kv.narrow(-1, nope_dim_, v_dim_);
    if (v_dim_ < head_dim_) v = torch::constant_pad_nd(v, {0, head_dim_ - v_dim_});
  } else if (qkv_proj) {
    auto qkv = qkv_proj->forward(x);
    q = qkv.narrow(-1, 0, heads_ * head_dim_).narrow(1, s, tq).reshape({b, tq, heads_, head_dim_});
    k = qkv.narrow(-1, heads_ * head_dim_, kv_heads_ * head_dim_).view({b, t, kv_heads_, head_dim_});
    v = qkv.narrow(-1, (heads_ + kv_heads_) * head_dim_, kv_heads_ * head_dim_).view({b, t, kv_heads_, head_dim_});
  } else {
    q = q_proj->forward(s ? x.narrow(1, s, tq) : x).view({b, tq, heads_, head_dim_});
    k = k_proj->forward(x).view({b, t, kv_heads_, head_dim_});
    v = v_proj->forward(x).view({b, t, kv_heads_, head_dim_});
  }
  v = v.transpose(1, 2);
  if (q_norm) {
    q = q_norm->forward(q);
    k = k_norm->forward(k);
  }
  q = q.transpose(1, 2);
  k = k.transpose(1, 2);
  auto c = cos.unsqueeze(1), sn = sin.unsqueeze(1);
  q = s ? rotate(q, c.narrow(2, s, tq), sn.narrow(2, s, tq)) : rotate(q, c, sn);
  k = rotate(k, c, sn);
  // [B, H, T, D] views from here on.
  // Sequence parallelism: this rank's positions of every head become every
  // position of this rank's heads (K/V heads fewer than the ranks repeated
  // first, so that each rank gets the one its queries read); the rows' last
  // share is padded, and attention reads the real `length` positions.
  int64_t heads = heads_, kv_heads = kv_heads_, ta = t, tqa = tq;
  torch::Tensor head_sinks = sinks;
  const bool context = attn.sp && attn.sp->kind() == SequenceParallel::Kind::Context;
  if (context) {
    // Context parallelism: this rank's queries over every rank's keys (in
    // the gathered order the mask's columns follow).
    TORCH_CHECK(!cache && s == 0, "context parallelism runs forwards without a cache, over every query");
    k = attn.sp->gather(k, 2);
    v = attn.sp->gather(v, 2);
    ta = k.size(2);
  } else if (attn.sp) {
    TORCH_CHECK(!cache && s == 0, "sequence parallelism runs forwards without a cache, over every query");
    const int64_t n = attn.sp->size();
    if (kv_heads_ % n != 0) {
      k = k.repeat_interleave(n / kv_heads_, 1);
      v = v.repeat_interleave(n / kv_heads_, 1);
    }
    q = attn.sp->to_heads(q).narrow(2, 0, attn.length);
    k = attn.sp->to_heads(k).narrow(2, 0, attn.length);
    v = attn.sp->to_heads(v).narrow(2, 0, attn.length);
    heads = q.size(1);
    kv_heads = k.size(1);
    ta = tqa = attn.length;
    if (sinks.defined()) head_sinks = sinks.narrow(0, attn.sp->rank() * heads, heads);
  }
  torch::Tensor cache_k, cache_v;  // decode: the whole cache, [slots, capacity, kv_heads, D]
  if (cache) {
    auto& ck = cache->keys[static_cast<size_t>(layer_)];
    auto& cv = cache->values[static_cast<size_t>(layer_)];
    if (!ck.defined()) {
      // In the dtype attention computes in: under autocast its dtype (the
      // rotary tables may have widened k to the weights' float32).
      ck = torch::zeros({cache->num_slots(), cache->capacity(), kv_heads_, head_dim_},
                        k.options().dtype(compute_dtype(k.device().type(), k.scalar_type())));
      cv = torch::zeros_like(ck);
    }
    if (cache->mode == KVCache::Mode::Prefill) {
      // The new sequences attend to themselves (causal, padding trails);
      // their keys and values go to their slots for the decode steps.
      if (cache->slots.numel() > 0) {
        ck.narrow(1, 0, t).index_copy_(0, cache->slots, k.transpose(1, 2).index_select(0, cache->sources).to(ck.scalar_type()));
        cv.narrow(1, 0, t).index_copy_(0, cache->slots, v.transpose(1, 2).index_select(0, cache->sources).to(cv.scalar_type()));
      }
    } else {
      auto at = cache->positions.view({b, 1, 1, 1}).expand({b, 1, kv_heads_, head_dim_});
      ck.scatter_(1, at, k.transpose(1, 2).to(ck.scalar_type()));
      cv.scatter_(1, at, v.transpose(1, 2).to(cv.scalar_type()));
      cache_k = ck;
      cache_v = cv;
      k = ck.narrow(1, 0, cache->read_length).transpose(1, 2);
      v = cv.narrow(1, 0, cache->read_length).transpose(1, 2);
    }
  }
  // Grouped-query attention: SDPA shares each K/V head among its query
  // heads itself (no repeated copies of K and V) where its kernel can.
  const bool gqa = kv_heads != heads;
  const auto& mask = attn.mask;
  auto additive = [&] {
    // The model passes an additive mask made once per forward in the
    // attention's compute dtype. Autocast casts SDPA's inputs to its dtype,
    // the mask's, whatever q's is (float32 after the rotation under fp32
    // weights), so the mask is cast only without autocast, to q's dtype.
    const auto want = compute_dtype(q.device().type(), q.scalar_type());
    const bool cast = mask.scalar_type() != torch::kBool && mask.scalar_type() != want;
    return cast ? mask.to(want) : mask;
  };
  // The flash kernels are called directly, outside autocast's reach: q, k
  // and v go to the dtype SDPA would have computed in (autocast's, or
  // theirs), as SDPA's autocast rule casts them.
  if (attn.path == AttentionPath::FlashTail || attn.path == AttentionPath::FlashDocuments ||
      attn.path == AttentionPath::FlashDecode) {
    const auto dtype = compute_dtype(q.device().type(), v.scalar_type());
    q = q.to(dtype);
    k = k.to(dtype);
    v = v.to(dtype);
    if (cache_k.defined()) {
      cache_k = cache_k.to(dtype);
      cache_v = cache_v.to(dtype);
    }
  }
  torch::Tensor out;  // [B, H, Tq, D]
  switch (attn.path) {
    case AttentionPath::Unfused:
      out = unfused_attention(q, k, v, mask, scale_, softcap_, head_sinks);
      break;
    case AttentionPath::SdpaCausal:
      // No mask: causal over the same positions.
      out = at::scaled_dot_product_attention(q, k, v, /*attn_mask=*/{}, /*dropout_p=*/0.0, q.size(2) == k.size(2),
                                             scale_, gqa);
      break;
    case AttentionPath::SdpaCausalExpanded: {
      const int64_t groups = heads / kv_heads;
      out = at::scaled_dot_product_attention(q, k.repeat_interleave(groups, 1), v.repeat_interleave(groups, 1),
                                             /*attn_mask=*/{}, 0.0, q.size(2) == k.size(2), scale_, false);
      break;
    }
    case AttentionPath::SdpaMasked:
      TORCH_CHECK(mask.defined(), "attention path ", attention_path_name(attn.path), " without its mask");
      out = at::scaled_dot_product_attention(q, k, v, additive(), 0.0, false, scale_, gqa);
      break;
    case AttentionPath::SdpaMaskedExpanded: {
      TORCH_CHECK(mask.defined(), "attention path ", attention_path_name(attn.path), " without its mask");
      const int64_t groups = heads / kv_heads;
      out = at::scaled_dot_product_attention(q, k.repeat_interleave(groups, 1), v.repeat_interleave(groups, 1),
                                             additive(), 0.0, false, scale_, false);
      break;
    }
    case AttentionPath::FlashTail: {
      FlashArgs a{q.transpose(1, 2), k.transpose(1, 2), v.transpose(1, 2), {}, {}, {}, tqa, k.size(2), scale_,
                  attn.window};
      out = run_flash(a).transpose(1, 2);
      break;
    }
    case AttentionPath::FlashDocuments: {
      TORCH_CHECK(s == 0 && attn.cu_seqlens.defined(), "packed attention needs its segments and every query");
      auto flat = [&](const torch::Tensor& m) { return m.transpose(1, 2).reshape({b * ta, m.size(1), head_dim_}); };
      FlashArgs a{flat(q), flat(k), flat(v), attn.cu_seqlens, attn.cu_seqlens, {}, attn.max_seqlen, attn.max_seqlen,
                  scale_, attn.window};
      out = run_flash(a).view({b, ta, heads, head_dim_}).transpose(1, 2);
      break;
    }
    case AttentionPath::FlashDecode: {
      TORCH_CHECK(cache_k.defined(), "the flash decode path runs only on a decode step");
      const int64_t cap = cache->capacity();
      FlashArgs a{q.transpose(1, 2).reshape({b, heads_, head_dim_}),
                  cache_k.view({b * cap, kv_heads_, head_dim_}),
                  cache_v.view({b * cap, kv_heads_, head_dim_}),
                  attn.cu_seqlens,
                  attn.cu_seqlens_k,
                  attn.seqused_k,
                  1,
                  cache->read_length,
                  scale_,
                  attn.window};
      out = run_flash(a).view({b, 1, heads_, head_dim_}).transpose(1, 2);
      break;
    }
  }
  if (attn.sp && !context) {
    // Back to this rank's positions of every head (the padding's rows, zero,
    // are what the last share's padded positions receive).
    const int64_t padded = t * attn.sp->size();
    if (padded > ta) out = torch::constant_pad_nd(out, {0, 0, 0, padded - ta});
    out = attn.sp->to_positions(out);
  }
  out = out.transpose(1, 2);
  if (v_dim_ < head_dim_) out = out.narrow(-1, 0, v_dim_);  // latent attention's padded values
  out = out.reshape({b, tq, heads_ * v_dim_});
  return o_proj->forward(out);
}

MLPImpl::MLPImpl(const ModelConfig& c, int64_t width) : gelu_(c.hidden_act == "gelu_pytorch_tanh") {
  const int64_t w = width > 0 ? width : c.intermediate_size;
  if (c.fused_projections) {
    gate_up_proj = register_module("gate_up_proj", linear(c.hidden_size, 2 * w, c.mlp_bias));
  } else {
    gate_proj = register_module("gate_proj", linear(c.hidden_size, w, c.mlp_bias));
    up_proj = register_module("up_proj", linear(c.hidden_size, w, c.mlp_bias));
  }
  down_proj = register_module("down_proj", linear(w, c.hidden_size, c.mlp_bias));
}

torch::Tensor MLPImpl::forward(const torch::Tensor& x) {
  torch::Tensor gate, up;
  if (gate_up_proj) {
    auto both = gate_up_proj->forward(x).chunk(2, -1);
    gate = both[0];
    up = both[1];
  } else {
    gate = gate_proj->forward(x);
    up = up_proj->forward(x);
  }
  return down_proj->forward((gelu_ ? torch::gelu(gate, "tanh") : F::silu(gate)) * up);
}

DecoderLayerImpl::DecoderLayerImpl(const ModelConfig& c, int64_t layer, std::shared_ptr<RouterBalance> balance) {
  self_attn = register_module("self_attn", Attention(c, layer));
  if (c.is_moe() && c.sparse_layers[static_cast<size_t>(layer)]) {
    moe = register_module("mlp", SparseMoe(c, std::move(balance)));
    // DeepSeek-V3: experts every token runs through, beside the routed ones.
    if (c.n_shared_experts > 0)
      shared_experts = moe->register_module("shared_experts", MLP(c, c.moe_intermediate_size * c.n_shared_experts));
  } else {
    mlp = register_module("mlp", MLP(c));
  }
  auto norm = [&] { return RMSNorm(c.hidden_size, c.rms_norm_eps, c.norm_plus_one, c.norm_weight_fp32); };
  input_layernorm = register_module("input_layernorm", norm());
  post_attention_layernorm = register_module("post_attention_layernorm", norm());
  if (c.sandwich_norms) {
    pre_feedforward_layernorm = register_module("pre_feedforward_layernorm", norm());
    post_feedforward_layernorm = register_module("post_feedforward_layernorm", norm());
  }
  sliding = c.sliding_window && c.sliding_layers[static_cast<size_t>(layer)];
  local_rope = c.sliding_layers[static_cast<size_t>(layer)];
}

torch::Tensor DecoderLayerImpl::forward(const torch::Tensor& x, const torch::Tensor& cos, const torch::Tensor& sin,
                                        const LayerAttention& plan, KVCache* cache) {
  auto attn = self_attn->forward(input_layernorm->forward(x), cos, sin, plan, cache);
  const int64_t query_start = plan.query_start;
  auto feed_forward = [&](const torch::Tensor& h) {
    if (!moe) return mlp->forward(h);
    auto y = moe->forward(h, plan.router_rows, plan.balance);
    return shared_experts ? y + shared_experts->forward(h) : y;
  };
  const auto residual = query_start ? x.narrow(1, query_start, x.size(1) - query_start) : x;
  if (pre_feedforward_layernorm) {
    // Gemma 2/3: each block's output is normed before its residual add.
    auto h = residual + post_attention_layernorm->forward(attn);
    return h + post_feedforward_layernorm->forward(feed_forward(pre_feedforward_layernorm->forward(h)));
  }
  auto h = residual + attn;
  return h + feed_forward(post_attention_layernorm->forward(h));
}

// ---------------------------------------------------------------- model

DecoderModelImpl::DecoderModelImpl(const ModelConfig& c) : config_(c) {
  embed_tokens = register_module("embed_tokens", Embedding(c.vocab_size, c.hidden_size, c.pad_token_id));
  layers = register_module("layers", torch::nn::ModuleList());
  if (c.is_moe() && c.router_balance_loss) router_balance_ = std::make_shared<RouterBalance>();
  for (int64_t i = 0; i < c.num_hidden_layers; ++i) layers->push_back(DecoderLayer(c, i, router_balance_));
  norm = register_module("norm", RMSNorm(c.hidden_size, c.rms_norm_eps, c.norm_plus_one, c.norm_weight_fp32));
  rope_ = std::make_shared<Rotary>(c, c.rope);
  if (c.sliding_rope) sliding_rope_ = std::make_shared<Rotary>(c, *c.sliding_rope);
}

torch::Tensor DecoderModelImpl::forward(const Batch& batch, KVCache* cache) {
  const auto& ids = batch.input_ids;
  TORCH_CHECK(ids.dim() == 2, "input_ids must be [batch, time]");
  const int64_t b = ids.size(0), t = ids.size(1);
  const auto device = ids.device();
  const bool decode = cache && cache->mode == KVCache::Mode::Decode;
  TORCH_CHECK(!decode || (t == 1 && b == cache->num_slots()), "a decode step runs one token for every cache slot");
  TORCH_CHECK(!cache || t <= cache->capacity(), "a prefill longer than the KV cache");
  const bool packed = batch.document_ids.defined();
  TORCH_CHECK(!packed || !cache, "packed sequences (document_ids) cannot be used with a KV cache");
  // A training forward whose expert routing the load-balancing loss
  // collects routes every position, as the reference does: outputs_from
  // then only trims the output.
  const bool balanced = router_balance_ && router_balance_->collecting() && torch::GradMode::is_enabled() && !cache;
  // Sequence parallelism splits the rows of forwards without a cache; the
  // last layer then computes every position (trimmed after the gather).
  SequenceParallel* sp = sp_ && sp_->size() > 1 && !cache ? sp_.get() : nullptr;
  TORCH_CHECK(!sp || !balanced, "sequence parallelism with the load-balancing loss is not built");
  const bool context = sp && sp->kind() == SequenceParallel::Kind::Context;
  const int64_t from = balanced || sp ? 0 : batch.outputs_from;
  TORCH_CHECK(batch.outputs_from == 0 || (!cache && batch.outputs_from > 0 && batch.outputs_from < t),
              "outputs_from must lie inside the rows, without a KV cache");
  const auto& window = config_.sliding_window;

  // The dtype attention computes in: autocast's (bf16) when it is on.
  const auto mask_dtype = compute_dtype(device.type(), embed_tokens->weight.scalar_type());

  // What each kind of layer's attention needs (attention_plan.hpp), decided
  // on the host before any mask is built: a mask is built only where the
  // chosen path reads one.
  torch::Tensor positions = batch.position_ids;
  torch::Tensor mask2d;
  AttentionShape shape = AttentionShape::Causal;
  bool crossed = false;  // some query's keys reach past the sliding window
  bool padded = false;
  if (decode) {
    shape = AttentionShape::Decode;
    crossed = window && cache->read_length > *window;
  } else {
    mask2d = batch.attention_mask.defined() ? batch.attention_mask.to(torch::kInt64)
                                            : torch::ones({b, t}, torch::dtype(torch::kInt64).device(device));
    if (!positions.defined()) positions = position_ids_from_mask(mask2d);
    crossed = window && t > *window;
    // Without padding the mask is implied (causal). Padding only after each
    // row's tokens (what the caller knows from the host, without a device
    // sync) needs no mask either: causal attention never reaches a later pad
    // from a real token, and pad positions feed nothing. Only other padding,
    // packing or a crossed sliding window need more.
    const bool trailing = batch.padding_trails && !packed;
    // (A packed batch attends by documents whatever its padding: nothing to read.)
    padded = !trailing && !packed && !mask2d.all().item<bool>();
    if (packed) {
      const bool branching = batch.position_ids.defined() &&
                             (batch.branch_reach.defined() ? batch.branch_reach.numel() > 0 : true);
      shape = !branching && batch.segments.defined() ? AttentionShape::Documents : AttentionShape::Masked;
    } else if (padded) {
      shape = AttentionShape::Masked;
    }
  }
  // Context parallelism: each rank's query rows against every key, through
  // a mask of those rows (built below), whatever the rows' shape.
  if (context) shape = AttentionShape::Masked;
  const auto caps = attention_device(device, mask_dtype);
  auto plan_for = [&](AttentionShape sh, bool win) {
    AttentionCall call;
    call.shape = sh;
    call.window = win;
    call.grouped = config_.num_key_value_heads != config_.num_attention_heads;
    call.half = mask_dtype == torch::kBFloat16 || mask_dtype == torch::kHalf;
    call.head_dim = config_.head_dim;
    call.softcap = config_.attn_logit_softcapping.has_value();
    call.sinks = config_.attention_sinks;
    return plan_attention(call, caps);
  };
  // The last layer's queries start at `from`: from the bottom right where
  // nothing but causality masks, else the mask's rows.
  const auto last_shape = from > 0 ? (shape == AttentionShape::Causal ? AttentionShape::Tail : AttentionShape::Masked)
                                   : shape;
  const auto full_plan = plan_for(shape, false), sliding_plan = plan_for(shape, crossed);
  const auto last_full_plan = plan_for(last_shape, false), last_sliding_plan = plan_for(last_shape, crossed);

  torch::Tensor full_mask, sliding_mask;
  const bool want_full = full_plan.needs_mask || (from > 0 && last_full_plan.needs_mask);
  const bool want_sliding = window && (sliding_plan.needs_mask || (from > 0 && last_sliding_plan.needs_mask));
  if (decode) {
    // Each slot's token sits at its own position and sees its slot's keys
    // up to it (and, in a sliding layer, the window before it).
    positions = cache->positions.view({b, 1});
    if (want_full || want_sliding) {
      auto k = torch::arange(cache->read_length, torch::dtype(torch::kInt64).device(device)).view({1, -1});
      full_mask = k.le(positions);
      if (want_sliding) sliding_mask = full_mask.logical_and((positions - k).lt(*window)).view({b, 1, 1, -1});
      full_mask = want_full ? full_mask.view({b, 1, 1, -1}) : torch::Tensor();
    }
  } else if (want_full || want_sliding) {
    const auto& key_mask = mask2d;
    if (padded || packed) full_mask = build_attention_mask(key_mask, t, std::nullopt);
    if (want_sliding) sliding_mask = build_attention_mask(key_mask, t, window);
    if (packed) {
      // Block-diagonal: no attention across document boundaries (a query left
      // with no key sees itself, as in build_attention_mask).
      const auto& d = batch.document_ids;
      auto same = d.unsqueeze(2).eq(d.unsqueeze(1)).unsqueeze(1);
      auto diag = torch::eye(t, torch::dtype(torch::kBool).device(d.device())).view({1, 1, t, t});
      torch::Tensor branches;
      if (batch.position_ids.defined())
        branches = branch_mask_from_reach(
            batch.branch_reach.defined() ? batch.branch_reach : branch_reach(positions, d, mask2d), mask2d);
      if (branches.defined()) full_mask = full_mask.logical_and(branches);
      full_mask = self_if_alone(full_mask.logical_and(same), diag);
      if (sliding_mask.defined()) {
        if (branches.defined()) {
          // Across branches slots and positions differ: the window counts positions.
          auto dist = positions.unsqueeze(2) - positions.unsqueeze(1);
          sliding_mask = self_if_alone(full_mask.logical_and(dist.lt(*window).unsqueeze(1)), diag);
        } else {
          sliding_mask = self_if_alone(sliding_mask.logical_and(same), diag);
        }
      }
    }
  }

  // Sequence parallelism: this rank's share of the positions, the rows
  // padded to a whole number of shares (pad positions: the last id and
  // position again, read by no real query). `order`: the padded rows'
  // positions as the ranks' shares follow one another.
  int64_t share = t, padded_len = t;
  torch::Tensor order, mine_index;
  auto mine = [&](const torch::Tensor& x) {
    if (!sp) return x;
    auto whole = x;
    if (padded_len > t) {
      auto last = x.narrow(1, t - 1, 1);
      std::vector<int64_t> reps(static_cast<size_t>(x.dim()), 1);
      reps[1] = padded_len - t;
      whole = torch::cat({x, last.repeat(reps)}, 1);
    }
    return context ? whole.index_select(1, mine_index.to(x.device())) : whole.narrow(1, share * sp->rank(), share);
  };
  if (sp) {
    const int64_t n = sp->size();
    auto i64 = torch::dtype(torch::kInt64).device(device);
    if (context) {
      // Chunks r and 2n - 1 - r: every rank gets as many causal pairs.
      const int64_t chunk = (t + 2 * n - 1) / (2 * n);
      share = 2 * chunk;
      padded_len = 2 * n * chunk;
      std::vector<torch::Tensor> parts;
      for (int64_t q = 0; q < n; ++q) {
        parts.push_back(torch::arange(q * chunk, (q + 1) * chunk, i64));
        parts.push_back(torch::arange((2 * n - 1 - q) * chunk, (2 * n - q) * chunk, i64));
      }
      order = torch::cat(parts);
    } else {
      share = (t + n - 1) / n;
      padded_len = n * share;
      order = torch::arange(padded_len, i64);
    }
    mine_index = order.narrow(0, share * sp->rank(), share);
  }
  auto embed = [&] { return embed_tokens->forward(mine(ids)); };
  auto x = sharding_ ? sharding_->embedding(embed) : embed();
  if (config_.scale_embeddings) {
    // Gemma: times sqrt(hidden_size), rounded to the embeddings' dtype first
    // (on the host: no copy to the device inside a captured decode step).
    const auto root = static_cast<float>(std::sqrt(static_cast<double>(config_.hidden_size)));
    double normalizer = root;
    if (x.scalar_type() == torch::kBFloat16) normalizer = static_cast<float>(c10::BFloat16(root));
    if (x.scalar_type() == torch::kHalf) normalizer = static_cast<float>(c10::Half(root));
    x = x * normalizer;
  }
  if (context) {
    // This rank's rows of each mask, their columns in the gathered keys'
    // order; without a mask, causal by index (padding, if any, trails, and
    // a real query never reaches it). Pad rows see themselves.
    const auto rows = mine_index.view({-1, 1}), cols = order.view({1, -1});
    auto rows_of = [&](const torch::Tensor& m) {
      if (!m.defined()) return cols.le(rows).view({1, 1, share, padded_len});
      auto big = torch::zeros({m.size(0), 1, padded_len, padded_len}, m.options().dtype(torch::kBool));
      big.narrow(2, 0, t).narrow(3, 0, t).copy_(m);
      if (padded_len > t) big.narrow(2, t, padded_len - t).narrow(3, t, padded_len - t).copy_(
          torch::eye(padded_len - t, big.options()).view({1, 1, padded_len - t, padded_len - t}));
      return big.index_select(2, mine_index).index_select(3, order);
    };
    full_mask = rows_of(full_mask);
    if (window) sliding_mask = sliding_mask.defined() ? rows_of(sliding_mask)
                                                      : full_mask.logical_and((rows - cols).lt(*window).view(
                                                            {1, 1, share, padded_len}));
  }
  // SDPA turns a boolean mask into an additive one of the query's dtype on
  // every call, and each layer's backward keeps its own copy; one additive
  // mask for all layers gives the same numbers with one conversion and one copy.
  auto additive = [&](const torch::Tensor& m) { return additive_mask(m, mask_dtype); };
  full_mask = additive(full_mask);
  sliding_mask = additive(sliding_mask);

  torch::Tensor decode_queries, decode_keys, decode_lengths;  // FlashDecode's, made once per forward
  auto layer_attention = [&](const AttentionPlan& plan, bool sliding, bool last) {
    LayerAttention a;
    a.path = plan.path;
    a.query_start = last ? from : 0;
    if (sliding && crossed) a.window = window;
    if (plan.path == AttentionPath::FlashDocuments) {
      a.cu_seqlens = batch.segments.to(device);
      a.max_seqlen = batch.longest_segment;
    }
    if (plan.path == AttentionPath::FlashDecode) {
      // One query per slot; slot s's keys sit at [s * capacity, + its position].
      if (!decode_lengths.defined()) {
        auto i32 = torch::dtype(torch::kInt32).device(device);
        decode_queries = torch::arange(b + 1, i32);
        decode_keys = decode_queries * cache->capacity();
        decode_lengths = (cache->positions + 1).to(torch::kInt32);
      }
      a.cu_seqlens = decode_queries;
      a.cu_seqlens_k = decode_keys;
      a.seqused_k = decode_lengths;
    }
    if (plan.needs_mask) {
      const auto& m = sliding ? sliding_mask : full_mask;
      if (!last) {
        a.mask = m;
      } else if (m.defined()) {
        a.mask = m.narrow(2, from, t - from);
      } else {
        // Causal rows offset by `from` (SDPA's own causal flag aligns
        // queries to the first key).
        auto q = torch::arange(from, t, torch::dtype(torch::kInt64).device(device)).view({-1, 1});
        auto k = torch::arange(t, torch::dtype(torch::kInt64).device(device)).view({1, -1});
        a.mask = additive(k.le(q).view({1, 1, t - from, t}));
      }
    }
    return a;
  };
  LayerAttention full = layer_attention(full_plan, false, false);
  if (sp) {
    full.sp = sp;
    full.length = t;
  }
  if (balanced) {
    full.balance = true;
    if (batch.attention_mask.defined()) full.router_rows = batch.attention_mask.reshape(-1);
  }
  LayerAttention sliding = window ? layer_attention(sliding_plan, true, false) : full;
  sliding.sp = full.sp;
  sliding.length = full.length;
  sliding.balance = full.balance;
  sliding.router_rows = full.router_rows;
  LayerAttention last_full, last_sliding;
  if (from > 0) {
    last_full = layer_attention(last_full_plan, false, true);
    if (window) last_sliding = layer_attention(last_sliding_plan, true, true);
  }
  attention_paths_ = {full.path};
  if (window) attention_paths_.push_back(sliding.path);
  if (from > 0) {
    attention_paths_.push_back(last_full.path);
    if (window) attention_paths_.push_back(last_sliding.path);
  }

  // Rotary tables for this rank's positions (all of them without sequence
  // parallelism).
  auto [cos, sin] = rope_->tables(mine(positions), x.scalar_type());
  torch::Tensor local_cos, local_sin;
  if (sliding_rope_) std::tie(local_cos, local_sin) = sliding_rope_->tables(mine(positions), x.scalar_type());
  for (size_t i = 0; i < layers->size(); ++i) {
    auto& layer = *layers[i]->as<DecoderLayerImpl>();
    const bool last = from > 0 && i + 1 == layers->size();
    const auto& attn = last ? (layer.sliding ? last_sliding : last_full) : (layer.sliding ? sliding : full);
    const bool local = sliding_rope_ && layer.local_rope;
    const auto& layer_cos = local ? local_cos : cos;
    const auto& layer_sin = local ? local_sin : sin;
    auto run = [&] {
      return run_layer ? run_layer(layer, x, layer_cos, layer_sin, attn, cache)
                       : layer.forward(x, layer_cos, layer_sin, attn, cache);
    };
    x = sharding_ ? sharding_->layer(layer, x, run) : run();
  }
  if (sp) {
    // Every rank's positions, the padding dropped; normed per position first.
    x = sp->gather(norm->forward(x), 1);
    if (context) x = x.index_select(1, torch::argsort(order));
    x = x.narrow(1, 0, t);
    return batch.outputs_from ? x.narrow(1, batch.outputs_from, t - batch.outputs_from) : x;
  }
  if (from != batch.outputs_from) x = x.narrow(1, batch.outputs_from, t - batch.outputs_from);
  return norm->forward(x);
}

LanguageModelImpl::LanguageModelImpl(const ModelConfig& c, HeadKind head) : config_(c), head_kind_(head) {
  model = register_module("model", DecoderModel(c));
  if (head == HeadKind::CausalLM) {
    if (!c.tie_word_embeddings) lm_head = register_module("lm_head", linear(c.hidden_size, c.vocab_size, false));
  } else {
    score = register_module("score", linear(c.hidden_size, c.num_labels, false));
  }
}

torch::Tensor LanguageModelImpl::hidden_states(const Batch& batch, KVCache* cache) { return model->forward(batch, cache); }

torch::Tensor LanguageModelImpl::head_weight() const {
  if (head_kind_ == HeadKind::SequenceClassification) return score->weight;
  return lm_head ? lm_head->weight : model->embed_tokens->weight;
}

std::vector<torch::Tensor> LanguageModelImpl::with_head(const torch::Tensor& input,
                                                        const std::function<std::vector<torch::Tensor>()>& compute) {
  auto* hooks = model->sharding_hooks();
  return hooks ? hooks->head(input, compute) : compute();
}

torch::Tensor LanguageModelImpl::head(const torch::Tensor& hidden) {
  auto out = with_head(hidden, [&] { return std::vector<torch::Tensor>{torch::matmul(hidden, head_weight().t())}; }).at(0);
  if (head_kind_ == HeadKind::CausalLM && config_.final_logit_softcapping) {
    const double cap = *config_.final_logit_softcapping;
    out = torch::tanh(out / cap) * cap;
  }
  return out;
}

torch::Tensor pool_last_non_pad(const torch::Tensor& scores, const torch::Tensor& input_ids,
                                std::optional<int64_t> pad_token_id) {
  const int64_t b = input_ids.size(0), t = input_ids.size(1);
  torch::Tensor last;
  if (!pad_token_id) {
    if (b != 1)
      fail_input("a sequence-classification model needs pad_token_id in its config.json to find the last token of "
                 "each row of a padded batch");
    last = torch::full({1}, t - 1, torch::kInt64);
  } else {
    auto non_pad = (input_ids != *pad_token_id).to(torch::kInt64);
    auto idx = torch::arange(t, torch::dtype(torch::kInt64).device(input_ids.device()));
    last = (idx * non_pad).argmax(-1);
  }
  auto rows = torch::arange(b, torch::dtype(torch::kInt64).device(scores.device()));
  return scores.index({rows, last.to(scores.device())});
}

std::vector<std::string> checkpoint_names(LanguageModelImpl& m) {
  std::vector<std::string> out;
  for (const auto& p : m.named_parameters(true)) out.push_back(p.key());
  return out;
}

void load_parameters(LanguageModelImpl& m, const TensorSource& get, const std::vector<std::string>& available,
                     const std::string& source, torch::Dtype dtype, bool defer_casts) {
  // Each parameter takes its loaded value whole (set_data): nothing is
  // converted or allocated for the model before its values are read.
  torch::NoGradGuard no_grad;
  std::set<std::string> used;
  for (auto& p : m.named_parameters(true)) {
    const std::string& name = p.key();
    auto t = get(name);
    // Mixture of experts: the published per-expert layout.
    if (!t) {
      std::vector<std::string> read;
      t = read_published_experts(m.config(), name, get, source, &read);
      used.insert(read.begin(), read.end());
    }
    if (!t) {
      if (name == "score.weight") {
        // A reward or value model started from a language model: the head is
        // new, initialised as transformers does (normal, std 0.02).
        log::warn("{}: no `score.weight`; the score head starts from random values (as a new reward/value head)",
                  source);
        p.value().set_data(torch::empty(p.value().sizes(), p.value().options().dtype(dtype)));
        p.value().normal_(0.0, 0.02);
        continue;
      }
      fail_input("{}: tensor `{}` is missing (a {} model with {} layers needs it)", source, name,
                 m.config().model_type, m.config().num_hidden_layers);
    }
    if (t->sizes() != p.value().sizes())
      fail_input("{}: tensor `{}` has shape {} but the model's config.json implies {}", source, name,
                 fmt::format("{}", fmt::join(t->sizes(), "x")), fmt::format("{}", fmt::join(p.value().sizes(), "x")));
    const bool viewable = t->is_contiguous() && t->device().is_cpu();
    if (viewable && (t->scalar_type() == dtype || defer_casts)) {
      // Zero copy: the parameter takes the checkpoint's (memory-mapped,
      // copy-on-write) storage; training writes copy only the pages it
      // touches, and trlx's writers replace files rather than rewrite them.
      p.value().set_data(*t);
      if (t->scalar_type() != dtype) m.defer_cast(p.value(), dtype);
    } else {
      p.value().set_data(t->contiguous().to(dtype));
    }
    used.insert(name);
  }
  size_t unused = 0;
  std::string example;
  for (const auto& n : available) {
    if (used.count(n)) continue;
    // A tied checkpoint may still carry lm_head.weight; a reward model loaded
    // as a language model carries score.weight.
    ++unused;
    if (example.empty()) example = n;
  }
  if (unused) log::warn("{}: {} tensor(s) not used by the model (e.g. `{}`)", source, unused, example);
}

torch::Dtype LanguageModelImpl::placed_dtype(const torch::Tensor& param) const {
  auto it = deferred_.find(param.unsafeGetTensorImpl());
  return it == deferred_.end() ? param.scalar_type() : it->second;
}

void LanguageModelImpl::apply_deferred_casts() {
  torch::NoGradGuard no_grad;
  for (auto& p : parameters(true)) {
    auto it = deferred_.find(p.unsafeGetTensorImpl());
    if (it != deferred_.end()) p.set_data(p.detach().to(it->second));
  }
  deferred_.clear();
}

void disable_dropout(torch::nn::Module& m) {
  for (const auto& module : m.modules(/*include_self=*/true))
    if (auto* linear = dynamic_cast<LinearImpl*>(module.get())) linear->lora_dropout = 0.0;
}

}  // namespace trlx::model
