// Driver for scripts/bench/bench_zero.sh, run under mpirun: training steps of
// one model with one strategy (ddp, zero1, zero2, zero3, or fsdp_keep: the
// stage-3 layout with reshard_after_forward false), printing rank 0's best
// step time, the bytes this rank handed to collectives per step, the
// optimizer-state and gradient bytes it holds, and its peak resident memory.
// zero3_autocast and zero3_bf16 run the stage-3 layout under bf16 autocast,
// gathering float32 units (the layout before bf16 gathers) or bf16 copies.
// Usage: zero_bench MODEL_DIR ddp|zero1|zero2|zero3|fsdp_keep|zero3_autocast|zero3_bf16 BATCH SEQ STEPS
#include <sys/resource.h>

#include <chrono>
#include <iostream>

#include <torch/torch.h>

#include "dist/comm/make_communicator.hpp"
#include "dist/strategy/strategy.hpp"
#include "engine/autocast.hpp"
#include "model/loading.hpp"

using namespace trlx;

int main(int argc, char** argv) {
  if (argc != 6) {
    std::cerr << "usage: zero_bench MODEL_DIR ddp|zero1|zero2|zero3|fsdp_keep|zero3_autocast|zero3_bf16 BATCH SEQ STEPS\n";
    return 2;
  }
  const std::string dir = argv[1], mode = argv[2];
  const int64_t batch = std::stoll(argv[3]), seq = std::stoll(argv[4]), steps = std::stoll(argv[5]);
  std::shared_ptr<dist::Communicator> comm = dist::make_mpi_communicator(std::chrono::seconds(600));
  std::unique_ptr<dist::Strategy> strategy;
  if (mode == "ddp") {
    strategy = dist::make_ddp_strategy(comm, {});
  } else if (mode == "zero1" || mode == "zero2") {
    dist::ZeroOptions o;
    o.stage = mode == "zero1" ? 1 : 2;
    strategy = dist::make_zero_strategy(comm, o);
  } else {
    dist::ParameterShardingOptions o;
    o.reshard_after_forward = mode != "fsdp_keep";
    if (mode == "zero3_bf16") o.compute_dtype = at::kBFloat16;
    strategy = dist::make_parameter_sharding_strategy(comm, o);
  }
  const bool autocast = mode == "zero3_autocast" || mode == "zero3_bf16";
  torch::manual_seed(0);
  auto m = model::load_language_model(dir, model::HeadKind::CausalLM);
  m->train();
  strategy->wrap_model(*m);
  std::vector<dist::NamedParam> named;
  int64_t n_params = 0;
  for (auto& p : m->named_parameters(true))
    if (p.value().requires_grad()) {
      named.push_back({p.key(), p.value()});
      n_params += p.value().numel();
    }
  strategy->setup(named);
  std::vector<size_t> all(named.size());
  for (size_t i = 0; i < all.size(); ++i) all[i] = i;
  auto groups = strategy->optimizer_groups({all});
  torch::optim::AdamW opt(groups.at(0), torch::optim::AdamWOptions(1e-4));
  torch::manual_seed(1 + comm->rank());
  auto ids = torch::randint(0, m->config().vocab_size, {batch, seq}, torch::kInt64);
  double best_ms = 1e18;
  int64_t bytes_per_step = 0, grad_bytes = 0;
  for (int64_t s = 0; s < steps; ++s) {
    comm->barrier();
    const int64_t bytes0 = comm->bytes_communicated();
    auto t0 = std::chrono::steady_clock::now();
    opt.zero_grad(true);
    strategy->begin_backward(true, true);
    engine::Autocast ac(autocast ? std::optional<at::ScalarType>(at::kBFloat16) : std::nullopt, torch::kCPU,
                        /*cache=*/false);
    auto logits = m->forward({ids, {}, {}}).to(torch::kFloat32);
    auto loss = torch::nn::functional::cross_entropy(logits.slice(1, 0, seq - 1).reshape({-1, logits.size(-1)}),
                                                     ids.slice(1, 1).reshape({-1}));
    loss.backward();
    strategy->end_backward();
    grad_bytes = 0;  // what the rank holds when the optimizer runs
    for (const auto& p : named)
      if (p.param.grad().defined()) grad_bytes += p.param.grad().nbytes();
    if (mode != "ddp")
      for (const auto& t : groups.at(0))
        if (t.grad().defined()) grad_bytes += t.grad().nbytes();
    strategy->clip_grad_norm(1.0, 1.0);
    opt.step();
    strategy->after_optimizer_step();
    const double ms = std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - t0).count();
    bytes_per_step = comm->bytes_communicated() - bytes0;
    // The slowest rank's time is the step's time.
    auto t = torch::tensor({ms}, torch::kFloat64);
    comm->all_reduce(t, dist::ReduceOp::Max)->wait();
    best_ms = std::min(best_ms, t.item<double>());
  }
  int64_t state_bytes = 0;
  for (const auto& [key, state] : opt.state()) {
    (void)key;
    auto& s = static_cast<torch::optim::AdamWParamState&>(*state);
    state_bytes += s.exp_avg().nbytes() + s.exp_avg_sq().nbytes();
  }
  struct rusage ru {};
  getrusage(RUSAGE_SELF, &ru);
  if (comm->rank() == 0)
    std::cout << mode << " params " << n_params << " step_ms " << best_ms << " bytes_per_step " << bytes_per_step
              << " adamw_state_bytes " << state_bytes << " grad_bytes " << grad_bytes << " peak_rss_mb "
              << ru.ru_maxrss / 1024 << " world " << comm->world_size() << "\n";
  comm->barrier();
  return 0;
}
