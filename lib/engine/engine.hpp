#pragma once
// The training loop every trainer runs on. A trainer supplies its examples,
// how to collate them and its loss; the engine owns everything else: the
// model and optimizer, schedule, accumulation, clipping, precision, logging,
// evaluation, checkpoints and resume.
//
// Every forward that feeds a loss goes through Engine::forward, the one place
// a distributed strategy will wrap.
//
// What a trainer implements is in engine/trainer.hpp; the engine's state is
// behind Impl (engine/engine_impl.hpp).
#include <cstdint>
#include <filesystem>
#include <functional>
#include <map>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include <ATen/core/Tensor.h>

#include "engine/trainer.hpp"
#include "losses/logprobs.hpp"
#include "model/decoder.hpp"
#include "model/generate.hpp"
#include "model/lora.hpp"

namespace trlx::config {
struct TrainingConfig;
}
namespace trlx::dist {
class Communicator;
}

namespace trlx::engine {

struct MemoryPlan;

struct RunSummary {
  int64_t steps = 0;
  double final_loss = 0;
  bool interrupted = false;
  std::filesystem::path output_dir;
};

// The model a run trains, as the config names it: a Hugging Face model
// directory, or a LoRA adapter directory (PEFT format) whose base it names.
struct LoadedPolicy {
  model::LanguageModel model{nullptr};
  std::optional<model::LoraInfo> lora;   // set when the directory was an adapter
  std::filesystem::path base_dir;        // the full model's directory
  std::filesystem::path tokenizer_dir;   // where tokenizer files are
};
LoadedPolicy load_policy(const config::TrainingConfig& config, model::HeadKind head);

class Engine {
 public:
  // `value_model`: a second model trained with the policy, by the same
  // optimizer and strategy (PPO's value model, a one-label score head); its
  // forwards run as Role::Value, and checkpoints and the final save hold it
  // in value_model/.
  Engine(const config::TrainingConfig& config, LoadedPolicy policy, std::string trainer_name,
         model::LanguageModel value_model = model::LanguageModel{nullptr});
  // `lora`: the policy already carries this adapter (a run continuing from
  // a saved adapter); otherwise use_peft attaches new ones.
  Engine(const config::TrainingConfig& config, model::LanguageModel policy, std::string trainer_name,
         std::optional<std::filesystem::path> tokenizer_dir = std::nullopt,
         std::optional<model::LoraInfo> lora = std::nullopt,
         std::shared_ptr<dist::Communicator> comm = nullptr,  // default: from the launcher
         model::LanguageModel value_model = model::LanguageModel{nullptr});
  ~Engine();
  Engine(Engine&& other) noexcept;
  Engine& operator=(Engine&& other) noexcept;

  // Runs training to the end (or to an interruption). Resumes first when the
  // config asks for it.
  RunSummary train(Trainer& trainer);

  // The forward every loss goes through: final hidden states of the model
  // in `role`, on the engine's device, under the run's precision. Reference
  // forwards keep no graph.
  at::Tensor forward(Role role, const model::Batch& batch);
  // Per-token log-probs of `targets` under the head of the model in `role`
  // (see losses::token_logprobs); the chunked path when the memory plan says so.
  losses::TokenLogProbs logprobs(Role role, const at::Tensor& hidden, const at::Tensor& targets,
                                 const at::Tensor& mask, const losses::LogProbOptions& options = {});
  // The head of the model in `role` on every position: scores
  // [B, T, labels] of a sequence-classification (reward/value) model, or
  // logits. Causal-LM losses use logprobs() instead, which never builds
  // the logits when the chunked path is on.
  at::Tensor head(Role role, const at::Tensor& hidden);
  // Per-token mean of the logits over the vocabulary (the logits/chosen
  // metric), without building the logits: hidden . mean of the head's rows
  // (a model with soft-capped logits builds them, one sequence at a time).
  // No gradient.
  at::Tensor mean_logits(Role role, const at::Tensor& hidden);
  // Runs `compute` with two models' head weights at hand at once (both
  // gathered under sharding), under the run's precision: `trained`'s, through
  // which gradients flow back to `input` (its hidden states) and to the
  // weight, and `frozen`'s, a separate frozen model's (a distillation
  // teacher as Role::Reference), read without gradient. Returns what
  // `compute` returns.
  using TwoHeads = std::function<std::vector<at::Tensor>(const at::Tensor& trained_weight,
                                                         const at::Tensor& frozen_weight)>;
  std::vector<at::Tensor> with_heads(Role trained, const at::Tensor& input, Role frozen, const TwoHeads& compute);
  // The head weight of the model in `role`, detached (for statistics over
  // the vocabulary that no loss differentiates, e.g. WPO weights).
  at::Tensor head_weight(Role role);
  // The config.json of a role's model (e.g. its logit soft cap).
  const model::ModelConfig& model_config(Role role);
  // How a generation round holds the policy's weights when parameters are
  // sharded (ZeRO-3/FSDP); ignored when they are whole. gather_all
  // (ds3_gather_for_generation: true): every unit gathered once for the
  // round. Otherwise the units that fit in budget_mb
  // (ds3_gather_for_generation_budget_mb; 0: none) stay gathered for the
  // round and the rest are gathered for each forward and freed at once.
  struct GenerationPlacement {
    bool gather_all = true;
    double budget_mb = 0;
  };
  // Completions of `prompts` (token ids) from the policy as it trains: its
  // adapters applied, in eval mode, without gradients or gradient
  // checkpointing, under the run's precision. Every rank calls it with its
  // own prompts (under sharding ranks run in lockstep until all are done).
  // The sampling seed comes from the run's seed, the step and the rank;
  // the run's own random state is left as it was, so training goes on
  // exactly as if no generation had happened.
  model::Generation generate(const std::vector<std::vector<int64_t>>& prompts, model::GenerationOptions options,
                             const GenerationPlacement& placement);
  // Whether the policy is in training mode (false during evaluation and
  // precomputation).
  bool training() const;
  // Training (dropout on) or evaluation mode for the policy, e.g. around a
  // precomputation pass before training.
  void set_training(bool on);
  // TR-DPO's sync_ref_model, as a step hook: before the first forward of
  // every step that follows a multiple of `every_steps` completed steps,
  // the separate reference moves towards the policy:
  // ref = alpha * policy + (1 - alpha) * ref. InputError when the reference
  // is the policy with adapters disabled (call after set_reference).
  void sync_reference_every(int64_t every_steps, double alpha);
  bool has_separate_reference() const;
  bool has_value_model() const;
  // A separate frozen reference model (otherwise Role::Reference is the
  // policy with adapters disabled).
  void set_reference(model::LanguageModel reference);
  // A frozen reward model the trainer scores with (Role::Reward), placed and
  // sharded as the reference is.
  void set_reward_model(model::LanguageModel reward);
  // Sums values over ranks (counts a trainer's loss needs globally).
  void sum_across_ranks(std::vector<double>& values);
  // `t` summed over ranks, as a new tensor on t's device; no host round trip.
  at::Tensor sum_across_ranks(const at::Tensor& t);
  // The largest of each value over ranks (metrics such as max_reward).
  void max_across_ranks(std::vector<double>& values);
  // Every rank's `mine` (any length, exact), rank by rank; and the same laid
  // end to end in rank order.
  std::vector<std::vector<double>> gather_across_ranks(const std::vector<double>& mine);
  std::vector<double> concat_across_ranks(const std::vector<double>& mine);
  // Moves a host micro-batch to the device as a step's are, noting what only
  // the host copy tells (which masks' padding trails, packed rows' segments)
  // so that a forward on it takes the step's attention path, without a
  // device read.
  void move_batch(TensorMap& batch);
  // The trainer's loss on a host micro-batch, moved to the device as a
  // step's are (for evaluate_rounds; the caller sets grad mode).
  LossOutput run_loss(Trainer& trainer, TensorMap batch);
  // True while loss() runs on a stand-in example (see Trainer::loss).
  bool standing_in() const;
  int rank() const;
  int world_size() const;
  // The data-parallel rank and size: the ranks of one sequence-parallel
  // group read the same batches (without sequence parallelism: rank and
  // world size).
  int data_rank() const;
  int data_size() const;
  c10::Device device() const;

  // Copies of the policy's parameter values (only the trained ones when
  // `trainable_only`), and the value model's under "value_model.", whole
  // even under parameter sharding, where this is a collective: every rank
  // calls it.
  std::map<std::string, at::Tensor> parameter_values(bool trainable_only);
  const config::TrainingConfig& config() const;
  const MemoryPlan& memory_plan() const;
  int64_t global_step() const;
  // Where the run writes its model, checkpoints and logs.
  const std::filesystem::path& output_dir() const;
  // Input tokens the run has trained on so far, over all ranks (num_tokens).
  double tokens_seen() const;
  // The learning rate of the current step (the one global_step() counts up
  // to). A step whose one update was skipped (an fp16 overflow) does not
  // move the schedule, as transformers' Trainer; steps of several updates
  // (PPO) move it every step, as TRL's PPO loop.
  double learning_rate() const;
  int64_t total_steps() const;

  // Asks the loop to stop after the current step and save (SIGTERM/SIGINT).
  static void request_stop();

  // Tests reach the policy and single steps through this (engine/engine_probe.hpp).
  friend struct EngineProbe;

 private:
  // The engine's state and private steps (engine/engine_impl.hpp, which only
  // the engine's own sources include): a change there recompiles them alone,
  // not every trainer and test that includes this header.
  struct Impl;
  std::unique_ptr<Impl> impl_;
};

}  // namespace trlx::engine
