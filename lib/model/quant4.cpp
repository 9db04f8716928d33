// 4-bit weights as bitsandbytes stores them (NF4/FP4, optional double quantization).
#include "model/quant4.hpp"

#include <algorithm>
#include <atomic>
#include <cmath>

#include "core/error.hpp"
#include "io/safetensors_format.hpp"
#include "model/kernels.hpp"

namespace trlx::model {

namespace {

constexpr int64_t kAbsmaxBlock = 256;  // double quantization's block

// Per-block absmax of the flattened float32 `flat` (the last block may be
// short) and the values scaled into [-1, 1], as bitsandbytes computes them.
std::pair<torch::Tensor, torch::Tensor> scale_blocks(const torch::Tensor& flat, int64_t blocksize) {
  const int64_t n = flat.numel(), rem = n % blocksize, full = n - rem;
  std::vector<torch::Tensor> absmaxes, scaled;
  if (full > 0) {
    auto blocks = flat.narrow(0, 0, full).view({full / blocksize, blocksize});
    auto absmax = std::get<0>(blocks.abs().max(-1));
    absmaxes.push_back(absmax);
    scaled.push_back(torch::clamp(blocks * (1.0 / absmax.clamp_min(1e-38)).view({-1, 1}), -1, 1).reshape({-1}));
  }
  if (rem > 0) {
    auto tail = flat.narrow(0, full, rem);
    auto am = tail.abs().max().clamp_min(1e-38);
    absmaxes.push_back(am.unsqueeze(0));
    scaled.push_back(torch::clamp(tail / am, -1, 1));
  }
  return {torch::cat(absmaxes), torch::cat(scaled)};
}

// Each value's nearest entry of `code` (ties to the lower one, as
// bitsandbytes' bucketize over the midpoints), as uint8 indices into `code`.
torch::Tensor nearest_code(const torch::Tensor& scaled, const torch::Tensor& code) {
  auto order = torch::argsort(code);
  auto sorted = code.index_select(0, order);
  auto bounds = (sorted.narrow(0, 0, sorted.size(0) - 1) + sorted.narrow(0, 1, sorted.size(0) - 1)) / 2;
  if (!scaled.is_cpu() || scaled.scalar_type() != torch::kFloat32 || code.size(0) > 256) {
    auto q = torch::bucketize(scaled, bounds, /*out_int32=*/false);
    return order.index_select(0, q.reshape({-1})).view(scaled.sizes()).to(torch::kUInt8);
  }
  const auto values = scaled.contiguous();
  const auto b = bounds.contiguous();
  const auto o = order.to(torch::kUInt8).contiguous();
  auto out = torch::empty(scaled.sizes(), scaled.options().dtype(torch::kUInt8));
  nearest_code_cpu(values.data_ptr<float>(), values.numel(), b.data_ptr<float>(), b.numel(), o.data_ptr<uint8_t>(),
                   out.data_ptr<uint8_t>());
  return out;
}

// Values (float32, flat) times their block's absmax.
torch::Tensor unscale_blocks(const torch::Tensor& values, const torch::Tensor& absmax, int64_t blocksize) {
  const int64_t n = values.numel(), rem = n % blocksize, full = n - rem;
  if (rem == 0) return (values.view({-1, blocksize}) * absmax.view({-1, 1})).reshape({-1});
  auto head = (values.narrow(0, 0, full).view({-1, blocksize}) * absmax.narrow(0, 0, full / blocksize).view({-1, 1}))
                  .reshape({-1});
  return torch::cat({head, values.narrow(0, full, rem) * absmax[full / blocksize]});
}

}  // namespace

int64_t Quant4Weight::bytes() const {
  int64_t b = packed.numel() + absmax.numel() * absmax.element_size();
  if (absmax_scale.defined()) b += absmax_scale.numel() * absmax_scale.element_size();
  return b;
}

torch::Tensor code_4bit(const std::string& quant_type) {
  std::vector<float> data;
  if (quant_type == "nf4") {
    // The NF4 data type: quantiles of N(0, 1) normalised to [-1, 1], with an
    // exact zero.
    data = {-1.0f, -0.6961928009986877f, -0.5250730514526367f, -0.39491748809814453f, -0.28444138169288635f,
            -0.18477343022823334f, -0.09105003625154495f, 0.0f, 0.07958029955625534f, 0.16093020141124725f,
            0.24611230194568634f, 0.33791524171829224f, 0.44070982933044434f, 0.5626170039176941f,
            0.7229568362236023f, 1.0f};
  } else if (quant_type == "fp4") {
    // FP4 (e2m1 with bitsandbytes' own layout), normalised by its largest value.
    data = {0.0f, 0.0625f, 8.0f, 12.0f, 4.0f, 6.0f, 2.0f, 3.0f, -0.0f, -0.0625f, -8.0f, -12.0f, -4.0f, -6.0f, -2.0f,
            -3.0f};
    for (auto& v : data) v /= 12.0f;
  } else {
    fail_input("bnb_4bit_quant_type `{}`: trlx quantizes to nf4 or fp4", quant_type);
  }
  return torch::tensor(data, torch::kFloat32);
}

torch::Tensor dynamic_map_8bit(bool is_signed) {
  // bitsandbytes' dynamic map: for exponents 10^-6 .. 10^0, linearly spaced
  // fractions in [0.1, 1] (their midpoints), positive (and negative when
  // signed), then 0 and 1, sorted. Each product is a float32 tensor times a scalar,
  // as its Python computes it.
  constexpr int kExponentBits = 7, kNonSignBits = 7;
  std::vector<float> data;
  auto add = [&](int64_t items, int i) {
    auto bounds = torch::linspace(0.1, 1.0, items, torch::kFloat32);
    auto means = (bounds.narrow(0, 0, items - 1) + bounds.narrow(0, 1, items - 1)) / 2.0;
    const double scale = std::pow(10.0, -(kExponentBits - 1) + i);
    for (double sign : {1.0, -1.0}) {
      if (sign < 0 && !is_signed) break;
      auto v = (means * (sign * scale)).contiguous();
      data.insert(data.end(), v.data_ptr<float>(), v.data_ptr<float>() + v.numel());
    }
  };
  // Without a sign bit each exponent has twice the fractions.
  for (int i = 0; i < kExponentBits; ++i)
    add((int64_t{1} << (i + kNonSignBits - kExponentBits + (is_signed ? 0 : 1))) + 1, i);
  // No additional items: 2^(non-sign bits - exponent bits) - 1 = 0.
  data.push_back(0.0f);
  data.push_back(1.0f);
  while (data.size() < 256) data.push_back(0.0f);
  std::sort(data.begin(), data.end());
  return torch::tensor(data, torch::kFloat32);
}

std::pair<torch::Tensor, torch::Tensor> quantize_blockwise(const torch::Tensor& x, const torch::Tensor& code,
                                                           int64_t blocksize) {
  auto [absmax, scaled] = scale_blocks(x.reshape({-1}).to(torch::kFloat32), blocksize);
  auto codes = nearest_code(scaled, code).view(x.sizes());
  return {codes, absmax};
}

torch::Tensor dequantize_blockwise(const torch::Tensor& codes, const torch::Tensor& absmax, const torch::Tensor& code,
                                   int64_t blocksize) {
  auto values = code.to(codes.device()).index_select(0, codes.reshape({-1}).to(torch::kInt64));
  return unscale_blocks(values, absmax, blocksize).view(codes.sizes());
}

Quant4Weight quantize_4bit(const torch::Tensor& weight, const Quant4Options& o) {
  const auto code = code_4bit(o.quant_type);
  if (o.blocksize < 64 || o.blocksize > 4096 || (o.blocksize & (o.blocksize - 1)) != 0)
    fail_input("4-bit blocksize {}: bitsandbytes takes a power of two from 64 to 4096", o.blocksize);
  torch::NoGradGuard no_grad;
  const auto flat = weight.detach().reshape({-1}).to(torch::kCPU, torch::kFloat32);
  auto [absmax, scaled] = scale_blocks(flat, o.blocksize);
  if (scaled.numel() % 2) scaled = torch::cat({scaled, torch::zeros({1}, scaled.options())});
  auto q = nearest_code(scaled, code).view({-1, 2});
  Quant4Weight out;
  out.packed = torch::bitwise_or(torch::bitwise_left_shift(q.select(1, 0), 4), q.select(1, 1)).contiguous();
  out.shape = weight.sizes().vec();
  out.quant_type = o.quant_type;
  out.blocksize = o.blocksize;
  out.double_quant = o.double_quant;
  out.compute_dtype = o.compute_dtype;
  out.code = code;
  if (o.double_quant) {
    const auto offset = absmax.mean();
    out.offset = offset.item<float>();
    out.absmax_code = dynamic_map_8bit();
    auto [codes, scale] = quantize_blockwise(absmax - offset, out.absmax_code, kAbsmaxBlock);
    out.absmax = codes;
    out.absmax_scale = scale;
  } else {
    out.absmax = absmax;
  }
  const auto device = weight.device();
  if (!device.is_cpu())
    for (auto* t : {&out.packed, &out.absmax, &out.absmax_scale, &out.code, &out.absmax_code})
      if (t->defined()) *t = t->to(device);
  return out;
}

namespace {

// The block scales as float32: double-quantized ones decoded first.
torch::Tensor block_absmax(const Quant4Weight& q) {
  if (!q.double_quant) return q.absmax;
  return dequantize_blockwise(q.absmax, q.absmax_scale, q.absmax_code, kAbsmaxBlock) + q.offset;
}

}  // namespace

torch::Tensor dequantize_4bit_ops(const Quant4Weight& q, torch::Dtype dtype) {
  int64_t n = 1;
  for (auto s : q.shape) n *= s;
  torch::NoGradGuard no_grad;  // the base is frozen
  const auto absmax = block_absmax(q);
  // Each byte's two values at once: a 256 x 2 table (high nibble first)
  // indexed by the packed bytes, one gather over half as many indices.
  const auto bytes = torch::arange(256, q.code.options().dtype(torch::kInt64));
  const auto pairs = torch::stack({q.code.index_select(0, torch::bitwise_right_shift(bytes, 4)),
                                   q.code.index_select(0, torch::bitwise_and(bytes, 15))},
                                  1);
  // (int32 indices and the scaling in place: on a GPU, where this path
  // runs on every forward and backward, 8 bytes of temporaries per weight
  // instead of 14.)
  auto values = pairs.index_select(0, q.packed.to(torch::kInt32)).view({-1}).narrow(0, 0, n);
  const int64_t bs = q.blocksize, rem = n % bs, full = n - rem;
  values.narrow(0, 0, full).view({-1, bs}).mul_(absmax.narrow(0, 0, full / bs).view({-1, 1}));
  if (rem) values.narrow(0, full, rem).mul_(absmax[full / bs]);
  return values.view(q.shape).to(dtype);
}

namespace {
std::atomic<int64_t> g_dequantizations{0};
}  // namespace

int64_t dequantizations() { return g_dequantizations.load(); }

torch::Tensor dequantize_4bit(const Quant4Weight& q, torch::Dtype dtype) {
  g_dequantizations.fetch_add(1, std::memory_order_relaxed);
  if (!q.packed.is_cpu() || (dtype != torch::kFloat32 && dtype != torch::kBFloat16 && dtype != torch::kHalf))
    return dequantize_4bit_ops(q, dtype);
  int64_t n = 1;
  for (auto s : q.shape) n *= s;
  torch::NoGradGuard no_grad;
  const auto absmax = block_absmax(q).to(torch::kFloat32).contiguous();
  const auto code = q.code.to(torch::kFloat32).contiguous();
  const auto packed = q.packed.contiguous();
  auto out = torch::empty(q.shape, torch::TensorOptions().dtype(dtype));
  dequantize_4bit_cpu(packed.data_ptr<uint8_t>(), absmax.data_ptr<float>(), code.data_ptr<float>(), n, q.blocksize,
                      out);
  return out;
}

QuantizedModel quantize_linears_4bit(LanguageModelImpl& m, const Quant4Options& options) {
  QuantizedModel out;
  torch::NoGradGuard no_grad;
  for (const auto& item : m.named_modules("", /*include_self=*/false)) {
    auto* l = dynamic_cast<LinearImpl*>(item.value().get());
    const std::string& name = item.key();
    if (!l || l->quant4 || name == "lm_head" || name == "score") continue;
    // An adapter's own matrices stay in their dtype.
    if (name.find("lora_") != std::string::npos) continue;
    auto q = std::make_shared<Quant4Weight>(quantize_4bit(l->weight, options));
    auto holder = std::make_shared<torch::nn::Module>();
    for (auto [key, t] : {std::pair<const char*, torch::Tensor*>{"packed", &q->packed}, {"absmax", &q->absmax},
                          {"absmax_scale", &q->absmax_scale}, {"code", &q->code}, {"absmax_code", &q->absmax_code}})
      if (t->defined()) holder->register_buffer(key, *t);
    l->register_module("quant4", holder);
    out.float_bytes += l->weight.numel() * static_cast<int64_t>(torch::elementSize(m.placed_dtype(l->weight)));
    out.bytes += q->bytes();
    // A weight still viewing its checkpoint's mapping gives back the pages
    // quantizing it read, so the float base is never resident whole.
    if (l->weight.is_cpu() && l->weight.is_contiguous())
      io::MappedFile::release(l->weight.data_ptr(),
                              static_cast<size_t>(l->weight.numel()) * static_cast<size_t>(l->weight.element_size()));
    l->weight.set_data(torch::empty({0}, l->weight.options()));
    l->quant4 = std::move(q);
    ++out.layers;
  }
  return out;
}

namespace {
thread_local bool t_keep_dequantized = false;
}  // namespace

KeepDequantizedWeights::KeepDequantizedWeights() : prev_(t_keep_dequantized) { t_keep_dequantized = true; }
KeepDequantizedWeights::~KeepDequantizedWeights() { t_keep_dequantized = prev_; }
bool KeepDequantizedWeights::active() { return t_keep_dequantized; }

torch::Tensor float_weight(const LinearImpl& l) {
  return l.quant4 ? dequantize_4bit(*l.quant4, torch::kFloat32) : l.weight.to(torch::kFloat32);
}

}  // namespace trlx::model
