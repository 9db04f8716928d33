#include "losses/logprobs.hpp"

namespace trlx::losses {

TokenLogProbs token_logprobs(const torch::Tensor& hidden, const torch::Tensor& weight, const torch::Tensor& targets,
                             const torch::Tensor& mask, const LogProbOptions& o) {
  // Log-softmax in fp32 whatever the compute dtype: bf16 log-probs lose the
  // small differences preference losses are made of.
  auto logits = torch::matmul(hidden, weight.t()).to(torch::kFloat32);
  if (o.temperature != 1.0) logits = logits / o.temperature;
  auto lse = logits.logsumexp(-1);
  auto safe_targets = targets.masked_fill(mask == 0, 0);
  auto picked = logits.gather(-1, safe_targets.unsqueeze(-1)).squeeze(-1);
  TokenLogProbs out;
  auto m = mask.to(torch::kBool);
  out.logps = (picked - lse).masked_fill(~m, 0.0);
  if (o.entropy) {
    torch::NoGradGuard no_grad;
    auto logp = logits - lse.unsqueeze(-1);
    out.entropy = -(logp.exp() * logp).sum(-1).masked_fill(~m, 0.0);
  }
  if (o.accuracy) {
    torch::NoGradGuard no_grad;
    out.correct = (logits.argmax(-1) == safe_targets).logical_and(m);
  }
  return out;
}

}  // namespace trlx::losses
