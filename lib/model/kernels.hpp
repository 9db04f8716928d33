#pragma once
// CPU kernels the training step leans on, where LibTorch's own are slow on
// the CPU; other devices run LibTorch's.
#include <ATen/core/Tensor.h>

namespace trlx::model {

// Dropout with drop probability `p`, differentiable in `x`: kept values
// are multiplied by 1/(1-p) in float32 and rounded once to their dtype, so
// dropping out a bf16 tensor gives the bf16 rounding of dropping out its
// float32 copy (torch::dropout rounds the scale to bf16 first). On the CPU the mask comes from a
// counter-based generator (splitmix64 over the element index) keyed by one
// draw from the default CPU generator, in parallel; backward rebuilds the
// mask from that key instead of keeping it. LibTorch's CPU dropout draws
// every element serially from the generator, which made it a tenth of a
// QLoRA step. Replaying the generator's state (checkpoint recompute)
// replays the mask. Elsewhere, or for other dtypes: torch::dropout.
at::Tensor dropout(const at::Tensor& x, double p, bool train);

// 4-bit codes (two per byte, high nibble first) back to values: value i is
// code[nibble i] * absmax[i / blocksize], rounded once from float32 to
// `out`'s dtype (float32, bfloat16 or float16; CPU, contiguous, n values).
void dequantize_4bit_cpu(const uint8_t* packed, const float* absmax, const float* code, int64_t n, int64_t blocksize,
                         at::Tensor& out);

// Index of each of n float32 values' nearest code value, ties to the lower
// one, as bitsandbytes quantizes: `bounds` are the nb midpoints between the
// sorted code values, and the bucket b a value falls in (the count of
// bounds strictly below it) is written as order[b], its code's index.
void nearest_code_cpu(const float* values, int64_t n, const float* bounds, int64_t nb, const uint8_t* order,
                      uint8_t* out);

// Tests: true runs the portable loops even where AVX-512 is there, so that
// both can be held to the same results.
void kernels_scalar_only(bool on);

}  // namespace trlx::model
