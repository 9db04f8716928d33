// Load time of a safetensors checkpoint with trlx::io, for
// scripts/bench/bench_safetensors_load.sh.
//   safetensors_bench <checkpoint dir or file> <reps>
// Prints one line: "<tensors> <bytes> <best view s> <best copy s>", where
// "view" is open + get() of every tensor as zero-copy views of the mapping
// and "copy" is open + get(copy=true), every tensor materialised in memory.
#include <torch/torch.h>

#include <chrono>
#include <cstdio>
#include <cstdlib>

#include "io/safetensors.hpp"

int main(int argc, char** argv) {
  if (argc < 2) {
    std::fprintf(stderr, "usage: %s <checkpoint> [reps]\n", argv[0]);
    return 2;
  }
  const int reps = argc > 2 ? std::atoi(argv[2]) : 5;
  double best[2] = {1e30, 1e30};
  size_t count = 0;
  uint64_t bytes = 0;
  for (int r = 0; r < reps; ++r) {
    for (int mode = 0; mode < 2; ++mode) {
      const auto t0 = std::chrono::steady_clock::now();
      std::vector<at::Tensor> all;
      {
        const auto ck = trlx::io::Checkpoint::open(argv[1]);
        const auto names = ck.names();
        all.reserve(names.size());
        bytes = 0;
        for (const auto& n : names) {
          all.push_back(ck.get(n, mode == 1));
          bytes += static_cast<uint64_t>(all.back().numel()) * all.back().element_size();
        }
        count = names.size();
      }
      const double s = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
      best[mode] = std::min(best[mode], s);
    }
  }
  std::printf("%zu %llu %.6f %.6f\n", count, static_cast<unsigned long long>(bytes), best[0], best[1]);
  return 0;
}
