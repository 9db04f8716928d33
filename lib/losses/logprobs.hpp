#pragma once
// The one log-prob path every trainer uses: per-token log-probabilities of
// target tokens under hidden states times the head weight, with entropy and
// argmax accuracy when asked. Pure tensor code; the engine decides where the
// hidden states come from.
#include <torch/torch.h>

namespace trlx::losses {

struct LogProbOptions {
  bool entropy = false;   // per-token entropy of the distribution
  bool accuracy = false;  // whether the argmax is the target
  double temperature = 1.0;
};

struct TokenLogProbs {
  torch::Tensor logps;    // [B, T] log p(target); 0 where the target is masked
  torch::Tensor entropy;  // [B, T] (when asked)
  torch::Tensor correct;  // [B, T] bool (when asked)
};

// hidden [B, T, H] (positions that predict), targets [B, T] (the next
// tokens), mask [B, T] (1 where a target counts), weight [V, H].
TokenLogProbs token_logprobs(const torch::Tensor& hidden, const torch::Tensor& weight, const torch::Tensor& targets,
                             const torch::Tensor& mask, const LogProbOptions& options = {});

}  // namespace trlx::losses
