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
  static std::pair<double, double> step_on(Engine& e, Trainer& trainer,
                                           const std::vector<std::vector<size_t>>& micro_batches) {
    return e.step_on(trainer, micro_batches);
  }
};

}  // namespace trlx::engine
