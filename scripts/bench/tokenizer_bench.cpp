// Encode throughput of trlx's tokenizer on a corpus of JSON-string lines, one
// thread. Prints: tokens, seconds, tokens/s. Driven by bench_tokenizer.sh.
#include <chrono>
#include <cstdio>
#include <fstream>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "text/tokenizer/tokenizer.hpp"

int main(int argc, char** argv) {
  if (argc < 3) {
    std::fprintf(stderr, "usage: tokenizer_bench <tokenizer dir> <corpus.jsonl> [repeats]\n");
    return 2;
  }
  const auto tok = trlx::text::Tokenizer::from_dir(argv[1]);
  const int repeats = argc > 3 ? std::atoi(argv[3]) : 3;
  std::vector<std::string> docs;
  std::ifstream f(argv[2]);
  std::string line;
  while (std::getline(f, line)) docs.push_back(nlohmann::json::parse(line).get<std::string>());
  double best = 1e30;
  size_t tokens = 0;
  for (int r = 0; r < repeats; ++r) {
    tokens = 0;
    const auto t0 = std::chrono::steady_clock::now();
    for (const auto& d : docs) tokens += tok.encode(d).ids.size();
    const double s = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
    best = std::min(best, s);
  }
  std::printf("%zu %.6f %.1f\n", tokens, best, tokens / best);
  return 0;
}
