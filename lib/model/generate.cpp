#include "model/generate.hpp"

#include <ATen/CPUGeneratorImpl.h>

#include <mutex>
#include <optional>

#include "core/error.hpp"

namespace trlx::model {

torch::Tensor process_logits(torch::Tensor logits, const torch::Tensor& seen, const GenerationOptions& o) {
  const double neg_inf = -std::numeric_limits<double>::infinity();
  if (o.repetition_penalty != 1.0 && seen.defined() && seen.numel() > 0) {
    auto score = logits.gather(1, seen);
    score = torch::where(score < 0, score * o.repetition_penalty, score / o.repetition_penalty);
    logits = logits.scatter(1, seen, score);
  }
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

Generation generate(LanguageModelImpl& model, const std::vector<std::vector<int64_t>>& prompts,
                    const GenerationOptions& o) {
  Generation out;
  const int64_t b = static_cast<int64_t>(prompts.size());
  if (b == 0) return out;
  size_t width = 0;
  for (const auto& p : prompts) {
    if (p.empty()) fail_input("generate: an empty prompt (every prompt needs at least one token)");
    width = std::max(width, p.size());
  }
  const auto device = model.head_weight().device();
  // Left padding: every row's last prompt token sits in the last column.
  auto ids = torch::full({b, static_cast<int64_t>(width)}, o.pad_token_id, torch::kInt64);
  auto mask = torch::zeros({b, static_cast<int64_t>(width)}, torch::kInt64);
  for (int64_t r = 0; r < b; ++r) {
    const auto& p = prompts[static_cast<size_t>(r)];
    const int64_t off = static_cast<int64_t>(width - p.size());
    ids[r].narrow(0, off, static_cast<int64_t>(p.size())).copy_(torch::tensor(p, torch::kInt64));
    mask[r].narrow(0, off, static_cast<int64_t>(p.size())).fill_(1);
  }
  ids = ids.to(device);
  mask = mask.to(device);

  torch::NoGradGuard no_grad;
  // Sampling draws where the logits are. On the CPU from a generator of its
  // own; on a GPU from the device's generator, seeded for this call and put
  // back as it was after (so a training run's dropout draws are unchanged),
  // instead of copying [batch x vocab] probabilities to the host per token.
  at::Generator gen = at::detail::createCPUGenerator(o.seed);
  std::optional<at::Generator> device_gen;
  torch::Tensor device_gen_state;
  if (o.do_sample && !device.is_cpu()) {
    device_gen = at::globalContext().defaultGenerator(device);
    std::lock_guard<std::mutex> lock(device_gen->mutex());
    device_gen_state = device_gen->get_state();
    device_gen->set_current_seed(o.seed);
  }
  struct RestoreGenerator {
    std::optional<at::Generator>& g;
    torch::Tensor& state;
    ~RestoreGenerator() {
      if (!g) return;
      std::lock_guard<std::mutex> lock(g->mutex());
      g->set_state(state);
    }
  } restore{device_gen, device_gen_state};
  KVCache cache;
  auto hidden = model.hidden_states({ids, mask, {}}, &cache);
  auto logits = model.head(hidden.select(1, hidden.size(1) - 1)).to(torch::kFloat32);
  auto seen = ids;
  out.completions.assign(static_cast<size_t>(b), {});
  out.finished.assign(static_cast<size_t>(b), false);
  auto eos = o.eos_token_ids.empty() ? torch::Tensor() : torch::tensor(o.eos_token_ids, torch::kInt64).to(device);
  for (int64_t step = 0; step < o.max_new_tokens; ++step) {
    auto scores = process_logits(logits, seen, o);
    torch::Tensor next;
    if (o.do_sample) {
      auto probs = scores.softmax(-1);
      next = torch::multinomial(probs, 1, /*replacement=*/false, device_gen ? *device_gen : gen).squeeze(1);
    } else {
      next = scores.argmax(-1);
    }
    auto next_cpu = next.to(torch::kCPU);
    const auto* nx = next_cpu.data_ptr<int64_t>();
    bool all_done = true;
    for (int64_t r = 0; r < b; ++r) {
      const auto ru = static_cast<size_t>(r);
      if (out.finished[ru]) {
        next_cpu[r] = o.pad_token_id;
        continue;
      }
      out.completions[ru].push_back(nx[r]);
      for (int64_t e : o.eos_token_ids) out.finished[ru] = out.finished[ru] || nx[r] == e;
      if (!out.finished[ru] && o.stop && o.stop(out.completions[ru])) out.finished[ru] = true;
      all_done = all_done && out.finished[ru];
    }
    out.steps = step + 1;
    if (all_done || step + 1 == o.max_new_tokens) break;
    next = next_cpu.to(device).unsqueeze(1);
    if (o.repetition_penalty != 1.0) seen = torch::cat({seen, next}, 1);
    hidden = model.hidden_states({next, torch::ones_like(next), {}}, &cache);
    logits = model.head(hidden.select(1, 0)).to(torch::kFloat32);
  }
  return out;
}

}  // namespace trlx::model
