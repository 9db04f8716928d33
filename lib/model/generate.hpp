#pragma once
// Batched generation with a KV cache: left-padded prompts, greedy or sampled
// continuation, stopping at eos (or stop strings, checked by the caller's
// decode function) or max_new_tokens. The online trainers (GRPO, RLOO, PPO,
// online DPO) and `trlx generate` use this one implementation.
#include <cstdint>
#include <functional>
#include <optional>
#include <string>
#include <vector>

#include "model/decoder.hpp"

namespace trlx::model {

struct GenerationOptions {
  int64_t max_new_tokens = 32;
  bool do_sample = false;
  double temperature = 1.0;
  int64_t top_k = 0;                 // 0: off
  double top_p = 1.0;                // 1: off
  std::optional<double> min_p;       // off when unset
  double repetition_penalty = 1.0;   // 1: off
  std::vector<int64_t> eos_token_ids;
  int64_t pad_token_id = 0;
  uint64_t seed = 0;
  // Text of a row's completion so far -> true when a stop string appeared.
  std::function<bool(const std::vector<int64_t>& completion)> stop;
};

struct Generation {
  std::vector<std::vector<int64_t>> completions;  // per prompt, eos included when reached
  std::vector<bool> finished;                     // stopped by eos or a stop string
  int64_t steps = 0;                              // decode steps run
};

// Applies repetition penalty, temperature, top-k, top-p and min-p to logits
// [B, V] in that order (the reference's order), for the tokens in `seen`.
torch::Tensor process_logits(torch::Tensor logits, const torch::Tensor& seen, const GenerationOptions& o);

Generation generate(LanguageModelImpl& model, const std::vector<std::vector<int64_t>>& prompts,
                    const GenerationOptions& options);

}  // namespace trlx::model
