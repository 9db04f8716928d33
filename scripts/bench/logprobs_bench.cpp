// Peak memory and time of one log-prob forward+backward through
// losses::token_logprobs. scripts/bench/bench_logprobs.sh runs it once per
// path, each in its own process, beside the same math in PyTorch.
//   logprobs_bench plain|chunked VOCAB SEQ HIDDEN CHUNK THREADS
// Prints "peak_delta_mib X" (peak resident memory of the process minus its
// peak once the inputs exist) and "seconds X".
#include <ATen/Parallel.h>
#include <sys/resource.h>

#include <chrono>
#include <iostream>
#include <string>

#include <torch/torch.h>

#include "losses/logprobs.hpp"

using namespace trlx;

static double peak_rss_mib() {
  rusage u{};
  getrusage(RUSAGE_SELF, &u);
  return static_cast<double>(u.ru_maxrss) / 1024.0;  // ru_maxrss is KiB on Linux
}

int main(int argc, char** argv) {
  if (argc != 7) {
    std::cerr << "usage: logprobs_bench plain|chunked VOCAB SEQ HIDDEN CHUNK THREADS\n";
    return 2;
  }
  const std::string mode = argv[1];
  const int64_t vocab = std::stoll(argv[2]), seq = std::stoll(argv[3]), hidden_size = std::stoll(argv[4]);
  const int64_t chunk = std::stoll(argv[5]);
  at::set_num_threads(std::stoi(argv[6]));
  torch::manual_seed(0);
  auto hidden = torch::randn({1, seq, hidden_size}).requires_grad_(true);
  auto weight = torch::randn({vocab, hidden_size}).mul_(0.02).requires_grad_(true);  // in place: no second copy
  auto targets = torch::randint(0, vocab, {1, seq}, torch::kInt64);
  auto mask = torch::ones({1, seq}, torch::kInt64);
  const double baseline = peak_rss_mib();

  losses::LogProbOptions o;
  o.chunk_size = mode == "chunked" ? chunk : 0;
  const auto start = std::chrono::steady_clock::now();
  auto out = losses::token_logprobs(hidden, weight, targets, mask, o);
  out.logps.sum().backward();
  const double seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
  // The result and the gradients are still alive when the peak is read.
  const double peak = peak_rss_mib() - baseline;
  std::cout << "check " << out.logps.sum().item<double>() << " " << weight.grad().abs().sum().item<double>() << "\n";
  std::cout << "peak_delta_mib " << peak << "\n";
  std::cout << "seconds " << seconds << "\n";
  return 0;
}
