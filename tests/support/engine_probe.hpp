#pragma once
// The engine's insides that tests inspect and drive directly: the policy
// module, and one optimizer step on chosen micro-batches. Not part of the
// engine's public face (Engine befriends this struct).
#include <string>
#include <utility>
#include <vector>

#include "engine/engine.hpp"

namespace trlx::engine {

struct EngineProbe {
  static model::LanguageModelImpl& policy(Engine& e) { return *e.policy_; }
  static std::string strategy_name(Engine& e) { return e.strategy_->name(); }
  static dist::Strategy& strategy(Engine& e) { return *e.strategy_; }
  // The rows the run logged (JSON), as trainer_state.json keeps them.
  static const std::vector<std::string>& log_history(Engine& e) { return e.log_history_; }
  // `m` reduced over ranks as the engine reduces a logging window.
  static void reduce_metrics(Engine& e, MetricSums& m) { e.reduce_metrics(m); }
  // A collated batch moved as the engine moves it, and what it noted on the
  // host before (packed positions on the device with their branch reach).
  static void move_collated(Engine& e, TensorMap& batch) { e.move_collated(batch); }
  static const std::vector<std::pair<torch::Tensor, torch::Tensor>>& branch_reaches(Engine& e) {
    return e.branch_reaches_;
  }
  static model::Batch to_device(Engine& e, const model::Batch& b) { return e.to_device(b); }
  static std::pair<double, double> step_on(Engine& e, Trainer& trainer,
                                           const std::vector<std::vector<size_t>>& micro_batches) {
    return e.step_on(trainer, micro_batches);
  }
};

}  // namespace trlx::engine
