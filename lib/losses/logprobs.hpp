#pragma once
// The one log-prob path every trainer uses: per-token log-probabilities of
// target tokens under hidden states times the head weight, with entropy and
// argmax accuracy when asked. Pure tensor code; the engine decides where the
// hidden states come from.
//
// Two paths with the same results (fp32 log-probs, 0 where masked):
//  - plain (chunk_size 0): one [tokens x vocab] fp32 logits buffer, kept from
//    forward to backward, which turns it into its own gradient in place (a
//    second backward through a retained graph is refused);
//  - chunked (chunk_size > 0): at most [chunk_size x vocab_tile] logits
//    exist at a time (tokens in chunks, the vocabulary in tiles with an online
//    log-sum-exp), in forward and again in backward, which recomputes them
//    from the saved hidden states and per-token log-sum-exp.
// Both compute only the tokens whose mask is set, so prompt and padding
// tokens cost nothing.
#include <ATen/core/Tensor.h>

namespace trlx::losses {

struct LogProbOptions {
  bool entropy = false;   // per-token entropy of the distribution (no gradient)
  bool accuracy = false;  // whether the argmax is the target
  double temperature = 1.0;
  // > 0: logits are soft-capped, cap * tanh(logits / cap), before the
  // temperature (Gemma 2's final_logit_softcapping).
  double logit_softcap = 0.0;
  // 0: the plain path. > 0: the chunked path over this many (masked-in)
  // tokens at a time and vocab_tile vocabulary entries at a time; its peak
  // extra memory is about 2 x chunk_size x min(vocab, vocab_tile) x 4 bytes
  // (a tile of fp32 logits and its exponentials), on top of the weight's
  // gradient.
  int64_t chunk_size = 0;
  int64_t vocab_tile = 16384;
};

struct TokenLogProbs {
  at::Tensor logps;    // [B, T] log p(target); 0 where the target is masked
  at::Tensor entropy;  // [B, T] (when asked)
  at::Tensor correct;  // [B, T] bool (when asked)
};

// hidden [B, T, H] (positions that predict), targets [B, T] (the next
// tokens), mask [B, T] (1 where a target counts), weight [V, H].
// Under autocast the matmul runs in the autocast dtype; the softmax is fp32.
TokenLogProbs token_logprobs(const at::Tensor& hidden, const at::Tensor& weight, const at::Tensor& targets,
                             const at::Tensor& mask, const LogProbOptions& options = {});

}  // namespace trlx::losses
