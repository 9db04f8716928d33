// scripts/bench/bench_adamw.sh's driver: the AdamW step on the parameters of
// the ~25M-parameter model of bench_sft.sh (hidden 512, MLP 1536, 8 layers,
// 8 heads / 4 KV heads, 304-token tied embedding), torch::optim::AdamW::step()
// against trlx's fused step (engine/fused_adamw), alternating over REPEATS,
// each side on its own copy of the same parameters, gradients and state.
// Prints each side's median and spread (ms), the ratio, the load, and the
// largest difference between the two sides' parameters at the end.
#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <fstream>
#include <string>
#include <vector>

#include <torch/torch.h>

#include "engine/fused_adamw.hpp"

namespace {

std::vector<std::vector<int64_t>> shapes() {
  const int64_t h = 512, mlp = 1536, kv = 256, vocab = 304, layers = 8;
  std::vector<std::vector<int64_t>> out = {{vocab, h}};
  for (int64_t l = 0; l < layers; ++l) {
    for (auto s : std::vector<std::vector<int64_t>>{{h, h}, {h}, {kv, h}, {kv}, {kv, h}, {kv}, {h, h}, {mlp, h},
                                                    {mlp, h}, {h, mlp}, {h}, {h}})
      out.push_back(s);
  }
  out.push_back({h});
  return out;
}

struct Side {
  std::vector<torch::Tensor> params;
  std::unique_ptr<torch::optim::AdamW> opt;
};

Side make_side() {
  torch::manual_seed(1);
  Side s;
  for (const auto& shape : shapes()) {
    s.params.push_back(torch::randn(shape).mul_(0.02).requires_grad_(true));
    s.params.back().mutable_grad() = torch::randn(shape).mul_(0.01);
  }
  s.opt = std::make_unique<torch::optim::AdamW>(
      s.params, torch::optim::AdamWOptions(1e-4).betas({0.9, 0.999}).eps(1e-8).weight_decay(0.01));
  return s;
}

double median(std::vector<double> v) {
  std::sort(v.begin(), v.end());
  return v[v.size() / 2];
}

std::string load() {
  std::ifstream in("/proc/loadavg");
  std::string a;
  in >> a;
  return a;
}

}  // namespace

int main() {
  const int repeats = std::getenv("REPEATS") ? std::atoi(std::getenv("REPEATS")) : 15;
  Side plain = make_side(), fused = make_side();
  int64_t n = 0;
  for (const auto& p : plain.params) n += p.numel();
  using Clock = std::chrono::steady_clock;
  auto ms = [](Clock::time_point a) { return std::chrono::duration<double, std::milli>(Clock::now() - a).count(); };
  // One warm-up step each (state allocation).
  plain.opt->step();
  trlx::engine::fused_adamw_step(*fused.opt);
  std::vector<double> tp, tf;
  const std::string load_before = load();
  for (int r = 0; r < repeats; ++r) {
    // Alternate which side goes first.
    for (int k = 0; k < 2; ++k) {
      const bool do_fused = (r + k) % 2 == 1;
      const auto t0 = Clock::now();
      if (do_fused)
        trlx::engine::fused_adamw_step(*fused.opt);
      else
        plain.opt->step();
      (do_fused ? tf : tp).push_back(ms(t0));
    }
  }
  double diff = 0;
  for (size_t i = 0; i < plain.params.size(); ++i)
    diff = std::max(diff, (plain.params[i] - fused.params[i]).abs().max().item<double>());
  auto spread = [](const std::vector<double>& v) {
    return std::make_pair(*std::min_element(v.begin(), v.end()), *std::max_element(v.begin(), v.end()));
  };
  const auto [p_lo, p_hi] = spread(tp);
  const auto [f_lo, f_hi] = spread(tf);
  std::printf("parameters %lld, threads %d, repeats %d, load %s -> %s\n", static_cast<long long>(n),
              torch::get_num_threads(), repeats, load_before.c_str(), load().c_str());
  std::printf("torch::optim::AdamW::step  median %.1f ms (%.1f-%.1f)\n", median(tp), p_lo, p_hi);
  std::printf("fused_adamw_step           median %.1f ms (%.1f-%.1f)\n", median(tf), f_lo, f_hi);
  std::printf("speedup %.2fx; largest parameter difference after %d steps: %.3g\n", median(tp) / median(tf),
              repeats + 1, diff);
  return 0;
}
