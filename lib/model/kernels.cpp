// CPU kernels: dropout with a mask computed in parallel from one draw, and
// 4-bit dequantization in one pass; AVX-512 where the CPU has it.
#include "model/kernels.hpp"

#include <ATen/CPUGeneratorImpl.h>
#include <ATen/Parallel.h>
#include <c10/util/BFloat16.h>
#include <c10/util/Half.h>
#include <torch/torch.h>

#include <algorithm>
#include <atomic>
#include <cmath>
#include <mutex>

#if defined(__x86_64__) && defined(__GNUC__)
#include <immintrin.h>
#define TRLX_X86_KERNELS 1
#define TRLX_AVX512 __attribute__((target("avx512f,avx512dq,avx512bw,avx512vl,bmi2")))
#endif

namespace trlx::model {

namespace {

std::atomic<bool> g_scalar_only{false};

bool use_avx512() {
#ifdef TRLX_X86_KERNELS
  static const bool has = __builtin_cpu_supports("avx512f") && __builtin_cpu_supports("avx512dq") &&
                          __builtin_cpu_supports("avx512bw") && __builtin_cpu_supports("avx512vl") &&
                          __builtin_cpu_supports("bmi2");
  return has && !g_scalar_only.load(std::memory_order_relaxed);
#else
  return false;
#endif
}

constexpr uint64_t kGolden = 0x9E3779B97F4A7C15ULL;

// splitmix64's output for counter `i` of the stream keyed by `key`: 64
// well-mixed bits, two elements' worth.
inline uint64_t mix(uint64_t key, uint64_t i) {
  uint64_t z = key + (i + 1) * kGolden;
  z = (z ^ (z >> 30)) * 0xBF58476D1CE4E5B9ULL;
  z = (z ^ (z >> 27)) * 0x94D049BB133111EBULL;
  return z ^ (z >> 31);
}

// The scalar rule every path follows: element i is kept when its 32 random
// bits (the low half of draw i/2 for even i, the high half for odd i) fall
// under `threshold` = (1-p) 2^32; a kept value is multiplied by `scale` in
// S (float, or double for double values) and rounded once to T.
template <typename T, typename S>
void mask_scalar(const T* in, T* out, int64_t i0, int64_t i1, uint64_t key, uint64_t threshold, S scale) {
  for (int64_t i = i0; i < i1; ++i) {
    const uint64_t r = mix(key, static_cast<uint64_t>(i >> 1));
    const uint64_t bits = (i & 1) ? (r >> 32) : (r & 0xFFFFFFFFULL);
    out[i] = static_cast<T>(bits < threshold ? static_cast<S>(in[i]) * scale : S(0));
  }
}

#ifdef TRLX_X86_KERNELS
// float -> bfloat16, round to nearest even, NaN to a quiet NaN: c10's rule
// on 16 lanes (no DAZ, unlike VCVTNEPS2BF16).
// (The all-lanes maskz forms: GCC 12 warns that the plain ones' undefined
// pass-through is uninitialized once inlined, its bug 105593.)
TRLX_AVX512 inline __m256i to_bf16(__m512 v) {
  const __m512i bits = _mm512_castps_si512(v);
  const __m512i lsb = _mm512_and_si512(_mm512_maskz_srli_epi32(0xFFFF, bits, 16), _mm512_set1_epi32(1));
  __m512i r =
      _mm512_maskz_srli_epi32(0xFFFF, _mm512_add_epi32(bits, _mm512_add_epi32(lsb, _mm512_set1_epi32(0x7FFF))), 16);
  const __mmask16 nan = _mm512_cmp_ps_mask(v, v, _CMP_UNORD_Q);
  r = _mm512_mask_mov_epi32(r, nan, _mm512_set1_epi32(0x7FC0));
  return _mm512_maskz_cvtepi32_epi16(0xFFFF, r);
}
TRLX_AVX512 inline __m512 from_bf16(__m256i h) {
  return _mm512_castsi512_ps(_mm512_slli_epi32(_mm512_cvtepu16_epi32(h), 16));
}

template <typename T>
TRLX_AVX512 inline __m512 load16(const T* p) {
  if constexpr (std::is_same_v<T, float>)
    return _mm512_loadu_ps(p);
  else if constexpr (std::is_same_v<T, c10::BFloat16>)
    return from_bf16(_mm256_loadu_si256(reinterpret_cast<const __m256i*>(p)));
  else
    return _mm512_cvtph_ps(_mm256_loadu_si256(reinterpret_cast<const __m256i*>(p)));
}
template <typename T>
TRLX_AVX512 inline void store16(T* p, __m512 v) {
  if constexpr (std::is_same_v<T, float>)
    _mm512_storeu_ps(p, v);
  else if constexpr (std::is_same_v<T, c10::BFloat16>)
    _mm256_storeu_si256(reinterpret_cast<__m256i*>(p), to_bf16(v));
  else
    _mm256_storeu_si256(reinterpret_cast<__m256i*>(p),
                        _mm512_maskz_cvtps_ph(0xFFFF, v, _MM_FROUND_TO_NEAREST_INT | _MM_FROUND_NO_EXC));
}

// 16 elements from `i` (even) at a time, eight draws per 16: the scalar
// rule's masks, their bits interleaved low/high as the elements are.
template <typename T>
TRLX_AVX512 void mask_avx512(const T* in, T* out, int64_t i0, int64_t i1, uint64_t key, uint64_t threshold,
                             float scale) {
  const __m512i lane = _mm512_set_epi64(8, 7, 6, 5, 4, 3, 2, 1);
  const __m512i gold = _mm512_set1_epi64(static_cast<long long>(kGolden));
  const __m512i m1 = _mm512_set1_epi64(static_cast<long long>(0xBF58476D1CE4E5B9ULL));
  const __m512i m2 = _mm512_set1_epi64(static_cast<long long>(0x94D049BB133111EBULL));
  const __m512i thr = _mm512_set1_epi64(static_cast<long long>(threshold));
  const __m512i low = _mm512_set1_epi64(0xFFFFFFFFLL);
  const __m512 s = _mm512_set1_ps(scale);
  int64_t i = i0;
  for (; i + 16 <= i1; i += 16) {
    const uint64_t j = static_cast<uint64_t>(i >> 1);
    // counters j + 1 .. j + 8, times the golden ratio, plus the key
    __m512i z = _mm512_add_epi64(
        _mm512_set1_epi64(static_cast<long long>(key)),
        _mm512_mullo_epi64(_mm512_add_epi64(_mm512_set1_epi64(static_cast<long long>(j)), lane), gold));
    z = _mm512_mullo_epi64(_mm512_xor_si512(z, _mm512_srli_epi64(z, 30)), m1);
    z = _mm512_mullo_epi64(_mm512_xor_si512(z, _mm512_srli_epi64(z, 27)), m2);
    z = _mm512_xor_si512(z, _mm512_srli_epi64(z, 31));
    const __mmask8 lo = _mm512_cmplt_epu64_mask(_mm512_and_si512(z, low), thr);
    const __mmask8 hi = _mm512_cmplt_epu64_mask(_mm512_srli_epi64(z, 32), thr);
    const auto keep = static_cast<__mmask16>(_pdep_u32(lo, 0x5555u) | _pdep_u32(hi, 0xAAAAu));
    store16(out + i, _mm512_maskz_mul_ps(keep, load16(in + i), s));
  }
  mask_scalar(in, out, i, i1, key, threshold, scale);
}
#endif

template <typename T, typename S>
void apply_mask(const T* in, T* out, int64_t n, uint64_t key, uint64_t threshold, S scale) {
  // Chunks start on even elements, so each draw serves one chunk.
  at::parallel_for(0, (n + 1) / 2, 16384, [&](int64_t j0, int64_t j1) {
    const int64_t i0 = 2 * j0, i1 = std::min(n, 2 * j1);
#ifdef TRLX_X86_KERNELS
    if constexpr (std::is_same_v<S, float>)
      if (use_avx512()) return mask_avx512(in, out, i0, i1, key, threshold, scale);
#endif
    mask_scalar(in, out, i0, i1, key, threshold, scale);
  });
}

void masked(const at::Tensor& in, at::Tensor& out, uint64_t key, double p) {
  const auto threshold = static_cast<uint64_t>(std::llround((1.0 - p) * 4294967296.0));
  // 1/(1-p) in float, for 16-bit values too (torch::dropout rounds it to
  // their dtype first, which biases them: 1.0547 for p = 0.05 in bf16);
  // doubles are scaled in double, which float's 24 bits would round.
  const float scale = 1.0f / static_cast<float>(1.0 - p);
  const int64_t n = in.numel();
  switch (in.scalar_type()) {
    case at::kFloat:
      apply_mask(in.data_ptr<float>(), out.data_ptr<float>(), n, key, threshold, scale);
      break;
    case at::kDouble:
      apply_mask(in.data_ptr<double>(), out.data_ptr<double>(), n, key, threshold, 1.0 / (1.0 - p));
      break;
    case at::kBFloat16:
      apply_mask(in.data_ptr<c10::BFloat16>(), out.data_ptr<c10::BFloat16>(), n, key, threshold, scale);
      break;
    case at::kHalf:
      apply_mask(in.data_ptr<c10::Half>(), out.data_ptr<c10::Half>(), n, key, threshold, scale);
      break;
    default:
      TORCH_CHECK(false, "dropout: unexpected dtype ", in.scalar_type());
  }
}

class CpuDropout : public torch::autograd::Function<CpuDropout> {
 public:
  static torch::Tensor forward(torch::autograd::AutogradContext* ctx, const torch::Tensor& x, double p) {
    uint64_t key = 0;
    {
      auto gen = at::detail::getDefaultCPUGenerator();
      std::lock_guard<std::mutex> lock(gen.mutex());
      key = gen.get<at::CPUGeneratorImpl>()->random64();
    }
    ctx->saved_data["key"] = static_cast<int64_t>(key);
    ctx->saved_data["p"] = p;
    const auto in = x.contiguous();
    auto out = torch::empty_like(in);
    masked(in, out, key, p);
    return out;
  }
  static torch::autograd::variable_list backward(torch::autograd::AutogradContext* ctx,
                                                 torch::autograd::variable_list grads) {
    const auto key = static_cast<uint64_t>(ctx->saved_data["key"].toInt());
    const auto g = grads.at(0).contiguous();
    auto out = torch::empty_like(g);
    masked(g, out, key, ctx->saved_data["p"].toDouble());
    return {out, torch::Tensor()};
  }
};

// ---------------------------------------------------------------- 4-bit

template <typename T>
void dequant_scalar(const uint8_t* packed, const float* code, float absmax, int64_t start, int64_t end, T* out) {
  T table[16];
  for (int k = 0; k < 16; ++k) table[k] = static_cast<T>(code[k] * absmax);
  const int64_t pairs_end = start + ((end - start) & ~int64_t{1});
  for (int64_t i = start; i < pairs_end; i += 2) {
    const uint8_t byte = packed[i >> 1];
    out[i] = table[byte >> 4];
    out[i + 1] = table[byte & 15];
  }
  if (pairs_end < end) out[pairs_end] = table[packed[pairs_end >> 1] >> 4];
}

#ifdef TRLX_X86_KERNELS
// 32 values (16 bytes) at a time: each byte's two nibbles as 32-bit lane
// indices, high first, into the block's 16 scaled code values.
// For 16-bit outputs the block's 16 values are rounded once into a table of
// 16-bit lanes and the nibble indices, as 32 words, pick from it directly.
template <typename T>
TRLX_AVX512 void dequant_avx512(const uint8_t* packed, const float* code, float absmax, int64_t start, int64_t end,
                                T* out) {
  const __m512 table = _mm512_mul_ps(_mm512_loadu_ps(code), _mm512_set1_ps(absmax));
  __m512i table16 = _mm512_setzero_si512();
  if constexpr (std::is_same_v<T, c10::BFloat16>)
    table16 = _mm512_castsi256_si512(to_bf16(table));
  else if constexpr (std::is_same_v<T, c10::Half>)
    table16 =
        _mm512_castsi256_si512(_mm512_maskz_cvtps_ph(0xFFFF, table, _MM_FROUND_TO_NEAREST_INT | _MM_FROUND_NO_EXC));
  int64_t i = start;
  for (; i + 32 <= end; i += 32) {
    const __m512i d = _mm512_cvtepu8_epi32(_mm_loadu_si128(reinterpret_cast<const __m128i*>(packed + (i >> 1))));
    // each dword: high nibble in its low word, low nibble in its high word
    const __m512i idx =
        _mm512_or_si512(_mm512_srli_epi32(d, 4), _mm512_slli_epi32(_mm512_and_si512(d, _mm512_set1_epi32(15)), 16));
    if constexpr (std::is_same_v<T, float>) {
      store16(out + i, _mm512_permutexvar_ps(_mm512_cvtepu16_epi32(_mm512_castsi512_si256(idx)), table));
      store16(out + i + 16, _mm512_permutexvar_ps(_mm512_cvtepu16_epi32(_mm512_extracti64x4_epi64(idx, 1)), table));
    } else {
      _mm512_storeu_si512(reinterpret_cast<void*>(out + i), _mm512_permutexvar_epi16(idx, table16));
    }
  }
  if (i < end) dequant_scalar(packed, code, absmax, i, end, out);
}
#endif

template <typename T>
void dequant_blocks(const uint8_t* packed, const float* absmax, const float* code, int64_t n, int64_t blocksize,
                    T* out) {
  const int64_t blocks = (n + blocksize - 1) / blocksize;
  at::parallel_for(0, blocks, std::max<int64_t>(1, 32768 / blocksize), [&](int64_t b0, int64_t b1) {
    for (int64_t b = b0; b < b1; ++b) {
      // A block starts on a byte: blocksize is even.
      const int64_t start = b * blocksize, end = std::min(n, start + blocksize);
#ifdef TRLX_X86_KERNELS
      if (use_avx512()) {
        dequant_avx512(packed, code, absmax[b], start, end, out);
        continue;
      }
#endif
      dequant_scalar(packed, code, absmax[b], start, end, out);
    }
  });
}

// Each value's count of bounds strictly below it (bucketize with ties to
// the lower bucket), mapped through `order`.
void nearest_scalar(const float* v, int64_t i0, int64_t i1, const float* bounds, int64_t nb, const uint8_t* order,
                    uint8_t* out) {
  for (int64_t i = i0; i < i1; ++i) out[i] = order[std::lower_bound(bounds, bounds + nb, v[i]) - bounds];
}

#ifdef TRLX_X86_KERNELS
// Up to 16 bounds (4-bit codes): 16 values at a time, one compare per bound.
TRLX_AVX512 void nearest_avx512(const float* v, int64_t i0, int64_t i1, const float* bounds, int64_t nb,
                                const uint8_t* order, uint8_t* out) {
  const __m512i one = _mm512_set1_epi32(1);
  int64_t i = i0;
  for (; i + 16 <= i1; i += 16) {
    const __m512 x = _mm512_loadu_ps(v + i);
    __m512i count = _mm512_setzero_si512();
    for (int64_t b = 0; b < nb; ++b)
      count = _mm512_mask_add_epi32(count, _mm512_cmp_ps_mask(_mm512_set1_ps(bounds[b]), x, _CMP_LT_OQ), count, one);
    alignas(64) int32_t c[16];
    _mm512_store_si512(c, count);
    for (int k = 0; k < 16; ++k) out[i + k] = order[c[k]];
  }
  nearest_scalar(v, i, i1, bounds, nb, order, out);
}
#endif

}  // namespace

void nearest_code_cpu(const float* values, int64_t n, const float* bounds, int64_t nb, const uint8_t* order,
                      uint8_t* out) {
  at::parallel_for(0, n, 32768, [&](int64_t i0, int64_t i1) {
#ifdef TRLX_X86_KERNELS
    if (nb <= 16 && use_avx512()) return nearest_avx512(values, i0, i1, bounds, nb, order, out);
#endif
    nearest_scalar(values, i0, i1, bounds, nb, order, out);
  });
}

void kernels_scalar_only(bool on) { g_scalar_only.store(on); }

at::Tensor dropout(const at::Tensor& x, double p, bool train) {
  const auto t = x.scalar_type();
  const bool native = x.is_cpu() && (t == at::kFloat || t == at::kDouble || t == at::kBFloat16 || t == at::kHalf);
  if (!train || p <= 0.0 || p >= 1.0 || !native) return torch::dropout(x, p, train);
  return CpuDropout::apply(x, p);
}

void dequantize_4bit_cpu(const uint8_t* packed, const float* absmax, const float* code, int64_t n, int64_t blocksize,
                         at::Tensor& out) {
  switch (out.scalar_type()) {
    case at::kFloat:
      dequant_blocks(packed, absmax, code, n, blocksize, out.data_ptr<float>());
      break;
    case at::kBFloat16:
      dequant_blocks(packed, absmax, code, n, blocksize, out.data_ptr<c10::BFloat16>());
      break;
    case at::kHalf:
      dequant_blocks(packed, absmax, code, n, blocksize, out.data_ptr<c10::Half>());
      break;
    default:
      TORCH_CHECK(false, "dequantize_4bit_cpu: unexpected dtype ", out.scalar_type());
  }
}

}  // namespace trlx::model
