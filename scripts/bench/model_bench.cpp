// Times trlx's model: forward throughput, greedy generation and checkpoint
// loading. scripts/bench/bench_model.sh runs it beside transformers.
//   model_bench forward  DIR BATCH SEQ ITERS THREADS
//   model_bench generate DIR PROMPT_LEN NEW_TOKENS ITERS THREADS
//   model_bench load     DIR ITERS THREADS
#include <ATen/Parallel.h>

#include <chrono>
#include <iostream>

#include "model/generate.hpp"
#include "model/loading.hpp"

using namespace trlx;
using Clock = std::chrono::steady_clock;

static double seconds_since(Clock::time_point t) { return std::chrono::duration<double>(Clock::now() - t).count(); }

int main(int argc, char** argv) {
  if (argc < 4) {
    std::cerr << "usage: model_bench forward|generate|load DIR ...\n";
    return 2;
  }
  const std::string mode = argv[1], dir = argv[2];
  at::set_num_threads(std::stoi(argv[argc - 1]));
  torch::NoGradGuard no_grad;
  if (mode == "load") {
    const int iters = std::stoi(argv[3]);
    double best = 1e9;
    for (int i = 0; i < iters; ++i) {
      auto t = Clock::now();
      auto m = model::load_language_model(dir, model::HeadKind::CausalLM);
      best = std::min(best, seconds_since(t));
    }
    std::cout << "load_s " << best << "\n";
    return 0;
  }
  auto m = model::load_language_model(dir, model::HeadKind::CausalLM);
  torch::manual_seed(0);
  if (mode == "forward") {
    const int64_t b = std::stoll(argv[3]), t = std::stoll(argv[4]);
    const int iters = std::stoi(argv[5]);
    auto ids = torch::randint(0, m->config().vocab_size, {b, t}, torch::kInt64);
    m->forward({ids, {}, {}});  // warm-up
    auto start = Clock::now();
    for (int i = 0; i < iters; ++i) m->forward({ids, {}, {}});
    const double s = seconds_since(start);
    std::cout << "forward_tokens_per_s " << static_cast<double>(b * t * iters) / s << "\n";
  } else if (mode == "generate") {
    const int64_t plen = std::stoll(argv[3]), n = std::stoll(argv[4]);
    const int iters = std::stoi(argv[5]);
    std::vector<int64_t> prompt(static_cast<size_t>(plen));
    for (int64_t i = 0; i < plen; ++i) prompt[static_cast<size_t>(i)] = 3 + i;
    model::GenerationOptions o;
    o.max_new_tokens = n;  // no eos: always the full length
    model::generate(*m, {prompt}, o);
    auto start = Clock::now();
    int64_t total = 0;
    for (int i = 0; i < iters; ++i) total += static_cast<int64_t>(model::generate(*m, {prompt}, o).completions[0].size());
    std::cout << "generate_tokens_per_s " << static_cast<double>(total) / seconds_since(start) << "\n";
  }
  return 0;
}
