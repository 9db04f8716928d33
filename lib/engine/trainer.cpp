// The Trainer interface's defaults: what a trainer that overrides nothing does.
#include "engine/trainer.hpp"

#include <fmt/format.h>
#include <nlohmann/json.hpp>
#include <torch/torch.h>

#include "core/error.hpp"

namespace trlx::engine {

at::Tensor host_count(int64_t n) { return torch::empty({n, 0}); }

nlohmann::json Trainer::state() const { return nullptr; }
void Trainer::restore_state(const nlohmann::json&) {}

Trainer::Rollout Trainer::rollout(Engine&, const std::vector<size_t>&) {
  throw Error(fmt::format("the {} trainer declares generation rounds but builds none", name()));
}

MetricSums Trainer::evaluate_rounds(Engine&) {
  throw Error(fmt::format("the {} trainer does not evaluate on generation rounds", name()));
}

}  // namespace trlx::engine
