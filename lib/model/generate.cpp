// The one batched generator (KV cache, sampling) that `trlx generate` and the online trainers use.
#include "model/generate.hpp"

#include <ATen/CPUGeneratorImpl.h>

#include <cmath>
#include <cstdlib>
#include <string>
#include <algorithm>
#include <limits>
#include <deque>
#include <mutex>
#include <optional>

#include "core/error.hpp"
#include "core/log.hpp"

#if defined(USE_C10D_NCCL)
#include <ATen/cuda/CUDAEvent.h>
#include <ATen/cuda/CUDAGraph.h>
#include <c10/cuda/CUDAGuard.h>
#include <c10/cuda/CUDAStream.h>
#endif

namespace trlx::model {

bool bans_by_sequence(const GenerationOptions& o) { return o.no_repeat_ngram_size > 0 || !o.bad_words_ids.empty(); }

std::vector<int64_t> banned_after(const std::vector<int64_t>& sequence, const GenerationOptions& o) {
  std::vector<int64_t> out;
  const auto len = static_cast<int64_t>(sequence.size());
  // An n-gram ending in the next token is banned when its first n-1 tokens
  // (the sequence's last n-1) occurred before, followed by that token.
  const int64_t n = o.no_repeat_ngram_size;
  if (n > 0 && len + 1 >= n) {
    const auto tail = sequence.end() - (n - 1);
    for (int64_t start = 0; start + n <= len; ++start) {
      const auto at = sequence.begin() + start;
      if (std::equal(at, at + (n - 1), tail)) out.push_back(*(at + (n - 1)));
    }
  }
  for (const auto& words : o.bad_words_ids) {
    const auto prefix = static_cast<int64_t>(words.size()) - 1;
    if (prefix < 0 || prefix > len) continue;
    if (words.size() == 1 &&
        std::find(o.eos_token_ids.begin(), o.eos_token_ids.end(), words[0]) != o.eos_token_ids.end())
      continue;  // an eos id alone is never banned
    if (std::equal(words.begin(), words.end() - 1, sequence.end() - prefix)) out.push_back(words.back());
  }
  return out;
}

torch::Tensor process_logits(torch::Tensor logits, const torch::Tensor& seen, const GenerationOptions& o,
                             const std::vector<std::vector<int64_t>>& banned) {
  const double neg_inf = -std::numeric_limits<double>::infinity();
  if (o.repetition_penalty != 1.0 && seen.defined() && seen.numel() > 0) {
    auto score = logits.gather(1, seen);
    score = torch::where(score < 0, score * o.repetition_penalty, score / o.repetition_penalty);
    logits = logits.scatter(1, seen, score);
  }
  // no_repeat_ngram_size and bad_words_ids, then suppress_tokens: each sets
  // its tokens to -inf, before the sampling warpers (transformers' order).
  std::vector<int64_t> rows, cols;
  for (size_t r = 0; r < banned.size(); ++r)
    for (int64_t t : banned[r]) {
      rows.push_back(static_cast<int64_t>(r));
      cols.push_back(t);
    }
  if (!rows.empty()) {
    const auto device = logits.device();
    logits = logits.index_put({torch::tensor(rows).to(device), torch::tensor(cols).to(device)},
                              torch::full({}, neg_inf, logits.options()));
  }
  if (!o.suppress_tokens.empty())
    logits = logits.index_fill(1, torch::tensor(o.suppress_tokens).to(logits.device()), neg_inf);
  if (!o.do_sample) return logits;
  if (o.temperature != 1.0) logits = logits / o.temperature;
  if (o.top_k > 0) {
    const int64_t k = std::min<int64_t>(o.top_k, logits.size(-1));
    auto kth = std::get<0>(logits.topk(k, -1)).narrow(-1, k - 1, 1);
    logits = logits.masked_fill(logits < kth, neg_inf);
  }
  if (o.top_p < 1.0) {
    auto [sorted, idx] = logits.sort(-1, /*descending=*/false);
    auto cum = sorted.softmax(-1).cumsum(-1);
    auto remove = cum <= (1.0 - o.top_p);
    remove.narrow(-1, remove.size(-1) - 1, 1).fill_(false);  // keep at least one token
    logits = logits.masked_fill(remove.scatter(-1, idx, remove), neg_inf);
  }
  if (o.min_p) {
    auto probs = logits.softmax(-1);
    auto top = std::get<0>(probs.max(-1, /*keepdim=*/true));
    auto remove = probs < (*o.min_p * top);
    auto order = logits.argsort(-1, /*descending=*/true);
    auto sorted_remove = remove.gather(-1, order);
    sorted_remove.narrow(-1, 0, 1).fill_(false);  // keep the most likely token
    logits = logits.masked_fill(sorted_remove.scatter(-1, order, sorted_remove), neg_inf);
  }
  return logits;
}

std::function<bool(const std::vector<int64_t>&)> stop_on_strings(
    std::vector<std::string> stops, std::function<std::string(const std::vector<int64_t>&)> decode) {
  size_t longest = 0;
  for (const auto& s : stops) longest = std::max(longest, s.size());
  // Every token is at least one byte of text, so a stop string that ends in
  // the newest token lies within the last `longest` + 1 tokens; an earlier
  // one was found at an earlier step.
  const size_t window = longest + 1;
  return [stops = std::move(stops), decode = std::move(decode), window](const std::vector<int64_t>& completion) {
    const size_t from = completion.size() > window ? completion.size() - window : 0;
    const std::string text = decode(std::vector<int64_t>(completion.begin() + static_cast<std::ptrdiff_t>(from),
                                                         completion.end()));
    for (const auto& s : stops)
      if (!s.empty() && text.find(s) != std::string::npos) return true;
    return false;
  };
}

const char* finish_reason_name(FinishReason r) {
  switch (r) {
    case FinishReason::Eos: return "eos";
    case FinishReason::Stop: return "stop";
    case FinishReason::Length: return "length";
  }
  return "length";
}

void validate_generation_options(const GenerationOptions& o, int64_t vocab_size) {
  if (o.max_new_tokens < 1)
    fail_input("max_new_tokens (max_completion_length) must be at least 1, got {}", o.max_new_tokens);
  if (o.num_return_sequences < 1)
    fail_input("num_return_sequences (num_generations) must be at least 1, got {}", o.num_return_sequences);
  if (o.max_batch < 0) fail_input("the generation batch must be at least 1 row (0: every row at once), got {}", o.max_batch);
  if (!(o.temperature > 0) || !std::isfinite(o.temperature))
    fail_input("temperature must be a finite number above 0, got {}", o.temperature);
  if (o.top_k < 0) fail_input("top_k must be 0 (off) or more, got {}", o.top_k);
  if (!(o.top_p > 0 && o.top_p <= 1)) fail_input("top_p must be in (0, 1], got {}", o.top_p);
  if (o.min_p && !(*o.min_p >= 0 && *o.min_p <= 1)) fail_input("min_p must be in [0, 1], got {}", *o.min_p);
  if (!(o.repetition_penalty > 0) || !std::isfinite(o.repetition_penalty))
    fail_input("repetition_penalty must be a finite number above 0, got {}", o.repetition_penalty);
  auto check_ids = [&](const std::vector<int64_t>& ids, const char* field) {
    for (int64_t id : ids)
      if (id < 0 || id >= vocab_size)
        fail_input("{}: token id {} is outside the model's vocabulary (0..{})", field, id, vocab_size - 1);
  };
  check_ids(o.eos_token_ids, "eos_token_id");
  check_ids(o.suppress_tokens, "suppress_tokens");
  if (o.no_repeat_ngram_size < 0)
    fail_input("no_repeat_ngram_size must be 0 (off) or more, got {}", o.no_repeat_ngram_size);
  for (const auto& words : o.bad_words_ids) {
    if (words.empty()) fail_input("bad_words_ids: each entry is a non-empty list of token ids; one is empty");
    check_ids(words, "bad_words_ids");
  }
  check_ids(o.stop_token_ids, "stop_token_ids");
  check_ids({o.pad_token_id}, "pad_token_id");
}

namespace {

// Draws from the sampling distribution where the logits are: on the CPU from
// a generator of its own; on a GPU from the device's generator, seeded for
// this call and put back as it was afterwards (so a training run's dropout
// draws are unchanged), instead of copying [rows x vocab] to the host.
class Sampler {
 public:
  Sampler(const torch::Device& device, const GenerationOptions& o) : cpu_(at::detail::createCPUGenerator(o.seed)) {
    if (o.do_sample && !device.is_cpu()) {
      device_ = at::globalContext().defaultGenerator(device);
      std::lock_guard<std::mutex> lock(device_->mutex());
      saved_ = device_->get_state();
      device_->set_current_seed(o.seed);
    }
  }
  ~Sampler() {
    if (!device_) return;
    std::lock_guard<std::mutex> lock(device_->mutex());
    device_->set_state(saved_);
  }
  Sampler(const Sampler&) = delete;
  Sampler& operator=(const Sampler&) = delete;

  // A draw per row by inverting the distribution's cumulative sum with one
  // uniform number (in float64, so that no token's share is lost to
  // rounding): torch::multinomial draws an exponential number per
  // vocabulary entry instead, a third of a decode step's time at a 151k
  // vocabulary on a CPU. Tokens with probability 0 are never drawn.
  torch::Tensor next(const torch::Tensor& scores, bool sample) {
    if (!sample) return scores.argmax(-1);
    auto& gen = device_ ? *device_ : cpu_;
    const auto cdf = scores.softmax(-1).to(torch::kFloat64).cumsum(-1);
    const auto total = cdf.narrow(-1, cdf.size(-1) - 1, 1);
    const auto u = at::rand({scores.size(0), 1}, gen, cdf.options()) * total;
    return torch::searchsorted(cdf, u, /*out_int32=*/false, /*right=*/true)
        .squeeze(1)
        .clamp_max(scores.size(-1) - 1);
  }

 private:
  at::Generator cpu_;
  std::optional<at::Generator> device_;
  torch::Tensor saved_;
};

// TRLX_CUDA_GRAPHS=1: decode steps replayed as CUDA graphs where they can be.
bool cuda_graphs_requested() {
  const char* v = std::getenv("TRLX_CUDA_GRAPHS");
  return v && std::string(v) == "1";
}

// A round's decode step (model forward and head over fixed inputs) captured
// once and replayed every step; `run` computes the step's logits from the
// inputs it reads in place.
class DecodeGraph {
 public:
#if defined(USE_C10D_NCCL)
  torch::Tensor replay(const std::function<torch::Tensor()>& run) {
    if (!out_.defined()) {
      // Captured on a side stream after two warm-up runs (as PyTorch's
      // graph capture wants), ordered after the work queued so far.
      auto current = c10::cuda::getCurrentCUDAStream();
      auto side = c10::cuda::getStreamFromPool();
      at::cuda::CUDAEvent before, after;
      before.record(current);
      before.block(side);
      {
        c10::cuda::CUDAStreamGuard guard(side);
        for (int i = 0; i < 2; ++i) run();
        graph_.capture_begin();
        out_ = run();
        graph_.capture_end();
      }
      after.record(side);
      after.block(current);
      // Once per process: what gpu_check looks for, and a user can see.
      static std::once_flag said;
      std::call_once(said, [] { log::info("TRLX_CUDA_GRAPHS: decode steps captured as a CUDA graph and replayed"); });
    }
    graph_.replay();
    return out_;
  }

 private:
  at::cuda::CUDAGraph graph_;
  torch::Tensor out_;
#else
  torch::Tensor replay(const std::function<torch::Tensor()>& run) { return run(); }
#endif
};

// One slot of the KV cache: which output row it generates, and how far.
struct Slot {
  int64_t row = -1;     // -1: free
  int64_t length = 0;   // tokens in the cache (the next token's position)
};

}  // namespace

Generation generate(LanguageModelImpl& model, const std::vector<std::vector<int64_t>>& prompts,
                    const GenerationOptions& o) {
  const int64_t vocab = model.config().vocab_size;
  validate_generation_options(o, vocab);
  const int64_t n = o.num_return_sequences;
  const int64_t num_prompts = static_cast<int64_t>(prompts.size());
  const int64_t rows = num_prompts * n;
  if (!o.max_new_tokens_per_prompt.empty() && o.max_new_tokens_per_prompt.size() != prompts.size())
    throw Error(fmt::format("generate: {} per-prompt token limits for {} prompts", o.max_new_tokens_per_prompt.size(),
                            prompts.size()));
  auto limit_of = [&](int64_t prompt) {
    return o.max_new_tokens_per_prompt.empty()
               ? o.max_new_tokens
               : std::min(o.max_new_tokens, o.max_new_tokens_per_prompt[static_cast<size_t>(prompt)]);
  };
  int64_t longest = 1;
  for (size_t i = 0; i < prompts.size(); ++i) {
    const auto len = static_cast<int64_t>(prompts[i].size());
    if (len == 0) fail_input("generate: prompt {} is empty (every prompt needs at least one token)", i);
    for (int64_t id : prompts[i])
      if (id < 0 || id >= vocab)
        fail_input("generate: prompt {} holds token id {}, outside the model's vocabulary (0..{})", i, id, vocab - 1);
    const int64_t limit = limit_of(static_cast<int64_t>(i));
    // Compared without forming len + limit: a limit near 2^63 would overflow it.
    if (o.max_context > 0 && limit > o.max_context - len)
      fail_input("generate: prompt {} has {} tokens; with max_new_tokens {} it needs {} positions, beyond the model's "
                 "context of {} (max_position_embeddings): shorten the prompt (max_prompt_length) or max_new_tokens",
                 i, len, limit,
                 limit > std::numeric_limits<int64_t>::max() - len ? std::string("more than 2^63")
                                                                   : std::to_string(len + limit),
                 o.max_context);
    longest = std::max(longest, len);
  }
  const bool lockstep = static_cast<bool>(o.max_across_ranks);
  Generation out;
  out.completions.assign(static_cast<size_t>(rows), {});
  out.finish.assign(static_cast<size_t>(rows), FinishReason::Length);
  if (rows == 0 && !lockstep) return out;

  // Slots: every row at once, or max_batch rounded up to whole prompts.
  int64_t num_slots = o.max_batch > 0 ? (o.max_batch + n - 1) / n * n : rows;
  num_slots = std::max<int64_t>(std::min(num_slots, rows), n);
  const int64_t capacity = longest + o.max_new_tokens;
  const auto device = model.model->embed_tokens->weight.device();
  const auto i64 = torch::dtype(torch::kInt64);

  torch::NoGradGuard no_grad;
  // Fixed shapes (and, on a GPU when asked, a captured decode step).
  const auto& rope = model.config().rope.type;
  const bool graphs = cuda_graphs_requested() && device.is_cuda() && !lockstep && !model.model->sharding_hooks() &&
                      rope != "dynamic" && rope != "longrope" && model.config().num_experts == 0;
#if !defined(USE_C10D_NCCL)
  if (graphs) log::warn("TRLX_CUDA_GRAPHS=1: this build has no CUDA graph support; decode steps run one by one");
#endif
  const bool fixed = o.fixed_shapes || graphs;
  std::optional<DecodeGraph> graph;
  if (graphs) graph.emplace();
  torch::Tensor step_ids, step_positions;  // fixed: the decode step's inputs, written in place
  Sampler sampler(device, o);
  KVCache cache(model.config().num_hidden_layers, num_slots, capacity);
  std::vector<Slot> slots(static_cast<size_t>(num_slots));
  const bool penalise = o.repetition_penalty != 1.0;
  torch::Tensor logits = torch::zeros({num_slots, vocab}, torch::dtype(torch::kFloat32).device(device));
  torch::Tensor seen;  // [slots, capacity]: the prompt and completion tokens (repetition penalty)
  if (penalise) seen = torch::zeros({num_slots, capacity}, i64.device(device));
  auto head_of = [&](const torch::Tensor& hidden) { return model.head(hidden).to(torch::kFloat32); };

  std::deque<int64_t> waiting;
  for (int64_t p = 0; p < num_prompts; ++p) waiting.push_back(p);
  int64_t carried = 0;  // rows that sampled a token last step and go on
  int64_t done_rows = 0, tokens = 0;
  for (;;) {
    // Slots of rows that finished last step take waiting prompts, each with
    // all its samples.
    std::vector<int64_t> admitted, admitted_slots, admitted_sources;
    {
      std::vector<int64_t> free;
      for (int64_t s = 0; s < num_slots; ++s)
        if (slots[static_cast<size_t>(s)].row < 0) free.push_back(s);
      size_t next_free = 0;
      while (!waiting.empty() && static_cast<int64_t>(free.size() - next_free) >= n) {
        const int64_t p = waiting.front();
        waiting.pop_front();
        for (int64_t j = 0; j < n; ++j) {
          const int64_t s = free[next_free++];
          slots[static_cast<size_t>(s)] = {p * n + j, static_cast<int64_t>(prompts[static_cast<size_t>(p)].size())};
          admitted_slots.push_back(s);
          admitted_sources.push_back(static_cast<int64_t>(admitted.size()));
        }
        admitted.push_back(p);
      }
    }
    bool decode = carried > 0, prefill = !admitted.empty();
    if (lockstep) {
      std::vector<double> v = {decode ? 1.0 : 0.0, prefill ? 1.0 : 0.0};
      o.max_across_ranks(v);
      decode = v[0] > 0;
      prefill = v[1] > 0;
    }
    if (!decode && !prefill) break;

    if (decode) {
      // One token for every slot: the rows that go on feed their last token
      // at its position; other slots run a pad token at position 0, which
      // no live row reads.
      std::vector<int64_t> tok(static_cast<size_t>(num_slots), o.pad_token_id), pos(static_cast<size_t>(num_slots), 0);
      int64_t read = 1;
      for (int64_t s = 0; s < num_slots; ++s) {
        auto& sl = slots[static_cast<size_t>(s)];
        if (sl.row < 0 || out.completions[static_cast<size_t>(sl.row)].empty())
          continue;  // free, or admitted this step (its prefill gives its logits)
        tok[static_cast<size_t>(s)] = out.completions[static_cast<size_t>(sl.row)].back();
        pos[static_cast<size_t>(s)] = sl.length;
        sl.length += 1;
        read = std::max(read, sl.length);
      }
      cache.mode = KVCache::Mode::Decode;
      if (fixed) {
        if (!step_ids.defined()) {
          step_ids = torch::empty({num_slots, 1}, i64.device(device));
          step_positions = torch::empty({num_slots}, i64.device(device));
        }
        step_ids.copy_(torch::tensor(tok, i64).view({num_slots, 1}));
        step_positions.copy_(torch::tensor(pos, i64));
        cache.positions = step_positions;
        cache.read_length = capacity;
        auto run = [&] { return head_of(model.hidden_states({step_ids, {}, {}}, &cache)).select(1, 0); };
        logits = graph ? graph->replay(run) : run();
      } else {
        cache.positions = torch::tensor(pos, i64).to(device);
        cache.read_length = read;
        auto ids = torch::tensor(tok, i64).view({num_slots, 1}).to(device);
        logits = head_of(model.hidden_states({ids, {}, {}}, &cache)).select(1, 0);
      }
    }
    if (prefill) {
      // The admitted prompts, right-padded, in one forward; each prompt's
      // last-token logits and keys go to all its samples' slots.
      const int64_t a = std::max<int64_t>(static_cast<int64_t>(admitted.size()), 1);
      int64_t width = 1;
      for (int64_t p : admitted) width = std::max<int64_t>(width, static_cast<int64_t>(prompts[static_cast<size_t>(p)].size()));
      auto ids = torch::full({a, width}, o.pad_token_id, i64);
      auto mask = torch::zeros({a, width}, i64);
      std::vector<int64_t> last(static_cast<size_t>(a), 0);
      for (size_t i = 0; i < admitted.size(); ++i) {
        const auto& p = prompts[static_cast<size_t>(admitted[i])];
        const auto len = static_cast<int64_t>(p.size());
        ids[static_cast<int64_t>(i)].narrow(0, 0, len).copy_(torch::tensor(p, i64));
        mask[static_cast<int64_t>(i)].narrow(0, 0, len).fill_(1);
        last[i] = len - 1;
        out.prefill_tokens += len;
      }
      cache.mode = KVCache::Mode::Prefill;
      cache.sources = torch::tensor(admitted_sources, i64).to(device);
      cache.slots = torch::tensor(admitted_slots, i64).to(device);
      Batch batch{ids.to(device), mask.to(device), {}};
      batch.padding_trails = true;
      auto hidden = model.hidden_states(batch, &cache);
      auto at_last = hidden.index({torch::arange(a, i64.device(device)), torch::tensor(last, i64).to(device)});
      auto first = head_of(at_last);
      if (!admitted.empty()) {
        logits.index_copy_(0, cache.slots, first.index_select(0, cache.sources));
        if (penalise) {
          auto rows_seen = ids.clone();
          for (size_t i = 0; i < admitted.size(); ++i)  // padding repeats a prompt token: no new token penalised
            rows_seen[static_cast<int64_t>(i)].masked_fill_(mask[static_cast<int64_t>(i)] == 0, ids[static_cast<int64_t>(i)][0]);
          auto wide = rows_seen.index_select(0, cache.sources.cpu()).to(device);
          auto fill = wide.narrow(1, 0, 1).expand({wide.size(0), capacity}).clone();
          fill.narrow(1, 0, width).copy_(wide);
          seen.index_copy_(0, cache.slots, fill);
        }
      }
    }

    // Sample the next token of every live row.
    int64_t live = 0;
    for (const auto& sl : slots) live += sl.row >= 0 ? 1 : 0;
    if (live > 0) {
      // The sequence rules read each live row's prompt and completion so far.
      std::vector<std::vector<int64_t>> banned;
      if (bans_by_sequence(o)) {
        banned.resize(static_cast<size_t>(num_slots));
        std::vector<int64_t> sequence;
        for (int64_t s = 0; s < num_slots; ++s) {
          const auto& sl = slots[static_cast<size_t>(s)];
          if (sl.row < 0) continue;
          const auto& prompt = prompts[static_cast<size_t>(sl.row / n)];
          const auto& sofar = out.completions[static_cast<size_t>(sl.row)];
          sequence.assign(prompt.begin(), prompt.end());
          sequence.insert(sequence.end(), sofar.begin(), sofar.end());
          banned[static_cast<size_t>(s)] = banned_after(sequence, o);
        }
      }
      auto next = sampler.next(process_logits(logits, seen, o, banned), o.do_sample);
      auto host = next.to(torch::kCPU);
      const auto* nx = host.data_ptr<int64_t>();
      std::vector<int64_t> at(static_cast<size_t>(num_slots), 0);
      carried = 0;
      for (int64_t s = 0; s < num_slots; ++s) {
        auto& sl = slots[static_cast<size_t>(s)];
        if (sl.row < 0) continue;
        const auto r = static_cast<size_t>(sl.row);
        auto& c = out.completions[r];
        const int64_t token = nx[s];
        c.push_back(token);
        at[static_cast<size_t>(s)] = sl.length;
        ++tokens;
        std::optional<FinishReason> why;
        if (std::find(o.eos_token_ids.begin(), o.eos_token_ids.end(), token) != o.eos_token_ids.end())
          why = FinishReason::Eos;
        else if (std::find(o.stop_token_ids.begin(), o.stop_token_ids.end(), token) != o.stop_token_ids.end() ||
                 (o.stop && o.stop(c)))
          why = FinishReason::Stop;
        else if (static_cast<int64_t>(c.size()) >= limit_of(static_cast<int64_t>(r) / n))
          why = FinishReason::Length;
        if (why) {
          out.finish[r] = *why;
          sl.row = -1;
          ++done_rows;
        } else {
          ++carried;
        }
      }
      if (penalise) seen.scatter_(1, torch::tensor(at, i64).view({-1, 1}).to(device), next.view({-1, 1}));
      ++out.steps;
      if (o.progress) o.progress(tokens, done_rows, rows);
    }

    // With no prompt left to admit and most slots idle, the cache keeps
    // only the live rows, so the decode steps left stop paying for the rest.
    // (Not with fixed shapes: the step's shapes stay those of the round.)
    if (!fixed && waiting.empty() && carried > 0 && carried * 2 <= num_slots && num_slots > n) {
      std::vector<int64_t> kept;
      std::vector<Slot> compact;
      for (int64_t s = 0; s < num_slots; ++s)
        if (slots[static_cast<size_t>(s)].row >= 0) {
          kept.push_back(s);
          compact.push_back(slots[static_cast<size_t>(s)]);
        }
      cache.keep_slots(kept);
      auto idx = torch::tensor(kept, i64).to(device);
      logits = logits.index_select(0, idx);
      if (penalise) seen = seen.index_select(0, idx);
      slots = std::move(compact);
      num_slots = static_cast<int64_t>(kept.size());
    }
  }
  return out;
}

}  // namespace trlx::model
