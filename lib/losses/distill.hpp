#pragma once
// The distillation loss: per token, the divergence between the student's
// and the teacher's next-token distributions over the whole vocabulary
// (TRL's generalized Jensen-Shannon divergence), computed from each model's
// hidden states and head weight without ever holding either model's
// [tokens x vocab] logits for the batch.
//
// beta = 0: forward KL(teacher || student); beta = 1: reverse
// KL(student || teacher); in between: the generalized JSD with mixture
// m = (1 - beta) p_student + beta p_teacher,
//   beta KL(p_teacher || m) + (1 - beta) KL(p_student || m).
// Both distributions take logits soft-capped (when the model caps them) and
// then divided by the temperature.
//
// Tokens go in chunks: a chunk's logits of both models ([chunk x vocab],
// fp32) are made once, into tiles reused chunk after chunk, and the divergence, the student's entropy and the
// divergence's gradient with respect to the student's logits come from them
// in the same pass; the gradient is contracted at once into the student's
// hidden states and head weight, which backward only scales. Each
// projection is computed once per token, where a recomputing backward makes
// it twice or three times.
#include <cstdint>

#include <ATen/core/Tensor.h>

namespace trlx::losses {

struct DivergenceOptions {
  double beta = 1.0;
  double temperature = 1.0;
  // > 0: each model's logits are soft-capped, cap * tanh(logits / cap),
  // before the temperature (its final_logit_softcapping).
  double student_softcap = 0.0, teacher_softcap = 0.0;
  // Tokens per chunk; 0 picks the most whose fp32 [chunk x vocab] tiles
  // stay near 2^23 elements each (at least 16 tokens). A call holds four
  // such tiles (five for the JSD, six under a student soft cap), made once
  // and reused by every chunk.
  int64_t chunk_tokens = 0;
};

struct TokenDivergence {
  at::Tensor loss_sum;    // sum over masked-in tokens of weight x divergence; the one output with a gradient
  at::Tensor divergence;  // [B, T] fp32 per token, 0 where masked out (no gradient)
  at::Tensor entropy;     // [B, T] fp32 the student's entropy, 0 where masked out (no gradient)
};

// student_hidden [B, T, Hs] with student_weight [V, Hs]; teacher_hidden
// [B, T, Ht] with teacher_weight [V, Ht] (no gradient reaches the teacher);
// weights [B, T]: each token's weight in loss_sum, 0 leaving it out.
// Under autocast the projections run in the autocast dtype; the softmax
// math is fp32. The gradient reaches the student's hidden states and head
// weight as far as they require it.
TokenDivergence token_divergence(const at::Tensor& student_hidden, const at::Tensor& student_weight,
                                 const at::Tensor& teacher_hidden, const at::Tensor& teacher_weight,
                                 const at::Tensor& weights, const DivergenceOptions& options = {});

}  // namespace trlx::losses
