#pragma once
// The one batched generator: `trlx generate` and the online trainers (GRPO,
// RLOO, PPO, online DPO, through Engine::generate) use it.
//
// A round allocates one KV cache of `max_batch` slots. Prompts wait in a
// queue; a prompt enters with all its `num_return_sequences` samples at
// once (one prefill forward for the prompt, its keys and values copied to
// every sample's slot), and a slot freed by a finished row takes the next
// waiting prompt at the following step (continuous batching). Each row
// stops at an eos token, a stop token, a stop rule (stop strings, checked by
// the caller's decode function) or max_new_tokens.
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
  // transformers' no_repeat_ngram_size: no n-gram of the prompt and
  // completion may occur twice (0: off).
  int64_t no_repeat_ngram_size = 0;
  // transformers' bad_words_ids: token sequences that may not be generated
  // (the last token of each is banned after the others; a one-token
  // sequence that is an eos id is dropped, as transformers drops it).
  std::vector<std::vector<int64_t>> bad_words_ids;
  // transformers' suppress_tokens: never sampled.
  std::vector<int64_t> suppress_tokens;
  std::vector<int64_t> eos_token_ids;
  std::vector<int64_t> stop_token_ids;  // end a row like eos, reported as "stop"
  int64_t pad_token_id = 0;
  uint64_t seed = 0;
  // Samples per prompt; they share the prompt's prefill and come out next
  // to each other (prompt i's at i * n ... i * n + n - 1).
  int64_t num_return_sequences = 1;
  // Rows generated at once (KV cache slots); 0: every row at once. Rounded
  // up to a multiple of num_return_sequences.
  int64_t max_batch = 0;
  // Per prompt, fewer new tokens than max_new_tokens (each at most it);
  // empty: max_new_tokens for every prompt.
  std::vector<int64_t> max_new_tokens_per_prompt;
  // The model's context: a prompt plus max_new_tokens beyond it is refused
  // (0: no limit).
  int64_t max_context = 0;
  // Completion tokens so far -> true when a stop string appeared.
  std::function<bool(const std::vector<int64_t>& completion)> stop;
  // Under a strategy that shards parameters every forward is a collective:
  // every rank must run the same forwards. Given, it takes the largest of
  // each value over ranks (in place), and ranks that have finished keep
  // running stand-in forwards until every rank has.
  std::function<void(std::vector<double>& values)> max_across_ranks;
  // Every decode step of a round runs with the same shapes: keys read over
  // the whole cache (masked past each slot's position) and no compaction of
  // finished slots, the step's inputs written into buffers that stay in
  // place. The tokens equal the dynamic path's (with sampling, as long as
  // the dynamic path compacts nothing: compaction changes which random
  // numbers each row draws). On a GPU, TRLX_CUDA_GRAPHS=1 turns this on and
  // replays each round's decode step as one captured CUDA graph (not under
  // parameter sharding, whose forwards are collectives, nor with a rope that
  // reads its positions back: dynamic, longrope).
  bool fixed_shapes = false;
  // Called after every decode step with the tokens generated so far.
  std::function<void(int64_t tokens, int64_t rows_done, int64_t rows)> progress;
};

enum class FinishReason { Eos, Stop, Length };
const char* finish_reason_name(FinishReason r);

struct Generation {
  std::vector<std::vector<int64_t>> completions;  // per row, the eos or stop token included when reached
  std::vector<FinishReason> finish;               // per row
  int64_t steps = 0;                              // decode steps run
  int64_t prefill_tokens = 0;                     // prompt tokens run through the model (shared prefill counts once)
  bool finished(size_t row) const { return finish.at(row) != FinishReason::Length; }
};

// The tokens no_repeat_ngram_size and bad_words_ids forbid next after
// `sequence` (the prompt and the completion so far).
std::vector<int64_t> banned_after(const std::vector<int64_t>& sequence, const GenerationOptions& o);

// Whether banned_after can forbid anything under `o`.
bool bans_by_sequence(const GenerationOptions& o);

// Applies, in transformers' order, the repetition penalty (for the tokens in
// `seen` [B, S], undefined: none), the bans (`banned`, per row, from
// banned_after; empty: none), suppress_tokens, then with sampling
// temperature, top-k, top-p and min-p, to logits [B, V].
torch::Tensor process_logits(torch::Tensor logits, const torch::Tensor& seen, const GenerationOptions& o,
                             const std::vector<std::vector<int64_t>>& banned = {});

// A stop rule (GenerationOptions::stop) that ends a completion when any of
// `stops` appears in its text, checked on the last tokens only (as many as
// the longest stop string has bytes, and one more), so each check costs the
// same however long the completion is. `decode` turns ids into text.
std::function<bool(const std::vector<int64_t>&)> stop_on_strings(
    std::vector<std::string> stops, std::function<std::string(const std::vector<int64_t>&)> decode);

// Checks the options against a model of `vocab_size` tokens: InputError
// naming the field (max_new_tokens, top_p, top_k, temperature, min_p,
// repetition_penalty, a stop or eos token id, num_return_sequences,
// no_repeat_ngram_size, bad_words_ids, suppress_tokens).
void validate_generation_options(const GenerationOptions& o, int64_t vocab_size);

// Runs without gradients; the caller chooses the model's mode (eval for
// generation) and precision.
Generation generate(LanguageModelImpl& model, const std::vector<std::vector<int64_t>>& prompts,
                    const GenerationOptions& options);

}  // namespace trlx::model
