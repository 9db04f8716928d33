// DDP under mpirun (2 and 3 ranks): a step on N ranks equals a step of one
// process on the same global batch, with and without the chunked log-prob
// path, LoRA and gradient checkpointing, for even and uneven batches; the
// ranks' gradients are identical after reduction; the grad-sync check names
// a parameter that differs.
#include "support/engine_probe.hpp"
#include "catch_torch.hpp"

#include "config/loader.hpp"
#include "core/error.hpp"
#include "dist/comm/make_communicator.hpp"
#include "dist/strategy/strategy.hpp"
#include "engine/engine.hpp"
#include "model/loading.hpp"
#include "support.hpp"
#include "support/trainers.hpp"
#include "text/template/chat_template.hpp"
#include "text/tokenizer/tokenizer.hpp"
#include "trainers/sft.hpp"

using namespace trlx;
namespace fs = std::filesystem;

namespace {

using test::tiny_model;

std::shared_ptr<dist::Communicator> world() {
  static std::shared_ptr<dist::Communicator> c = dist::make_mpi_communicator(std::chrono::seconds(30));
  return c;
}

using test::synced_sft_config;

using Params = std::map<std::string, torch::Tensor>;

// Two optimizer steps over `steps` (global batches, one micro-batch each)
// with `comm`; the trained parameters after them.
Params train(const trainers::SFTConfig& c, std::shared_ptr<dist::Communicator> comm,
             const std::vector<std::vector<size_t>>& steps) {
  auto r = test::make_sft(c, std::move(comm));
  for (const auto& b : steps) trlx::engine::EngineProbe::step_on(*r.engine, *r.trainer, {b});
  Params out;
  for (const auto& p : trlx::engine::EngineProbe::policy(*r.engine).named_parameters(true))
    if (p.value().requires_grad()) out[p.key()] = p.value().detach().clone();
  return out;
}

void check_equal_to_single(const std::vector<std::pair<std::string, std::string>>& flags,
                           const std::vector<std::vector<size_t>>& steps) {
  auto c = synced_sft_config(flags);
  auto single = train(c, dist::make_single_communicator(), steps);
  auto ddp = train(c, world(), steps);
  REQUIRE(single.size() == ddp.size());
  REQUIRE(!single.empty());
  double worst = 0;
  for (const auto& [k, v] : single) worst = std::max(worst, (v - ddp.at(k)).abs().max().item<double>());
  INFO("rank " << world()->rank() << " of " << world()->world_size() << ", largest difference " << worst);
  CHECK(worst < 1e-5);
}

}  // namespace

TEST_CASE("DDP steps equal single-process steps on the same global batch", "[ddp]") {
  // The fixture split has 8 examples.
  const std::vector<std::vector<size_t>> steps = {{0, 1, 2, 3, 4, 5}, {6, 7, 0, 1, 2, 3}};
  SECTION("plain") { check_equal_to_single({}, steps); }
  SECTION("chunked log-probs") {
    check_equal_to_single({{"use_liger_kernel", "true"}, {"logprob_chunk_size", "16"}}, steps);
  }
  SECTION("LoRA") {
    check_equal_to_single({{"use_peft", "true"}, {"lora_r", "4"}, {"lora_alpha", "8"}, {"lora_dropout", "0"},
                           {"lora_target_modules", "all-linear"}},
                          steps);
  }
  SECTION("gradient checkpointing, both modes") {
    check_equal_to_single({{"gradient_checkpointing", "true"}, {"gradient_checkpointing_kwargs.use_reentrant", "true"}},
                          steps);
    check_equal_to_single({{"gradient_checkpointing", "true"}, {"gradient_checkpointing_kwargs.use_reentrant", "false"}},
                          steps);
  }
  SECTION("LoRA, checkpointing and chunked log-probs together") {
    check_equal_to_single({{"use_peft", "true"}, {"lora_r", "4"}, {"lora_dropout", "0"}, {"use_liger_kernel", "true"},
                           {"logprob_chunk_size", "16"}, {"gradient_checkpointing", "true"}},
                          steps);
  }
}

TEST_CASE("DDP with uneven batches: some ranks get fewer examples or none", "[ddp]") {
  // 5 examples: 3 + 2 on two ranks, 2 + 2 + 1 on three; 1 example leaves
  // every rank but the first without data.
  check_equal_to_single({}, {{0, 1, 2, 3, 4}, {5}});
}

TEST_CASE("the grad-sync check names a parameter whose reduced gradient differs", "[ddp]") {
  auto comm = world();
  auto a = torch::ones({3}, torch::requires_grad());
  auto b = torch::ones({2}, torch::requires_grad());
  auto strategy = dist::make_ddp_strategy(comm, {});
  strategy->setup({{"layers.0.a", a}, {"layers.0.b", b}});
  a.mutable_grad() = torch::full({3}, 0.5);
  b.mutable_grad() = torch::full({2}, 0.25);
  CHECK_NOTHROW(strategy->check_grads_in_sync());
  // One rank's gradient drifts, as when a loss path escaped the reduction.
  if (comm->rank() == comm->world_size() - 1) b.mutable_grad()[1] = 0.2500001f;
  try {
    strategy->check_grads_in_sync();
    FAIL("the check did not fire");
  } catch (const Error& e) {
    CHECK_THAT(std::string(e.what()), Catch::Matchers::Contains("layers.0.b"));
    CHECK_THAT(std::string(e.what()), Catch::Matchers::Contains("out of sync"));
  }
}

TEST_CASE("DDP reduces gradients of any backward, and reports unused parameters", "[ddp]") {
  auto comm = world();
  auto w = torch::zeros({4}, torch::requires_grad());
  auto unused = torch::zeros({2}, torch::requires_grad());
  auto strategy = dist::make_ddp_strategy(comm, {});
  strategy->setup({{"w", w}, {"unused", unused}});
  // Each rank's loss differs; after the step every rank holds the sum.
  strategy->begin_backward(true, true);
  (w * static_cast<float>(comm->rank() + 1)).sum().backward();
  const float want = static_cast<float>(comm->world_size() * (comm->world_size() + 1) / 2);
  try {
    strategy->end_backward();
    FAIL("an unused parameter was not reported");
  } catch (const InputError& e) {
    CHECK_THAT(std::string(e.what()), Catch::Matchers::Contains("unused"));
    CHECK_THAT(std::string(e.what()), Catch::Matchers::Contains("ddp_find_unused_parameters"));
  }
  CHECK(torch::allclose(w.grad(), torch::full({4}, want)));
}
