// EngineProbe's bodies: the engine's insides as tests reach them.
#include "engine/engine_probe.hpp"

#include "engine/engine_impl.hpp"

namespace trlx::engine {

model::LanguageModelImpl& EngineProbe::policy(Engine& e) { return *e.impl_->policy_; }
std::string EngineProbe::strategy_name(Engine& e) { return e.impl_->strategy_->name(); }
dist::Strategy& EngineProbe::strategy(Engine& e) { return *e.impl_->strategy_; }
const std::vector<std::string>& EngineProbe::log_history(Engine& e) { return e.impl_->log_history_; }
void EngineProbe::reduce_metrics(Engine& e, MetricSums& m) { e.impl_->reduce_metrics(m); }
int64_t EngineProbe::host_fact_reads(Engine& e) { return e.impl_->host_fact_reads_; }
void EngineProbe::move_collated(Engine& e, TensorMap& batch) { e.impl_->move_collated(batch); }
const std::vector<std::pair<at::Tensor, at::Tensor>>& EngineProbe::branch_reaches(Engine& e) {
  return e.impl_->branch_reaches_;
}
model::Batch EngineProbe::to_device(Engine& e, const model::Batch& b) { return e.impl_->to_device(b); }
std::pair<double, double> EngineProbe::step_on(Engine& e, Trainer& trainer,
                                               const std::vector<std::vector<size_t>>& micro_batches) {
  return e.impl_->step_on(trainer, micro_batches);
}

}  // namespace trlx::engine
