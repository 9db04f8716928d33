// Driver for scripts/bench/bench_lora.sh: trainable parameters, AdamW state
// and one training step's time, full fine-tuning vs LoRA, on one model.
// Usage: lora_bench MODEL_DIR full|lora R ALPHA TARGETS(comma list|all-linear) BATCH SEQ STEPS
#include <chrono>
#include <iostream>
#include <sstream>

#include <torch/torch.h>

#include "model/loading.hpp"
#include "model/lora.hpp"

using namespace trlx;

int main(int argc, char** argv) {
  if (argc != 9) {
    std::cerr << "usage: lora_bench MODEL_DIR full|lora R ALPHA TARGETS BATCH SEQ STEPS\n";
    return 2;
  }
  const std::string dir = argv[1], mode = argv[2];
  const int64_t r = std::stoll(argv[3]), batch = std::stoll(argv[6]), seq = std::stoll(argv[7]),
                steps = std::stoll(argv[8]);
  const double alpha = std::stod(argv[4]);
  std::vector<std::string> targets;
  std::stringstream ss(argv[5]);
  for (std::string t; std::getline(ss, t, ',');) targets.push_back(t);

  torch::manual_seed(0);
  auto m = model::load_language_model(dir, model::HeadKind::CausalLM);
  m->train();
  if (mode == "lora") {
    model::LoraConfig c;
    c.r = r;
    c.alpha = alpha;
    c.target_modules = targets;
    model::apply_lora(*m, c);
  }
  std::vector<torch::Tensor> trainable;
  int64_t n_trainable = 0, n_total = 0;
  for (const auto& p : m->parameters()) {
    n_total += p.numel();
    if (p.requires_grad()) {
      trainable.push_back(p);
      n_trainable += p.numel();
    }
  }
  torch::optim::AdamW opt(trainable, torch::optim::AdamWOptions(1e-4));
  auto ids = torch::randint(0, m->config().vocab_size, {batch, seq}, torch::kInt64);
  double best_ms = 1e18;
  for (int64_t s = 0; s < steps; ++s) {
    auto t0 = std::chrono::steady_clock::now();
    opt.zero_grad();
    auto logits = m->forward({ids, {}, {}});
    auto loss = torch::nn::functional::cross_entropy(logits.slice(1, 0, seq - 1).reshape({-1, logits.size(-1)}),
                                                     ids.slice(1, 1).reshape({-1}));
    loss.backward();
    opt.step();
    best_ms = std::min(best_ms, std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - t0).count());
  }
  int64_t state_bytes = 0, grad_bytes = 0;
  for (const auto& [key, state] : opt.state()) {
    (void)key;
    auto& s = static_cast<torch::optim::AdamWParamState&>(*state);
    state_bytes += s.exp_avg().nbytes() + s.exp_avg_sq().nbytes();
    if (s.max_exp_avg_sq().defined()) state_bytes += s.max_exp_avg_sq().nbytes();
  }
  for (const auto& p : trainable)
    if (p.grad().defined()) grad_bytes += p.grad().nbytes();
  std::cout << mode << " total_params " << n_total << " trainable_params " << n_trainable << " adamw_state_bytes "
            << state_bytes << " grad_bytes " << grad_bytes << " step_ms " << best_ms << "\n";
  return 0;
}
