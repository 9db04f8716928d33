// Driver for scripts/bench/bench_generate.sh's ZeRO-3 part, run under mpirun:
// one generation round of PROMPTS prompts per rank (greedy, NEW tokens)
// with the model under ZeRO-3, its weights placed as MODE says: all (every
// unit gathered for the round: ds3_gather_for_generation true), none (one
// unit at a time per forward: false) or budget (the units that fit in
// BUDGET_MB stay gathered). Prints, from rank 0, the slowest rank's seconds
// per round and the largest per-rank peak of gathered weights, besides the
// shard each rank always holds.
// Usage: generate_zero_bench MODEL_DIR all|none|budget BUDGET_MB PROMPTS PROMPT_LEN NEW ROUNDS
#include <chrono>
#include <iostream>

#include <torch/torch.h>

#include "dist/comm/make_communicator.hpp"
#include "dist/strategy/strategy.hpp"
#include "model/generate.hpp"
#include "model/loading.hpp"

using namespace trlx;

int main(int argc, char** argv) {
  if (argc != 8) {
    std::cerr << "usage: generate_zero_bench MODEL_DIR all|none|budget BUDGET_MB PROMPTS PROMPT_LEN NEW ROUNDS\n";
    return 2;
  }
  const std::string dir = argv[1], mode = argv[2];
  const double budget_mb = std::stod(argv[3]);
  const int64_t prompts = std::stoll(argv[4]), len = std::stoll(argv[5]), rounds = std::stoll(argv[7]);
  std::shared_ptr<dist::Communicator> comm = dist::make_mpi_communicator(std::chrono::seconds(600));
  auto strategy = dist::make_parameter_sharding_strategy(comm, {});
  auto m = model::load_language_model(dir, model::HeadKind::CausalLM);
  m->eval();
  int64_t total = 0;
  for (const auto& p : m->parameters()) total += p.numel() * p.element_size();
  strategy->wrap_model(*m);
  torch::manual_seed(1 + comm->rank());
  std::vector<std::vector<int64_t>> batch;
  for (int64_t i = 0; i < prompts; ++i) {
    auto ids = torch::randint(3, m->config().vocab_size, {len}, torch::kInt64);
    batch.emplace_back(ids.data_ptr<int64_t>(), ids.data_ptr<int64_t>() + len);
  }
  model::GenerationOptions o;
  o.max_new_tokens = std::stoll(argv[6]);
  o.max_across_ranks = [&](std::vector<double>& v) { strategy->max_across_ranks(v); };
  const int64_t keep = mode == "all" ? -1 : mode == "none" ? 0 : static_cast<int64_t>(budget_mb * 1024 * 1024);
  double best = 1e18;
  strategy->reset_peak_gathered_bytes();
  for (int64_t r = 0; r < rounds; ++r) {
    const auto start = std::chrono::steady_clock::now();
    strategy->begin_generation(*m, keep);
    model::generate(*m, batch, o);
    strategy->end_generation();
    best = std::min(best, std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count());
  }
  std::vector<double> worst = {best, static_cast<double>(strategy->peak_gathered_bytes())};
  strategy->max_across_ranks(worst);
  if (comm->rank() == 0)
    std::cout << mode << " seconds_per_round " << worst[0] << " peak_gathered_mb " << worst[1] / 1048576.0
              << " model_mb " << static_cast<double>(total) / 1048576.0 << " shard_mb "
              << static_cast<double>(total) / comm->world_size() / 1048576.0 << "\n";
  return 0;
}
