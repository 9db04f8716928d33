// Mixture-of-experts blocks: router, grouped experts, load balancing, checkpoint layouts.
#include "model/moe.hpp"

#include <ATen/autocast_mode.h>

#include <fmt/format.h>
#include <fmt/ranges.h>

#include <array>
#include <limits>
#include <map>
#include <mutex>

#include "core/error.hpp"

namespace trlx::model {

// ---------------------------------------------------------------- load balancing

void RouterBalance::begin() {
  collecting_ = true;
  active_ = true;
  counts_ = probs_ = rows_ = per_unit_ = gradient_ = torch::Tensor();
}

torch::Tensor RouterBalance::end() {
  if (!collecting_) return {};
  collecting_ = false;
  if (!counts_.defined()) {
    active_ = false;
    return {};
  }
  const double experts = static_cast<double>(counts_.size(0));
  const auto d = rows_.clamp_min(1e-12);
  per_unit_ = counts_ * (experts / (d * d));
  return ((counts_ / d) * (probs_ / d)).sum() * experts;
}

void RouterBalance::set_weight(double weight) {
  if (per_unit_.defined()) gradient_ = per_unit_ * weight;
}

void RouterBalance::clear() {
  collecting_ = active_ = false;
  counts_ = probs_ = rows_ = per_unit_ = gradient_ = torch::Tensor();
}

namespace {

// Identity on the router logits whose backward adds the balance loss's
// gradient, rows[r] * p[r, j] * (g[j] - sum_e p[r, e] g[e]) (through the
// softmax over all experts), with g read from the balance when the backward
// runs (after every layer has routed).
class BalanceTap : public torch::autograd::Function<BalanceTap> {
 public:
  static torch::Tensor forward(torch::autograd::AutogradContext* ctx, const torch::Tensor& logits,
                               const torch::Tensor& probs, const torch::Tensor& rows, int64_t balance) {
    ctx->saved_data["balance"] = balance;
    ctx->saved_data["probs"] = probs;
    ctx->saved_data["has_rows"] = rows.defined();
    if (rows.defined()) ctx->saved_data["rows"] = rows;
    return logits.clone();
  }
  static torch::autograd::variable_list backward(torch::autograd::AutogradContext* ctx,
                                                 torch::autograd::variable_list grads) {
    const auto* b = reinterpret_cast<const RouterBalance*>(ctx->saved_data["balance"].toInt());
    auto g = grads.at(0);
    const auto add = b->gradient();
    if (add.defined()) {
      const auto p = ctx->saved_data["probs"].toTensor();
      auto extra = p * (add.unsqueeze(0) - (p * add.unsqueeze(0)).sum(1, /*keepdim=*/true));
      if (ctx->saved_data["has_rows"].toBool())
        extra = ctx->saved_data["rows"].toTensor().to(p.scalar_type()).unsqueeze(1) * extra;
      if (g.defined()) extra = extra.to(g.scalar_type());
      g = g.defined() ? g + extra : extra;
    }
    return {g, torch::Tensor(), torch::Tensor(), torch::Tensor()};
  }
};

}  // namespace

torch::Tensor RouterBalance::route(const torch::Tensor& logits, const torch::Tensor& probs, const torch::Tensor& chosen,
                                   const torch::Tensor& rows) {
  if (collecting_) {
    torch::NoGradGuard no_grad;
    const int64_t experts = probs.size(1), k = chosen.size(1);
    const auto p = probs.detach();
    const auto w = rows.defined() ? rows.to(p.device(), p.scalar_type())
                                  : torch::ones({p.size(0)}, p.options());
    auto counts = torch::zeros({experts}, p.options()).index_add_(0, chosen.reshape(-1), w.repeat_interleave(k));
    auto sums = (p * w.unsqueeze(1)).sum(0);
    auto d = w.sum();
    counts_ = counts_.defined() ? counts_ + counts : counts;
    probs_ = probs_.defined() ? probs_ + sums : sums;
    rows_ = rows_.defined() ? rows_ + d : d;
  }
  if (!active_ || !torch::GradMode::is_enabled() || !logits.requires_grad()) return logits;
  return BalanceTap::apply(logits, probs.detach(), rows.defined() ? rows.detach() : torch::Tensor(),
                           reinterpret_cast<int64_t>(this));
}

// ---------------------------------------------------------------- grouped products

namespace {

std::mutex native_mutex;
std::map<std::pair<int, int>, bool> native_fails;  // (device type, dtype) where _grouped_mm threw

// a [M, K] rows by group, b [E, K, N] -> [M, N]; or a [N, M] columns by
// group, b [M, K] rows by group -> [E, N, K]. One product per group.
torch::Tensor looped_mm(const torch::Tensor& a, const torch::Tensor& b, const torch::Tensor& offsets) {
  const auto ends_t = offsets.to(torch::kCPU, torch::kInt64).contiguous();
  const auto* ends = ends_t.data_ptr<int64_t>();
  const int64_t groups = ends_t.numel();
  if (b.dim() == 3) {
    auto out = torch::empty({a.size(0), b.size(2)}, a.options());
    int64_t start = 0;
    for (int64_t e = 0; e < groups; ++e) {
      const int64_t n = ends[e] - start;
      if (n > 0) {
        auto rows = out.narrow(0, start, n);
        at::mm_out(rows, a.narrow(0, start, n), b[e]);
      }
      start = ends[e];
    }
    return out;
  }
  auto out = torch::zeros({groups, a.size(0), b.size(1)}, a.options());
  int64_t start = 0;
  for (int64_t e = 0; e < groups; ++e) {
    const int64_t n = ends[e] - start;
    if (n > 0) {
      auto slab = out[e];
      at::mm_out(slab, a.narrow(1, start, n), b.narrow(0, start, n));
    }
    start = ends[e];
  }
  return out;
}

// LibTorch's grouped matrix multiply where the device takes it for this
// dtype (the CPU always; a GPU for bf16 on recent architectures), else one
// product per group.
torch::Tensor grouped_mm(const torch::Tensor& a, const torch::Tensor& b, const torch::Tensor& offsets) {
  const auto key = std::make_pair(static_cast<int>(a.device().type()), static_cast<int>(a.scalar_type()));
  bool native = true;
  {
    std::lock_guard<std::mutex> lock(native_mutex);
    native = !native_fails.count(key);
  }
  if (native) {
    try {
      return at::_grouped_mm(a, b, offsets);
    } catch (const c10::Error&) {
      std::lock_guard<std::mutex> lock(native_mutex);
      native_fails[key] = true;
    }
  }
  return looped_mm(a, b, offsets);
}

class GroupedLinear : public torch::autograd::Function<GroupedLinear> {
 public:
  static torch::Tensor forward(torch::autograd::AutogradContext* ctx, const torch::Tensor& x,
                               const torch::Tensor& weight, const torch::Tensor& offsets) {
    ctx->save_for_backward({x, weight, offsets});
    return grouped_mm(x, weight.transpose(1, 2), offsets);
  }
  static torch::autograd::variable_list backward(torch::autograd::AutogradContext* ctx,
                                                 torch::autograd::variable_list grads) {
    const auto saved = ctx->get_saved_variables();
    const auto &x = saved[0], &weight = saved[1], &offsets = saved[2];
    const auto g = grads.at(0).contiguous();
    torch::Tensor gx, gw;
    if (ctx->needs_input_grad(0)) gx = grouped_mm(g, weight, offsets);
    if (ctx->needs_input_grad(1)) {
      gw = grouped_mm(g.t(), x, offsets);
      // An expert no row reached gets a zero gradient, whatever the kernel
      // left in its slab (a GPU's native kernel need not write empty groups).
      const auto ends = offsets.to(torch::kInt64);
      const auto empty = ends == torch::cat({torch::zeros({1}, ends.options()), ends.narrow(0, 0, ends.size(0) - 1)});
      gw = gw.masked_fill(empty.view({-1, 1, 1}), 0);
    }
    return {gx, gw, torch::Tensor()};
  }
};

}  // namespace

torch::Tensor grouped_linear(const torch::Tensor& x, const torch::Tensor& weight, const torch::Tensor& offsets) {
  // Under autocast both sides in its dtype, as a linear layer would be.
  const auto device = x.device().type();
  const auto dtype = at::autocast::is_autocast_enabled(device) ? at::autocast::get_autocast_dtype(device)
                                                               : x.scalar_type();
  if (x.size(0) == 0) return torch::zeros({0, weight.size(1)}, x.options().dtype(dtype));
  return GroupedLinear::apply(x.to(dtype), weight.to(dtype), offsets);
}

// ---------------------------------------------------------------- modules

RouterImpl::RouterImpl(int64_t experts, int64_t hidden, bool with_bias, bool with_correction) {
  weight = register_parameter("weight", torch::empty({experts, hidden}));
  if (with_bias) bias = register_parameter("bias", torch::empty({experts}));
  if (with_correction)
    e_score_correction_bias =
        register_parameter("e_score_correction_bias", torch::empty({experts}), /*requires_grad=*/false);
}

ExpertsImpl::ExpertsImpl(const ModelConfig& c)
    : experts_(c.num_experts),
      width_(c.moe_intermediate_size),
      interleaved_(c.experts_interleaved),
      limit_(c.swiglu_limit),
      alpha_(c.swiglu_alpha) {
  const int64_t e = c.num_experts, h = c.hidden_size, w = c.moe_intermediate_size;
  if (interleaved_) {
    gate_up_proj = register_parameter("gate_up_proj", torch::empty({e, h, 2 * w}));
    down_proj = register_parameter("down_proj", torch::empty({e, w, h}));
  } else {
    gate_up_proj = register_parameter("gate_up_proj", torch::empty({e, 2 * w, h}));
    down_proj = register_parameter("down_proj", torch::empty({e, h, w}));
  }
  if (c.expert_bias) {
    gate_up_proj_bias = register_parameter("gate_up_proj_bias", torch::empty({e, 2 * w}));
    down_proj_bias = register_parameter("down_proj_bias", torch::empty({e, h}));
  }
}

torch::Tensor ExpertAdapter::delta(int64_t experts) const {
  const int64_t rank = A.size(0) / experts;
  const auto a = A.view({experts, rank, A.size(1)});
  const auto b = B.view({B.size(0), rank, experts}).permute({2, 0, 1});  // [E, out, r]
  return torch::bmm(b, a) * scale;
}

torch::Tensor ExpertsImpl::forward(const torch::Tensor& x, const torch::Tensor& index, const torch::Tensor& weight) {
  const int64_t k = index.size(1);
  // Each (token, choice) pair sorted by expert, stably: an expert's rows keep
  // token order, and each token's outputs add up in expert order (on the
  // CPU; a GPU's index_add adds them in whatever order its atomics land).
  const auto flat = index.reshape(-1);
  const auto [sorted, order] = flat.sort(/*stable=*/true, 0, false);
  const auto token = order.div(k, "floor");
  // Where each expert's rows end: the count of sorted pairs below e + 1, found
  // on the device (bincount would read the indices' range back to the host,
  // twice a layer, and no decode step could be captured).
  const auto offsets = torch::searchsorted(sorted, torch::arange(1, experts_ + 1, sorted.options()),
                                           /*out_int32=*/true, /*right=*/false);
  const auto rows = x.index_select(0, token);
  // Both weights as [E, out, in] (gpt-oss stores them [E, in, out]), with
  // their adapters' deltas where LoRA is on.
  auto w1 = interleaved_ ? gate_up_proj.transpose(1, 2) : gate_up_proj;
  auto w2 = interleaved_ ? down_proj.transpose(1, 2) : down_proj;
  if (lora_enabled && gate_up_lora.defined()) w1 = w1 + gate_up_lora.delta(experts_).to(w1.scalar_type());
  if (lora_enabled && down_lora.defined()) w2 = w2 + down_lora.delta(experts_).to(w2.scalar_type());
  auto h = grouped_linear(rows, w1, offsets);
  if (gate_up_proj_bias.defined()) h = h + gate_up_proj_bias.index_select(0, sorted).to(h.scalar_type());
  torch::Tensor gate, up;
  if (interleaved_) {
    gate = h.slice(1, 0, 2 * width_, 2);
    up = h.slice(1, 1, 2 * width_, 2);
  } else {
    gate = h.narrow(1, 0, width_);
    up = h.narrow(1, width_, width_);
  }
  torch::Tensor act;
  if (limit_) {
    // gpt-oss: (up + 1) * g * sigmoid(alpha * g), g = min(gate, limit).
    const auto g = gate.clamp_max(*limit_);
    act = (up.clamp(-*limit_, *limit_) + 1) * (g * torch::sigmoid(g * alpha_));
  } else {
    act = torch::silu(gate) * up;
  }
  auto y = grouped_linear(act, w2, offsets);
  if (down_proj_bias.defined()) y = y + down_proj_bias.index_select(0, sorted).to(y.scalar_type());
  // Weighted (Mixtral: in fp32) and summed per token in the input's dtype,
  // as the reference adds them up.
  y = (y * weight.reshape(-1).index_select(0, order).unsqueeze(1)).to(x.scalar_type());
  return torch::zeros({x.size(0), x.size(1)}, x.options()).index_add(0, token, y);
}

SparseMoeImpl::SparseMoeImpl(const ModelConfig& c, std::shared_ptr<RouterBalance> balance)
    : top_k_(c.num_experts_per_tok),
      renormalize_(c.norm_topk_prob),
      fp32_weights_(c.router_weights_fp32),
      softmax_after_topk_(c.router_softmax_after_topk),
      sigmoid_groups_(c.router_sigmoid_groups),
      groups_(c.n_group),
      groups_kept_(c.topk_group),
      scaling_(c.routed_scaling_factor),
      jitter_(c.router_jitter_noise),
      balance_(std::move(balance)) {
  // gpt-oss names its router `router`, the others `gate`.
  gate = register_module(c.router_bias ? "router" : "gate",
                         Router(c.num_experts, c.hidden_size, c.router_bias, c.router_sigmoid_groups));
  experts = register_module("experts", Experts(c));
}

torch::Tensor SparseMoeImpl::forward(const torch::Tensor& x, const torch::Tensor& rows, bool balanced) {
  auto h = x.reshape({-1, x.size(-1)});
  // Mixtral's jitter: the block's input (router's and experts') scaled by
  // noise in training.
  if (jitter_ > 0 && is_training()) h = h * torch::empty_like(h).uniform_(1.0 - jitter_, 1.0 + jitter_);
  if (sigmoid_groups_) {
    // DeepSeek-V3: the router in fp32, mixing by the unbiased scores.
    const auto scores = torch::sigmoid(torch::linear(h.to(torch::kFloat32), gate->weight.to(torch::kFloat32)));
    const auto chosen = choose_in_groups(scores);
    auto top = scores.gather(1, chosen);
    if (renormalize_) top = top / (top.sum(-1, /*keepdim=*/true) + 1e-20);
    return experts->forward(h, chosen, top * scaling_).view(x.sizes());
  }
  auto logits = torch::linear(h, gate->weight, gate->bias);
  const auto prob_dtype = logits.scalar_type() == torch::kDouble ? torch::kDouble : torch::kFloat32;
  torch::Tensor chosen, top;
  {
    torch::NoGradGuard no_grad;
    chosen = std::get<1>(logits.topk(top_k_, -1));  // the top-k of the softmax too
  }
  if (balance_ && balanced) {
    // The balance sees the softmax over all experts (in fp32, fp64 for an
    // fp64 model), whatever the mixing weights are.
    const auto all = torch::softmax(logits.detach(), -1, prob_dtype);
    logits = balance_->route(logits, all, chosen, rows);
  }
  if (softmax_after_topk_) {
    // gpt-oss: a softmax over the chosen logits, in their dtype.
    top = torch::softmax(logits.gather(1, chosen), -1);
  } else {
    top = torch::softmax(logits, -1, prob_dtype).gather(1, chosen);
    if (renormalize_) top = top / top.sum(-1, /*keepdim=*/true);
    if (!fp32_weights_) top = top.to(logits.scalar_type());
  }
  return experts->forward(h, chosen, top).view(x.sizes());
}

torch::Tensor SparseMoeImpl::choose_in_groups(const torch::Tensor& scores) const {
  torch::NoGradGuard no_grad;
  auto choice = scores + gate->e_score_correction_bias.to(scores.scalar_type());
  const int64_t n = choice.size(0), e = choice.size(1);
  if (groups_ > 1) {
    const auto group_scores = std::get<0>(choice.view({n, groups_, e / groups_}).topk(2, -1)).sum(-1);
    const auto kept = std::get<1>(group_scores.topk(groups_kept_, -1));
    const auto keep = torch::zeros({n, groups_}, choice.options().dtype(torch::kBool))
                          .scatter_(1, kept, true)
                          .unsqueeze(-1)
                          .expand({n, groups_, e / groups_})
                          .reshape({n, e});
    choice = choice.masked_fill(keep.logical_not(), -std::numeric_limits<double>::infinity());
  }
  return std::get<1>(choice.topk(top_k_, -1));
}

// ---------------------------------------------------------------- checkpoint layouts

namespace {

// A sparse layer's parameter: its layer prefix ("model.layers.L.") and what
// follows "mlp.", or nullopt.
std::optional<std::pair<std::string, std::string>> split_sparse(const ModelConfig& c, const std::string& name) {
  if (!c.is_moe()) return std::nullopt;
  const auto at = name.find(".mlp.");
  if (at == std::string::npos) return std::nullopt;
  const std::string rest = name.substr(at + 5);
  if (rest != "gate.weight" && rest != "experts.gate_up_proj" && rest != "experts.down_proj") return std::nullopt;
  return std::make_pair(name.substr(0, at + 1), rest);
}

// The published names of expert e's gate, up and down weights under `prefix`.
std::array<std::string, 3> expert_names(const ModelConfig& c, const std::string& prefix, int64_t e) {
  if (c.model_type == "mixtral") {
    const std::string p = fmt::format("{}block_sparse_moe.experts.{}.", prefix, e);
    return {p + "w1.weight", p + "w3.weight", p + "w2.weight"};
  }
  const std::string p = fmt::format("{}mlp.experts.{}.", prefix, e);
  return {p + "gate_proj.weight", p + "up_proj.weight", p + "down_proj.weight"};
}

std::string router_name(const ModelConfig& c, const std::string& prefix) {
  return prefix + (c.model_type == "mixtral" ? "block_sparse_moe.gate.weight" : "mlp.gate.weight");
}

}  // namespace

torch::Tensor dequantize_mxfp4(const torch::Tensor& blocks, const torch::Tensor& scales) {
  // E2M1: sign, 2 exponent bits, 1 mantissa bit.
  static const std::vector<float> values = {0.0f,  0.5f,  1.0f,  1.5f,  2.0f,  3.0f,  4.0f,  6.0f,
                                            -0.0f, -0.5f, -1.0f, -1.5f, -2.0f, -3.0f, -4.0f, -6.0f};
  const auto lut = torch::tensor(values, torch::kFloat32);
  const auto b = blocks.to(torch::kCPU).contiguous();
  const int64_t e = b.size(0), r = b.size(1), g = b.size(2);
  // Low nibble first: column 2j, then 2j + 1.
  const auto codes = torch::stack({b.bitwise_and(0x0F), b.bitwise_right_shift(4)}, -1).to(torch::kInt64);
  auto v = lut.index_select(0, codes.reshape(-1)).view({e, r, g, 32});
  const auto exponent = scales.to(torch::kCPU).to(torch::kInt32).sub(127).to(torch::kFloat32);
  v = v * torch::exp2(exponent).unsqueeze(-1);
  return v.view({e, r, g * 32}).transpose(1, 2).contiguous();
}

std::optional<torch::Tensor> read_published_experts(const ModelConfig& c, const std::string& name,
                                                    const ExpertTensorSource& get, const std::string& source,
                                                    std::vector<std::string>* read) {
  if (c.experts_interleaved) {
    // gpt-oss: the experts as saved (the parameter's own name), or MXFP4-packed.
    const bool weight = name.size() > 13 && (name.ends_with(".experts.gate_up_proj") || name.ends_with(".experts.down_proj"));
    if (!weight) return std::nullopt;
    const auto blocks = get(name + "_blocks"), scales = get(name + "_scales");
    if (!blocks || !scales)
      fail_input("{}: tensor `{}` is missing, and so is its MXFP4 form (`{}_blocks` and `{}_scales`)", source, name, name,
                 name);
    const int64_t rows = name.ends_with("gate_up_proj") ? 2 * c.moe_intermediate_size : c.hidden_size;
    const int64_t in = name.ends_with("gate_up_proj") ? c.hidden_size : c.moe_intermediate_size;
    const std::vector<int64_t> want_blocks = {c.num_experts, rows, in / 32, 16}, want_scales = {c.num_experts, rows, in / 32};
    if (in % 32 != 0 || blocks->scalar_type() != torch::kUInt8 || scales->scalar_type() != torch::kUInt8 ||
        blocks->sizes().vec() != want_blocks || scales->sizes().vec() != want_scales)
      fail_input("{}: `{}_blocks` ({}) and `{}_scales` ({}) are not the MXFP4 form of a {}x{}x{} expert weight (uint8 "
                 "{} and {})",
                 source, name, fmt::format("{}", fmt::join(blocks->sizes(), "x")), name,
                 fmt::format("{}", fmt::join(scales->sizes(), "x")), c.num_experts, in, rows,
                 fmt::format("{}", fmt::join(want_blocks, "x")), fmt::format("{}", fmt::join(want_scales, "x")));
    if (read) {
      read->push_back(name + "_blocks");
      read->push_back(name + "_scales");
    }
    return dequantize_mxfp4(*blocks, *scales);
  }
  const auto sparse = split_sparse(c, name);
  if (!sparse) return std::nullopt;
  const auto& [prefix, rest] = *sparse;
  if (rest == "gate.weight") {
    const std::string n = router_name(c, prefix);
    auto t = get(n);
    if (!t) fail_input("{}: tensor `{}` is missing (the router of a sparse layer)", source, n);
    if (t->dim() != 2 || t->size(0) != c.num_experts || t->size(1) != c.hidden_size)
      fail_input("{}: tensor `{}` has shape {} but the model's config.json implies {}x{} (experts x hidden_size)",
                 source, n, fmt::format("{}", fmt::join(t->sizes(), "x")), c.num_experts, c.hidden_size);
    if (read) read->push_back(n);
    return t;
  }
  const int64_t e_count = c.num_experts, width = c.moe_intermediate_size, hidden = c.hidden_size;
  const bool gate_up = rest == "experts.gate_up_proj";
  std::vector<torch::Tensor> parts;
  parts.reserve(static_cast<size_t>(e_count));
  for (int64_t e = 0; e < e_count; ++e) {
    const auto names = expert_names(c, prefix, e);
    auto fetch = [&](const std::string& n, std::vector<int64_t> shape) {
      auto t = get(n);
      if (!t)
        fail_input("{}: tensor `{}` is missing (a {} model has {} experts in each sparse layer, each with its {} "
                   "weights; or give the layer's experts fused as `{}mlp.{}`)",
                   source, n, c.model_type, e_count,
                   c.model_type == "mixtral" ? "w1, w2 and w3" : "gate_proj, up_proj and down_proj", prefix, rest);
      if (t->sizes().vec() != shape)
        fail_input("{}: tensor `{}` has shape {} but the model's config.json implies {}", source, n,
                   fmt::format("{}", fmt::join(t->sizes(), "x")), fmt::format("{}", fmt::join(shape, "x")));
      if (read) read->push_back(n);
      return *t;
    };
    if (gate_up)
      parts.push_back(torch::cat({fetch(names[0], {width, hidden}), fetch(names[1], {width, hidden})}, 0));
    else
      parts.push_back(fetch(names[2], {hidden, width}));
  }
  return torch::stack(parts);
}

std::vector<PublishedPart> published_parts(const ModelConfig& c, const std::string& name,
                                           const std::vector<int64_t>& shape) {
  if (c.experts_interleaved) return {};  // gpt-oss: saved as held (transformers' dequantized layout)
  const auto sparse = split_sparse(c, name);
  if (!sparse) return {};
  const auto& [prefix, rest] = *sparse;
  if (rest == "gate.weight") {
    if (c.model_type != "mixtral") return {};
    return {{router_name(c, prefix), [](const torch::Tensor& t) { return t; }, shape}};
  }
  std::vector<PublishedPart> out;
  const int64_t width = c.moe_intermediate_size, hidden = c.hidden_size;
  for (int64_t e = 0; e < c.num_experts; ++e) {
    const auto names = expert_names(c, prefix, e);
    if (rest == "experts.gate_up_proj") {
      out.push_back({names[0], [e, width](const torch::Tensor& t) { return t[e].narrow(0, 0, width); }, {width, hidden}});
      out.push_back({names[1], [e, width](const torch::Tensor& t) { return t[e].narrow(0, width, width); },
                     {width, hidden}});
    } else {
      out.push_back({names[2], [e](const torch::Tensor& t) { return t[e]; }, {hidden, width}});
    }
  }
  return out;
}

}  // namespace trlx::model
