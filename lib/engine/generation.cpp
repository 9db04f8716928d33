// Generation inside training: the policy as it trains, put in generation's
// state (eval, no gradients, no checkpointing, adapters on) for one round
// and back, with the strategy holding its weights as the placement says.
#include "core/error.hpp"
#include "engine/autocast.hpp"
#include "engine/engine.hpp"
#include "engine/engine_impl.hpp"

namespace trlx::engine {

namespace {

uint64_t mix(uint64_t h, uint64_t v) {
  // splitmix64 step: well spread seeds from (seed, step, rank, round).
  h += v + 0x9e3779b97f4a7c15ULL;
  h = (h ^ (h >> 30)) * 0xbf58476d1ce4e5b9ULL;
  h = (h ^ (h >> 27)) * 0x94d049bb133111ebULL;
  return h ^ (h >> 31);
}

}  // namespace

model::Generation Engine::Impl::generate(const std::vector<std::vector<int64_t>>& prompts, model::GenerationOptions o,
                                         const GenerationPlacement& placement) {
  auto& m = *policy_;
  if (generation_step_ != step_) {
    generation_step_ = step_;
    generation_rounds_ = 0;
  }
  o.seed = mix(mix(mix(static_cast<uint64_t>(config_.seed), static_cast<uint64_t>(step_)),
                   static_cast<uint64_t>(rank())),
               static_cast<uint64_t>(evaluating_ ? eval_generation_rounds_++ : generation_rounds_++));
  if (evaluating_) o.seed = mix(o.seed, 0x65766131ULL);  // a stream apart from training's rounds
  if (o.max_context == 0) o.max_context = m.config().max_position_embeddings;
  if (strategy_->shards_parameters())
    o.max_across_ranks = [this](std::vector<double>& v) { strategy_->max_across_ranks(v); };

  struct GenerationState {
    GenerationState(Impl& e, int64_t keep_bytes) : engine(e), was_training(e.policy_->is_training()) {
      e.policy_->eval();
      e.strategy_->begin_generation(*e.policy_, keep_bytes);
    }
    ~GenerationState() {
      engine.strategy_->end_generation();
      if (was_training) engine.policy_->train();
    }
    Impl& engine;
    bool was_training;
  };
  if (!placement.gather_all && !(placement.budget_mb >= 0))
    fail_input("ds3_gather_for_generation_budget_mb must be 0 or more (MiB), got {}", placement.budget_mb);
  const int64_t keep_bytes = placement.gather_all ? -1 : static_cast<int64_t>(placement.budget_mb * 1024.0 * 1024.0);
  GenerationState state(*this, keep_bytes);
  // Gradient checkpointing wraps only forwards that record a graph, so the
  // no-grad forwards of generation run the layers directly.
  torch::NoGradGuard no_grad;
  Autocast ac(autocast_dtype(), device_.type(), !strategy_->shards_parameters());
  return model::generate(m, prompts, o);
}

}  // namespace trlx::engine
