// scripts/bench/bench_parquet_memory.sh's driver: reads a Parquet file and
// prints one line: mode, rows, peak RSS before reading (MB), peak RSS after
// (MB), seconds.
//   load    load_dataset: every row kept as JSON (what a trainer gets)
//   stream  the reader alone: each row dropped once produced (what reading adds)
#include <sys/resource.h>

#include <chrono>
#include <cstdio>
#include <string>

#include "text/data/columnar.hpp"
#include "text/data/dataset.hpp"

namespace {
double peak_mb() {
  rusage u{};
  getrusage(RUSAGE_SELF, &u);
  return static_cast<double>(u.ru_maxrss) / 1024.0;  // KiB on Linux
}
}  // namespace

int main(int argc, char** argv) {
  if (argc != 3) {
    std::fprintf(stderr, "usage: parquet_memory_bench load|stream FILE.parquet\n");
    return 2;
  }
  const std::string mode = argv[1];
  const double before = peak_mb();
  const auto t0 = std::chrono::steady_clock::now();
  size_t rows = 0;
  if (mode == "load") {
    rows = trlx::data::load_dataset(argv[2]).rows.size();
  } else {
    trlx::data::detail::read_parquet(argv[2], [&](trlx::data::Row&&) { ++rows; });
  }
  const double secs = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
  std::printf("%s %zu %.1f %.1f %.2f\n", mode.c_str(), rows, before, peak_mb(), secs);
  return 0;
}
