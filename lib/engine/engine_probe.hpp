#pragma once
// The engine's insides that tests inspect and drive directly: the policy
// module, and one optimizer step on chosen micro-batches. Not part of the
// engine's public face (Engine befriends this struct); tests reach it
// through tests/support/engine_probe.hpp. Its bodies are in
// engine_probe.cpp, so that tests do not recompile when the engine's
// insides (engine_impl.hpp) change.
#include <string>
#include <utility>
#include <vector>

#include <ATen/core/Tensor.h>

#include "engine/engine.hpp"

namespace trlx::dist {
class Strategy;
}

namespace trlx::engine {

struct EngineProbe {
  static model::LanguageModelImpl& policy(Engine& e);
  static std::string strategy_name(Engine& e);
  static dist::Strategy& strategy(Engine& e);
  // The rows the run logged (JSON), as trainer_state.json keeps them.
  static const std::vector<std::string>& log_history(Engine& e);
  // `m` reduced over ranks as the engine reduces a logging window.
  static void reduce_metrics(Engine& e, MetricSums& m);
  // A collated batch moved as the engine moves it, and what it noted on the
  // host before (packed positions on the device with their branch reach).
  static void move_collated(Engine& e, TensorMap& batch);
  static const std::vector<std::pair<at::Tensor, at::Tensor>>& branch_reaches(Engine& e);
  static model::Batch to_device(Engine& e, const model::Batch& b);
  // How often a forward had to read a host tensor's layout that the batch's
  // move should have noted (Engine::Impl::host_fact_reads_).
  static int64_t host_fact_reads(Engine& e);
  static std::pair<double, double> step_on(Engine& e, Trainer& trainer,
                                           const std::vector<std::vector<size_t>>& micro_batches);
};

}  // namespace trlx::engine
