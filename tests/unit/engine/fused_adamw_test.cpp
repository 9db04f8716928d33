// The fused AdamW step against torch::optim::AdamW::step(): the same update
// on the same state, and checkpoints either side can resume.
#include "catch_torch.hpp"

#include <sstream>

#include "engine/fused_adamw.hpp"

using namespace trlx;

namespace {

struct Run {
  std::vector<torch::Tensor> params;
  std::unique_ptr<torch::optim::AdamW> opt;
};

// Two groups (weight decay and none), parameters of a few shapes, the same
// values on every call.
Run make_run() {
  torch::manual_seed(7);
  Run r;
  for (auto shape : std::vector<std::vector<int64_t>>{{5, 3}, {7}, {2, 2, 4}, {1}})
    r.params.push_back(torch::randn(shape).requires_grad_(true));
  auto opts = [](double wd) {
    return std::make_unique<torch::optim::AdamWOptions>(
        torch::optim::AdamWOptions(3e-3).betas({0.9, 0.95}).eps(1e-6).weight_decay(wd));
  };
  std::vector<torch::optim::OptimizerParamGroup> groups;
  groups.emplace_back(std::vector<torch::Tensor>{r.params[0], r.params[2]}, opts(0.1));
  groups.emplace_back(std::vector<torch::Tensor>{r.params[1], r.params[3]}, opts(0.0));
  r.opt = std::make_unique<torch::optim::AdamW>(groups, torch::optim::AdamWOptions(3e-3));
  return r;
}

// Gradients of step `k`, the same for every run; parameter 3 gets none at
// step 1 (it must then keep its value and state).
void set_grads(Run& r, int k) {
  for (size_t i = 0; i < r.params.size(); ++i) {
    auto& p = r.params[i];
    if (i == 3 && k == 1) {
      p.mutable_grad() = torch::Tensor();
      continue;
    }
    auto g = torch::sin(torch::arange(p.numel(), torch::kFloat32) * (0.3 + 0.1 * k) + static_cast<double>(i))
                 .view(p.sizes());
    p.mutable_grad() = g * (k + 1);
  }
}

double largest_difference(const Run& a, const Run& b) {
  double d = 0;
  for (size_t i = 0; i < a.params.size(); ++i)
    d = std::max(d, (a.params[i] - b.params[i]).abs().max().item<double>());
  return d;
}

}  // namespace

TEST_CASE("fused AdamW: the same updates as torch::optim::AdamW, and the same saved state", "[engine][optimizer]") {
  Run plain = make_run(), fused = make_run();
  for (int k = 0; k < 5; ++k) {
    set_grads(plain, k);
    set_grads(fused, k);
    plain.opt->step();
    engine::fused_adamw_step(*fused.opt);
    INFO("step " << k + 1);
    CHECK(largest_difference(plain, fused) < 1e-6);
  }
  // The parameters moved (the test would pass on a no-op otherwise).
  CHECK((fused.params[0] - make_run().params[0]).abs().max().item<double>() > 1e-3);
  // Step counts: parameter 3 missed one gradient.
  auto step_of = [](Run& r, size_t i) {
    return static_cast<torch::optim::AdamWParamState&>(*r.opt->state().at(r.params[i].unsafeGetTensorImpl())).step();
  };
  CHECK(step_of(fused, 0) == 5);
  CHECK(step_of(fused, 3) == 4);
  CHECK(step_of(plain, 3) == 4);

  // A checkpoint written after fused steps resumes under either step, and
  // continues as the uninterrupted runs do.
  std::stringstream saved;
  {
    torch::serialize::OutputArchive a;
    fused.opt->save(a);
    a.save_to(saved);
  }
  Run resumed = make_run();
  for (size_t i = 0; i < resumed.params.size(); ++i) resumed.params[i].data().copy_(fused.params[i].data());
  {
    torch::serialize::InputArchive a;
    a.load_from(saved);
    resumed.opt->load(a);
  }
  set_grads(plain, 5);
  set_grads(resumed, 5);
  plain.opt->step();
  resumed.opt->step();  // the reference step on the fused run's state
  CHECK(largest_difference(plain, resumed) < 1e-6);
  CHECK(step_of(resumed, 0) == 6);
}
