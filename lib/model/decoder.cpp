#include "model/decoder.hpp"

#include <ATen/autocast_mode.h>

#include <algorithm>
#include <cmath>
#include <limits>
#include <set>

#include <fmt/ranges.h>

#include "core/error.hpp"
#include "core/log.hpp"

namespace trlx::model {

namespace F = torch::nn::functional;

// ---------------------------------------------------------------- norms, rope, masks

RMSNormImpl::RMSNormImpl(int64_t dim, double eps) : eps_(eps) {
  weight = register_parameter("weight", torch::ones({dim}));
}

torch::Tensor RMSNormImpl::forward(const torch::Tensor& x) {
  // Computed in fp32 whatever the weights' dtype, then cast back before the
  // scale, as the reference does: bf16 runs match it.
  auto h = x.to(torch::kFloat32);
  auto var = h.pow(2).mean(-1, /*keepdim=*/true);
  h = h * torch::rsqrt(var + eps_);
  return weight * h.to(x.scalar_type());
}

torch::Tensor rope_inverse_frequencies(const ModelConfig& c) {
  const int64_t dim = c.head_dim;
  auto exponents = torch::arange(0, dim, 2, torch::kInt64).to(torch::kFloat32) / static_cast<double>(dim);
  auto inv_freq = 1.0 / torch::pow(torch::tensor(c.rope.theta, torch::kFloat32), exponents);
  const auto& r = c.rope;
  if (r.type == "linear") return inv_freq / r.factor;
  if (r.type == "llama3") {
    const double old_len = static_cast<double>(r.original_max_position_embeddings);
    const double low_wavelen = old_len / r.low_freq_factor;
    const double high_wavelen = old_len / r.high_freq_factor;
    auto wavelen = 2.0 * M_PI / inv_freq;
    auto scaled = torch::where(wavelen > low_wavelen, inv_freq / r.factor, inv_freq);
    auto smooth = (old_len / wavelen - r.low_freq_factor) / (r.high_freq_factor - r.low_freq_factor);
    auto smoothed = (1 - smooth) * scaled / r.factor + smooth * scaled;
    auto medium = torch::logical_not(wavelen < high_wavelen).logical_and(torch::logical_not(wavelen > low_wavelen));
    return torch::where(medium, smoothed, scaled);
  }
  return inv_freq;
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
  return allowed.logical_or((k == q).view({1, 1, num_queries, tk}));
}

torch::Tensor position_ids_from_mask(const torch::Tensor& attention_mask) {
  auto m = attention_mask.to(torch::kInt64);
  return (m.cumsum(-1) - 1).masked_fill(m == 0, 1);
}

torch::Tensor branch_mask(const torch::Tensor& position_ids, const torch::Tensor& document_ids,
                          const torch::Tensor& key_mask) {
  const int64_t b = position_ids.size(0), t = position_ids.size(1);
  auto pos_t = position_ids.to(torch::kCPU, torch::kInt64).contiguous();
  auto doc_t = document_ids.to(torch::kCPU, torch::kInt64).contiguous();
  auto real_t = key_mask.to(torch::kCPU, torch::kBool).contiguous();
  const auto* pos = pos_t.data_ptr<int64_t>();
  const auto* doc = doc_t.data_ptr<int64_t>();
  const auto* real = real_t.data_ptr<bool>();
  bool branches = false;
  for (int64_t r = 0; r < b && !branches; ++r)
    for (int64_t i = r * t + 1; i < (r + 1) * t; ++i)
      if (real[i] && real[i - 1] && doc[i] == doc[i - 1] && pos[i] <= pos[i - 1]) {
        branches = true;
        break;
      }
  if (!branches) return {};
  auto out = torch::zeros({b, 1, t, t}, torch::kBool);
  auto* o = out.data_ptr<bool>();
  for (int64_t r = 0; r < b; ++r) {
    const int64_t* p = pos + r * t;
    const bool* m = real + r * t;
    for (int64_t q = 0; q < t; ++q) {
      bool* row = o + (r * t + q) * t;
      if (!m[q]) {  // padding: left to the other masks
        std::fill(row, row + q + 1, true);
        continue;
      }
      // Walking back from q: a key is visible while every real position
      // between it and q is above its own; a restart at or below it hides it.
      row[q] = true;
      int64_t lowest = p[q];
      for (int64_t k = q - 1; k >= 0 && lowest > 0; --k) {
        if (!m[k]) continue;
        row[k] = p[k] < lowest;
        lowest = std::min(lowest, p[k]);
      }
    }
  }
  return out.to(key_mask.device());
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

torch::Tensor LinearImpl::forward_with_lora(const torch::Tensor& x) {
  auto y = torch::linear(x, weight, bias);
  // The adapter may keep a wider dtype than the base (fp32 adapters on a bf16
  // model): its input is cast to it and its output back.
  auto h = x.to(lora_A->weight.scalar_type());
  if (lora_dropout > 0.0 && is_training()) h = torch::dropout(h, lora_dropout, /*train=*/true);
  auto delta = torch::linear(torch::linear(h, lora_A->weight), lora_B->weight) * lora_scale;
  return y + delta.to(y.scalar_type());
}

EmbeddingImpl::EmbeddingImpl(int64_t num, int64_t dim, std::optional<int64_t> padding_idx) {
  weight = register_parameter("weight", torch::empty({num, dim}));
  if (padding_idx && *padding_idx >= 0 && *padding_idx < num) padding_idx_ = *padding_idx;
}

AttentionImpl::AttentionImpl(const ModelConfig& c, int64_t layer)
    : layer_(layer), heads_(c.num_attention_heads), kv_heads_(c.num_key_value_heads), head_dim_(c.head_dim) {
  const bool qkv_bias = c.attention_bias || c.qkv_bias;
  q_proj = register_module("q_proj", linear(c.hidden_size, heads_ * head_dim_, qkv_bias));
  k_proj = register_module("k_proj", linear(c.hidden_size, kv_heads_ * head_dim_, qkv_bias));
  v_proj = register_module("v_proj", linear(c.hidden_size, kv_heads_ * head_dim_, qkv_bias));
  o_proj = register_module("o_proj", linear(heads_ * head_dim_, c.hidden_size, c.attention_bias));
  if (c.qk_norm) {
    q_norm = register_module("q_norm", RMSNorm(head_dim_, c.rms_norm_eps));
    k_norm = register_module("k_norm", RMSNorm(head_dim_, c.rms_norm_eps));
  }
}

torch::Tensor AttentionImpl::forward(const torch::Tensor& x, const torch::Tensor& cos, const torch::Tensor& sin,
                                     const torch::Tensor& mask, KVCache* cache) {
  const int64_t b = x.size(0), t = x.size(1);
  auto q = q_proj->forward(x).view({b, t, heads_, head_dim_});
  auto k = k_proj->forward(x).view({b, t, kv_heads_, head_dim_});
  auto v = v_proj->forward(x).view({b, t, kv_heads_, head_dim_}).transpose(1, 2);
  if (q_norm) {
    q = q_norm->forward(q);
    k = k_norm->forward(k);
  }
  q = q.transpose(1, 2);
  k = k.transpose(1, 2);
  auto c = cos.unsqueeze(1), s = sin.unsqueeze(1);
  q = q * c + rotate_half(q) * s;
  k = k * c + rotate_half(k) * s;
  if (cache) {
    auto& ck = cache->keys[static_cast<size_t>(layer_)];
    auto& cv = cache->values[static_cast<size_t>(layer_)];
    if (!ck.defined()) {
      ck = torch::zeros({cache->num_slots(), kv_heads_, cache->capacity(), head_dim_}, k.options());
      cv = torch::zeros_like(ck);
    }
    if (cache->mode == KVCache::Mode::Prefill) {
      // The new sequences attend to themselves (causal, padding trails);
      // their keys and values go to their slots for the decode steps.
      if (cache->slots.numel() > 0) {
        ck.narrow(2, 0, t).index_copy_(0, cache->slots, k.index_select(0, cache->sources).to(ck.scalar_type()));
        cv.narrow(2, 0, t).index_copy_(0, cache->slots, v.index_select(0, cache->sources).to(cv.scalar_type()));
      }
    } else {
      auto at = cache->positions.view({b, 1, 1, 1}).expand({b, kv_heads_, 1, head_dim_});
      ck.scatter_(2, at, k.to(ck.scalar_type()));
      cv.scatter_(2, at, v.to(cv.scalar_type()));
      k = ck.narrow(2, 0, cache->read_length);
      v = cv.narrow(2, 0, cache->read_length);
    }
  }
  // Grouped-query attention: SDPA shares each K/V head among its query
  // heads itself (no repeated copies of K and V).
  const bool gqa = kv_heads_ != heads_;
  torch::Tensor out;
  if (mask.defined()) {
    // The model passes an additive mask made once per forward in the
    // attention's compute dtype; a query of another dtype gets it cast.
    const bool cast = mask.scalar_type() != torch::kBool && mask.scalar_type() != q.scalar_type();
    out = at::scaled_dot_product_attention(q, k, v, cast ? mask.to(q.scalar_type()) : mask, 0.0, false, std::nullopt,
                                           gqa);
  } else {
    // No mask: causal over the same positions.
    const bool causal = q.size(2) == k.size(2);
    out = at::scaled_dot_product_attention(q, k, v, /*attn_mask=*/{}, /*dropout_p=*/0.0, causal, std::nullopt, gqa);
  }
  out = out.transpose(1, 2).reshape({b, t, heads_ * head_dim_});
  return o_proj->forward(out);
}

MLPImpl::MLPImpl(const ModelConfig& c) {
  gate_proj = register_module("gate_proj", linear(c.hidden_size, c.intermediate_size, c.mlp_bias));
  up_proj = register_module("up_proj", linear(c.hidden_size, c.intermediate_size, c.mlp_bias));
  down_proj = register_module("down_proj", linear(c.intermediate_size, c.hidden_size, c.mlp_bias));
}

torch::Tensor MLPImpl::forward(const torch::Tensor& x) {
  return down_proj->forward(F::silu(gate_proj->forward(x)) * up_proj->forward(x));
}

DecoderLayerImpl::DecoderLayerImpl(const ModelConfig& c, int64_t layer) {
  self_attn = register_module("self_attn", Attention(c, layer));
  mlp = register_module("mlp", MLP(c));
  input_layernorm = register_module("input_layernorm", RMSNorm(c.hidden_size, c.rms_norm_eps));
  post_attention_layernorm = register_module("post_attention_layernorm", RMSNorm(c.hidden_size, c.rms_norm_eps));
  sliding = c.sliding_window && c.sliding_layers[static_cast<size_t>(layer)];
}

torch::Tensor DecoderLayerImpl::forward(const torch::Tensor& x, const torch::Tensor& cos, const torch::Tensor& sin,
                                        const torch::Tensor& mask, KVCache* cache) {
  auto h = x + self_attn->forward(input_layernorm->forward(x), cos, sin, mask, cache);
  return h + mlp->forward(post_attention_layernorm->forward(h));
}

// ---------------------------------------------------------------- model

DecoderModelImpl::DecoderModelImpl(const ModelConfig& c) : config_(c) {
  embed_tokens = register_module("embed_tokens", Embedding(c.vocab_size, c.hidden_size, c.pad_token_id));
  layers = register_module("layers", torch::nn::ModuleList());
  for (int64_t i = 0; i < c.num_hidden_layers; ++i) layers->push_back(DecoderLayer(c, i));
  norm = register_module("norm", RMSNorm(c.hidden_size, c.rms_norm_eps));
  inv_freq_ = register_buffer("inv_freq", rope_inverse_frequencies(c));
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
  torch::Tensor positions = batch.position_ids;
  torch::Tensor full_mask, sliding_mask;
  if (decode) {
    // Each slot's token sits at its own position and sees its slot's keys
    // up to it (and, in a sliding layer, the window before it).
    positions = cache->positions.view({b, 1});
    auto k = torch::arange(cache->read_length, torch::dtype(torch::kInt64).device(device)).view({1, -1});
    full_mask = k.le(positions);
    if (config_.sliding_window) sliding_mask = full_mask.logical_and((positions - k).lt(*config_.sliding_window));
    full_mask = full_mask.view({b, 1, 1, -1});
    if (sliding_mask.defined()) sliding_mask = sliding_mask.view({b, 1, 1, -1});
  } else {
    const auto mask2d = batch.attention_mask.defined() ? batch.attention_mask.to(torch::kInt64)
                                                     : torch::ones({b, t}, torch::dtype(torch::kInt64).device(device));
    if (!positions.defined()) positions = position_ids_from_mask(mask2d);
    const auto& key_mask = mask2d;
    // Without padding the mask is implied (causal). Padding only after each
    // row's tokens (what the caller knows from the host, without a device
    // sync) needs no mask either: causal attention never reaches a later pad
    // from a real token, and pad positions feed nothing. Only other padding
    // or a sliding window need an explicit mask.
    const bool trailing = batch.padding_trails && !packed;
    const bool padded = !trailing && !key_mask.all().item<bool>();
    if (padded || packed) full_mask = build_attention_mask(key_mask, t, std::nullopt);
    if (config_.sliding_window) sliding_mask = build_attention_mask(key_mask, t, config_.sliding_window);
    if (packed) {
      // Block-diagonal: no attention across document boundaries. The diagonal
      // stays allowed (build_attention_mask's guarantee against empty rows).
      const auto& d = batch.document_ids;
      auto same = d.unsqueeze(2).eq(d.unsqueeze(1)).unsqueeze(1);
      auto diag = torch::eye(t, torch::dtype(torch::kBool).device(d.device())).view({1, 1, t, t});
      auto branches = batch.position_ids.defined() ? branch_mask(positions, d, mask2d) : torch::Tensor();
      if (branches.defined()) full_mask = full_mask.logical_and(branches);
      full_mask = full_mask.logical_and(same).logical_or(diag);
      if (sliding_mask.defined()) {
        if (branches.defined()) {
          // Across branches slots and positions differ: the window counts positions.
          auto dist = positions.unsqueeze(2) - positions.unsqueeze(1);
          sliding_mask = full_mask.logical_and(dist.lt(*config_.sliding_window).unsqueeze(1));
        } else {
          sliding_mask = sliding_mask.logical_and(same).logical_or(diag);
        }
      }
    }
  }

  auto embed = [&] { return embed_tokens->forward(ids); };
  auto x = sharding_ ? sharding_->embedding(embed) : embed();
  // SDPA turns a boolean mask into an additive one of the query's dtype on
  // every call, and each layer's backward keeps its own copy; one additive
  // mask for all layers gives the same numbers with one conversion and one copy.
  // In the dtype attention computes in: autocast's (bf16) when it is on.
  const auto mask_dtype = at::autocast::is_autocast_enabled(device.type())
                              ? at::autocast::get_autocast_dtype(device.type())
                              : x.scalar_type();
  auto additive = [&](const torch::Tensor& m) {
    if (!m.defined()) return m;
    return torch::zeros(m.sizes(), x.options().dtype(mask_dtype))
        .masked_fill_(m.logical_not(), -std::numeric_limits<double>::infinity());
  };
  full_mask = additive(full_mask);
  sliding_mask = additive(sliding_mask);
  auto freqs = positions.to(torch::kFloat32).unsqueeze(-1) * inv_freq_.to(device).view({1, 1, -1});
  auto emb = torch::cat({freqs, freqs}, -1);
  auto cos = emb.cos().to(x.scalar_type()), sin = emb.sin().to(x.scalar_type());
  for (const auto& m : *layers) {
    auto& layer = *m->as<DecoderLayerImpl>();
    const auto& mask = layer.sliding ? sliding_mask : full_mask;
    auto run = [&] {
      return run_layer ? run_layer(layer, x, cos, sin, mask, cache) : layer.forward(x, cos, sin, mask, cache);
    };
    x = sharding_ ? sharding_->layer(layer, x, run) : run();
  }
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
  return with_head(hidden, [&] { return std::vector<torch::Tensor>{torch::matmul(hidden, head_weight().t())}; }).at(0);
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
                     const std::string& source, torch::Dtype dtype) {
  m.to(dtype);
  torch::NoGradGuard no_grad;
  std::set<std::string> used;
  for (auto& p : m.named_parameters(true)) {
    const std::string& name = p.key();
    auto t = get(name);
    if (!t) {
      if (name == "score.weight") {
        // A reward or value model started from a language model: the head is
        // new, initialised as transformers does (normal, std 0.02).
        log::warn("{}: no `score.weight`; the score head starts from random values (as a new reward/value head)",
                  source);
        p.value().normal_(0.0, 0.02);
        continue;
      }
      fail_input("{}: tensor `{}` is missing (a {} model with {} layers needs it)", source, name,
                 m.config().model_type, m.config().num_hidden_layers);
    }
    if (t->sizes() != p.value().sizes())
      fail_input("{}: tensor `{}` has shape {} but the model's config.json implies {}", source, name,
                 fmt::format("{}", fmt::join(t->sizes(), "x")), fmt::format("{}", fmt::join(p.value().sizes(), "x")));
    if (t->scalar_type() == p.value().scalar_type() && t->is_contiguous() && p.value().device().is_cpu()) {
      // Zero copy: the parameter takes the checkpoint's (memory-mapped,
      // copy-on-write) storage; training writes copy only the pages it
      // touches, and trlx's writers replace files rather than rewrite them.
      p.value().set_data(*t);
    } else {
      p.value().copy_(*t);
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

void disable_dropout(torch::nn::Module& m) {
  for (const auto& module : m.modules(/*include_self=*/true))
    if (auto* linear = dynamic_cast<LinearImpl*>(module.get())) linear->lora_dropout = 0.0;
}

}  // namespace trlx::model
