#pragma once
// What a trainer provides to the engine (the Trainer interface) and what
// passes between them: collated batches (TensorMap), a loss with its
// metrics, the model roles a trainer names. Trainers' headers include this,
// not engine/engine.hpp, so that they do not depend on how the engine is
// built; a trainer's .cpp includes engine/engine.hpp where it calls the
// engine.
#include <cstddef>
#include <cstdint>
#include <map>
#include <string>
#include <vector>

#include <ATen/core/Tensor.h>
#include <nlohmann/json_fwd.hpp>

#include "engine/metrics.hpp"

namespace trlx::engine {

class Engine;

using TensorMap = std::map<std::string, at::Tensor>;

// A count known when a batch is collated, carried in a TensorMap to the
// trainer's loss() in a tensor's shape ([n, 0]: no storage), so that reading
// it after the batch moved to the device needs no device read.
at::Tensor host_count(int64_t n);
inline int64_t host_count(const TensorMap& batch, const std::string& key) {
  auto it = batch.find(key);
  return it == batch.end() ? 0 : it->second.size(0);
}

struct LossOutput {
  at::Tensor loss_sum;  // summed over this micro-batch's items; the engine divides by the step's items
  MetricSums metrics;
};

// Which model a forward runs: the one being trained, the frozen reference
// (a separate model set with set_reference, or the policy with its LoRA
// adapters disabled), the value model trained beside the policy (PPO's
// critic, given to the engine's constructor), or a frozen reward model
// (set_reward_model). Trainers name a role; only the engine holds models.
enum class Role { Policy, Reference, Value, Reward };

// What a trainer provides.
class Trainer {
 public:
  virtual ~Trainer() = default;
  virtual std::string name() const = 0;
  virtual size_t num_examples(const std::string& split) const = 0;
  // A micro-batch from example indices of `split`.
  virtual TensorMap collate(const std::string& split, const std::vector<size_t>& indices) const = 0;
  // How many items (e.g. target tokens) the loss of this micro-batch sums
  // over. The engine asks on the host, before the batch moves to the device.
  virtual double num_items(const TensorMap& batch) const = 0;
  // On a rank with no examples in a micro-batch (an uneven last batch),
  // loss() still runs, on a stand-in example (the global batch's first),
  // so that every rank runs the same forwards and collectives (a sharded
  // model gathers its layers in every forward). The engine then discards
  // that loss and its metrics; a trainer that sums values over ranks in
  // its loss adds zero while Engine::standing_in() is true.
  virtual LossOutput loss(Engine& engine, const TensorMap& batch) = 0;

  // --- online trainers (grpo, rloo, ppo, online_dpo) -------------------------
  // An online trainer learns from generation rounds. The loop takes the
  // train split's examples (prompts) prompts_per_round() at a time (over all
  // ranks; an incomplete last round of an epoch is dropped) and hands each
  // round's global example indices to rollout(), which generates, scores and
  // returns this rank's micro-batches. The loop trains on them in order,
  // passes_per_round() times over (num_iterations), before the next round;
  // loss() then sees these micro-batches and collate() is never called.
  struct Rollout {
    std::vector<TensorMap> micro_batches;
    MetricSums metrics;  // the round's own metrics (entries), logged with the step that generated it
    double tokens = 0;   // this rank's prompt + completion tokens
  };
  virtual int64_t prompts_per_round() const { return 0; }  // 0: an offline trainer
  virtual int64_t micro_batches_per_round() const { return 1; }  // on each rank (steps_per_generation)
  virtual int64_t passes_per_round() const { return 1; }
  virtual Rollout rollout(Engine& engine, const std::vector<size_t>& round_prompts);
  // Evaluation of an online trainer on the test split (its own eval
  // batches, generated as rounds are): this rank's metric sums, "loss"
  // among them, not yet reduced over ranks. The engine calls it without
  // gradients, the policy in eval mode.
  virtual MetricSums evaluate_rounds(Engine& engine);
  // Optimizer updates in one step, each over gradient_accumulation_steps
  // micro-batches (PPO: num_ppo_epochs x num_mini_batches per rollout
  // batch). The step is what the schedule, logging and checkpoints count:
  // the learning rate changes between steps, not between a step's updates.
  virtual int64_t updates_per_step() const { return 1; }
  // The steps of the run when the trainer counts them itself (PPO's
  // total_episodes) and max_steps is not set; 0: from num_train_epochs.
  virtual int64_t total_steps(int /*world_size*/) const { return 0; }

  // Called on every rank right after the engine logged a training row
  // (logging_steps) at global step `step`: what a trainer writes or prints
  // then (the group trainers' completion logs). It must not communicate.
  virtual void on_log(Engine& /*engine*/, int64_t /*step*/) {}

  // Totals a trainer adds to the run's closing metrics row (e.g. seconds
  // spent generating and scoring).
  virtual std::map<std::string, double> run_totals() const { return {}; }
  // What the trainer calls its separate frozen model (Role::Reference), as
  // the startup table names it: a reference, or distillation's teacher.
  virtual std::string reference_name() const { return "reference"; }

  // When a mixture-of-experts policy's load-balancing loss joins the
  // training loss (with router_aux_loss_coef), as the reference trainer
  // decides it: never; whenever the model is a mixture of experts (SFT,
  // DPO, KTO, GRPO, RLOO); or when its config sets output_router_logits
  // (CPO, ORPO).
  enum class RouterAuxLoss { Never, ForMixtures, WhenConfigAsks };
  virtual RouterAuxLoss router_aux_loss() const { return RouterAuxLoss::Never; }

  // A trainer's own state that a checkpoint carries for an exact resume
  // (e.g. an adaptive coefficient); null when it has none.
  virtual nlohmann::json state() const;
  virtual void restore_state(const nlohmann::json& state);
};

}  // namespace trlx::engine
