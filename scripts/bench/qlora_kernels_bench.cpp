// Driver for scripts/bench/bench_qlora_kernels.sh: median milliseconds of
// trlx's QLoRA kernels on one weight shape, on the CPU.
// Usage: qlora_kernels_bench dequant ROWS COLS DTYPE(float32|bfloat16) REPEATS
//   prints "cpu_pass MS tensor_ops MS": the one-pass dequantization against
//   the tensor-operation path (what GPUs run), nf4, blocks of 64.
// Usage: qlora_kernels_bench quantize ROWS COLS DTYPE REPEATS
//   prints "trlx MS": quantizing a weight to nf4 (load time).
// Usage: qlora_kernels_bench dropout ROWS COLS DTYPE P REPEATS
//   prints "trlx MS torch MS": trlx's dropout (forward and backward) against
//   torch::dropout's.
#include <torch/torch.h>

#include <algorithm>
#include <chrono>
#include <functional>
#include <iostream>
#include <string>
#include <vector>

#include "model/kernels.hpp"
#include "model/quant4.hpp"

using namespace trlx;

namespace {

double median_ms(int repeats, const std::function<void()>& f) {
  f();  // warm up
  std::vector<double> ms;
  for (int i = 0; i < repeats; ++i) {
    auto t0 = std::chrono::steady_clock::now();
    f();
    ms.push_back(std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - t0).count());
  }
  std::sort(ms.begin(), ms.end());
  return ms[ms.size() / 2];
}

}  // namespace

int main(int argc, char** argv) {
  const std::vector<std::string> a(argv + 1, argv + argc);
  auto usage = [] {
    std::cerr << "usage: qlora_kernels_bench dequant|quantize ROWS COLS DTYPE REPEATS | dropout ROWS COLS DTYPE P "
                 "REPEATS\n";
    return 2;
  };
  if (a.empty()) return usage();
  const bool dequant = a[0] == "dequant", quantize = a[0] == "quantize";
  if (((dequant || quantize) && a.size() != 5) || (!dequant && !quantize && (a[0] != "dropout" || a.size() != 6)))
    return usage();
  const int64_t rows = std::stoll(a[1]), cols = std::stoll(a[2]);
  const auto dtype = a[3] == "bfloat16" ? torch::kBFloat16 : torch::kFloat32;
  const int repeats = std::stoi(a.back());
  torch::manual_seed(0);
  if (quantize) {
    const auto w = (torch::randn({rows, cols}) * 0.02).to(dtype);
    std::cout << "trlx " << median_ms(repeats, [&] { model::quantize_4bit(w, {}); }) << "\n";
    return 0;
  }
  if (dequant) {
    const auto q = model::quantize_4bit(torch::randn({rows, cols}) * 0.02, {});
    std::cout << "cpu_pass " << median_ms(repeats, [&] { model::dequantize_4bit(q, dtype); }) << " tensor_ops "
              << median_ms(repeats, [&] { model::dequantize_4bit_ops(q, dtype); }) << "\n";
    return 0;
  }
  const double p = std::stod(a[4]);
  const auto x = torch::randn({rows, cols}).to(dtype).requires_grad_(true);
  const auto g = torch::randn({rows, cols}).to(dtype);
  auto run = [&](bool ours) {
    auto y = ours ? model::dropout(x, p, true) : torch::dropout(x, p, true);
    y.backward(g);
    x.mutable_grad() = torch::Tensor();
  };
  std::cout << "trlx " << median_ms(repeats, [&] { run(true); }) << " torch " << median_ms(repeats, [&] { run(false); })
            << "\n";
  return 0;
}
