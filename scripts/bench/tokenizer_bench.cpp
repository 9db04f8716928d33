// trlx's side of scripts/bench/bench_tokenizer.sh: one timed pass over a
// corpus of JSON-string lines, in a fresh process (cold word cache, as when a
// dataset is prepared once).
//   tokenizer_bench encode <tokenizer dir> <corpus.jsonl>
//       one encode() per document, one thread; prints: tokens cpu_s wall_s
//   tokenizer_bench rows <tokenizer dir> <corpus.jsonl> <threads>
//       the rows encoded on <threads> threads with the helper the trainers'
//       dataset preparation uses (dataset_num_proc); prints: rows tokens cpu_s wall_s
#include <time.h>

#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <fstream>
#include <nlohmann/json.hpp>
#include <string>
#include <vector>

#include "text/tokenizer/parallel.hpp"
#include "text/tokenizer/tokenizer.hpp"

namespace {

double cpu_seconds() {
  timespec ts{};
  clock_gettime(CLOCK_PROCESS_CPUTIME_ID, &ts);
  return static_cast<double>(ts.tv_sec) + 1e-9 * static_cast<double>(ts.tv_nsec);
}

}  // namespace

int main(int argc, char** argv) {
  const std::string mode = argc > 1 ? argv[1] : "";
  if (argc < 4 || (mode != "encode" && mode != "rows") || (mode == "rows" && argc < 5)) {
    std::fprintf(stderr,
                 "usage: tokenizer_bench encode <tokenizer dir> <corpus.jsonl>\n"
                 "       tokenizer_bench rows <tokenizer dir> <corpus.jsonl> <threads>\n");
    return 2;
  }
  const auto tok = trlx::text::Tokenizer::from_dir(argv[2]);
  std::vector<std::string> docs;
  std::ifstream f(argv[3]);
  std::string line;
  while (std::getline(f, line)) docs.push_back(nlohmann::json::parse(line).get<std::string>());

  const double c0 = cpu_seconds();
  const auto t0 = std::chrono::steady_clock::now();
  size_t tokens = 0;
  if (mode == "encode") {
    for (const auto& d : docs) tokens += tok.encode(d).ids.size();
  } else {
    std::vector<std::vector<int32_t>> ids(docs.size());
    trlx::text::parallel_for(docs.size(), std::atoi(argv[4]),
                             [&](size_t i) { ids[i] = tok.encode_ids(docs[i]); });
    for (const auto& v : ids) tokens += v.size();
  }
  const double wall = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
  const double cpu = cpu_seconds() - c0;
  if (mode == "encode") {
    std::printf("%zu %.6f %.6f\n", tokens, cpu, wall);
  } else {
    std::printf("%zu %zu %.6f %.6f\n", docs.size(), tokens, cpu, wall);
  }
  return 0;
}
