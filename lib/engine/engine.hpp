#pragma once
// The training loop every trainer runs on. A trainer supplies its examples,
// how to collate them and its loss; the engine owns everything else: the
// model and optimizer, schedule, accumulation, clipping, precision, logging,
// evaluation, checkpoints and resume.
//
// Every forward that feeds a loss goes through Engine::forward, the one place
// a distributed strategy will wrap.
#include <filesystem>
#include <functional>
#include <map>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include <nlohmann/json_fwd.hpp>
#include <torch/torch.h>

#include "config/accelerate.hpp"
#include "config/training.hpp"
#include "engine/loss_scale.hpp"
#include "engine/memory_plan.hpp"
#include "engine/metrics.hpp"
#include "engine/schedule.hpp"
#include "io/tensorboard.hpp"
#include "dist/strategy/strategy.hpp"
#include "losses/logprobs.hpp"
#include "model/decoder.hpp"
#include "model/generate.hpp"
#include "model/lora.hpp"

namespace trlx::engine {

using TensorMap = std::map<std::string, torch::Tensor>;

// A count known when a batch is collated, carried in a TensorMap to the
// trainer's loss() in a tensor's shape ([n, 0]: no storage), so that reading
// it after the batch moved to the device needs no device read.
inline torch::Tensor host_count(int64_t n) { return torch::empty({n, 0}); }
inline int64_t host_count(const TensorMap& batch, const std::string& key) {
  auto it = batch.find(key);
  return it == batch.end() ? 0 : it->second.size(0);
}

struct LossOutput {
  torch::Tensor loss_sum;  // summed over this micro-batch's items; the engine divides by the step's items
  MetricSums metrics;
};

class Engine;

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

  // A trainer's own state that a checkpoint carries for an exact resume
  // (e.g. an adaptive coefficient); null when it has none.
  virtual nlohmann::json state() const;
  virtual void restore_state(const nlohmann::json& state);
};

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

  // Runs training to the end (or to an interruption). Resumes first when the
  // config asks for it.
  RunSummary train(Trainer& trainer);

  // The forward every loss goes through: final hidden states of the model
  // in `role`, on the engine's device, under the run's precision. Reference
  // forwards keep no graph.
  torch::Tensor forward(Role role, const model::Batch& batch);
  // Per-token log-probs of `targets` under the head of the model in `role`
  // (see losses::token_logprobs); the chunked path when the memory plan says so.
  losses::TokenLogProbs logprobs(Role role, const torch::Tensor& hidden, const torch::Tensor& targets,
                                 const torch::Tensor& mask, const losses::LogProbOptions& options = {});
  // The head of the model in `role` on every position: scores
  // [B, T, labels] of a sequence-classification (reward/value) model, or
  // logits. Causal-LM losses use logprobs() instead, which never builds
  // the logits when the chunked path is on.
  torch::Tensor head(Role role, const torch::Tensor& hidden);
  // Per-token mean of the logits over the vocabulary (the logits/chosen
  // metric), without building the logits: hidden . mean of the head's rows
  // (a model with soft-capped logits builds them, one sequence at a time).
  // No gradient.
  torch::Tensor mean_logits(Role role, const torch::Tensor& hidden);
  // The head weight of the model in `role`, detached (for statistics over
  // the vocabulary that no loss differentiates, e.g. WPO weights).
  torch::Tensor head_weight(Role role);
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
  bool training() const { return policy_->is_training(); }
  // Training (dropout on) or evaluation mode for the policy, e.g. around a
  // precomputation pass before training.
  void set_training(bool on) {
    on ? policy_->train() : policy_->eval();
    if (value_) on ? value_->train() : value_->eval();
  }
  // TR-DPO's sync_ref_model, as a step hook: before the first forward of
  // every step that follows a multiple of `every_steps` completed steps,
  // the separate reference moves towards the policy:
  // ref = alpha * policy + (1 - alpha) * ref. InputError when the reference
  // is the policy with adapters disabled (call after set_reference).
  void sync_reference_every(int64_t every_steps, double alpha);
  bool has_separate_reference() const { return static_cast<bool>(reference_); }
  bool has_value_model() const { return static_cast<bool>(value_); }
  // A separate frozen reference model (otherwise Role::Reference is the
  // policy with adapters disabled).
  void set_reference(model::LanguageModel reference);
  // A frozen reward model the trainer scores with (Role::Reward), placed and
  // sharded as the reference is.
  void set_reward_model(model::LanguageModel reward);
  // Sums values over ranks (counts a trainer's loss needs globally).
  void sum_across_ranks(std::vector<double>& values) { strategy_->sum_across_ranks(values); }
  // `t` summed over ranks, as a new tensor on t's device; no host round trip.
  torch::Tensor sum_across_ranks(const torch::Tensor& t) { return strategy_->sum_across_ranks(t); }
  // The largest of each value over ranks (metrics such as max_reward).
  void max_across_ranks(std::vector<double>& values) { strategy_->max_across_ranks(values); }
  // The trainer's loss on a host micro-batch, moved to the device as a
  // step's are (for evaluate_rounds; the caller sets grad mode).
  LossOutput run_loss(Trainer& trainer, TensorMap batch);
  // True while loss() runs on a stand-in example (see Trainer::loss).
  bool standing_in() const { return standing_in_; }
  int rank() const { return comm_->rank(); }
  int world_size() const { return comm_->world_size(); }
  torch::Device device() const { return device_; }

  // Copies of the policy's parameter values (only the trained ones when
  // `trainable_only`), and the value model's under "value_model.", whole
  // even under parameter sharding, where this is a collective: every rank
  // calls it.
  std::map<std::string, torch::Tensor> parameter_values(bool trainable_only);
  const config::TrainingConfig& config() const { return config_; }
  const MemoryPlan& memory_plan() const { return plan_; }
  int64_t global_step() const { return step_; }
  // Where the run writes its model, checkpoints and logs.
  const std::filesystem::path& output_dir() const { return output_dir_; }
  // Input tokens the run has trained on so far, over all ranks (num_tokens).
  double tokens_seen() const { return tokens_seen_; }
  // The learning rate of the current step (the one global_step() counts up
  // to). A step whose one update was skipped (an fp16 overflow) does not
  // move the schedule, as transformers' Trainer; steps of several updates
  // (PPO) move it every step, as TRL's PPO loop.
  double learning_rate() const {
    const bool lags = loss_scale_ && updates_per_step_ == 1;
    return schedule_.lr(step_ - (lags ? loss_scale_->skipped() : 0));
  }
  int64_t total_steps() const { return schedule_.total_steps; }

  // Asks the loop to stop after the current step and save (SIGTERM/SIGINT).
  static void request_stop();

  // Tests reach the policy and single steps through this (tests/support/engine_probe.hpp).
  friend struct EngineProbe;

 private:
  // One optimizer step over these micro-batches (indices into the train
  // split) as the loop runs it; returns the loss and the grad norm before
  // clipping. For tests, through EngineProbe.
  std::pair<double, double> step_on(Trainer& trainer, const std::vector<std::vector<size_t>>& micro_batches);
  void sync_reference(double alpha);
  // A frozen model the run computes with: no gradients, eval mode, placed
  // and sharded by the strategy.
  void add_frozen_model(model::LanguageModelImpl& m);
  // Before a step's first forward: the step hooks (the reference sync).
  void before_step();
  void setup(Trainer& trainer);
  class RoleScope;
  model::LanguageModelImpl& model_for(Role role);
  model::Batch to_device(const model::Batch& b) const;
  // Whether a host [B, T] mask has padding only after each row's tokens.
  static bool padding_trails(const torch::Tensor& host_mask);
  // This rank's share of a global batch, on the device; a rank whose share
  // is empty gets the stand-in example. Its loss's items and its real tokens
  // are counted on the host first (0 for a stand-in).
  struct Collated {
    TensorMap batch;
    bool stand_in = false;
    double items = 0;
    double tokens = 0;
  };
  Collated collate_local(Trainer& trainer, const std::string& split, const std::vector<size_t>& global_batch);
  void reduce_metrics(MetricSums& m);
  void save_model(const std::filesystem::path& dir, bool into_existing_dir);
  // Runs `write` on rank 0, which calls the hook it is given before reading
  // each tensor; under parameter sharding every other rank joins the unit
  // gathers meanwhile. Every rank calls it.
  void write_on_rank0(const std::function<void(const io::BeforeWrite&)>& write);
  // Replaces the weights of `m` (the policy or the reference) with a saved
  // model's, on every rank (through the strategy under sharding).
  void load_full_weights(model::LanguageModelImpl& m, const std::filesystem::path& dir);
  // Writes `m` (the policy or the reference) in Hugging Face format.
  void save_full_model(model::LanguageModelImpl& m, const std::filesystem::path& dir, bool into_existing_dir);
  std::string optimizer_file() const;
  // Where the optimizer's state lives: the device of the tensors it updates.
  torch::Device optimizer_device() const;
  // The global batches of an epoch (for an online trainer: its rounds).
  std::vector<std::vector<size_t>> epoch_batches(size_t n, int64_t epoch) const;
  // One optimizer step over the micro-batches `collect` gives (called after
  // the step hooks, before the first forward).
  std::pair<double, double> optimizer_step(Trainer& trainer, const std::function<std::vector<Collated>()>& collect,
                                           MetricSums& metrics);
  std::pair<double, double> optimizer_step(Trainer& trainer, const std::vector<std::vector<size_t>>& micro,
                                           MetricSums& metrics);
  // An online trainer's next micro-batches for one step: from the current
  // round, generating the next (the epoch's next batch of prompts) when it is
  // used up. `metrics` and `tokens` receive a new round's.
  std::vector<Collated> next_online_micro_batches(Trainer& trainer, int64_t* epoch, size_t* batch_in_epoch,
                                                  std::vector<std::vector<size_t>>* batches, MetricSums& metrics);
  MetricSums evaluate(Trainer& trainer);
  void save_checkpoint(int64_t epoch, size_t batch_in_epoch);
  void resume(const std::filesystem::path& dir, int64_t* epoch, size_t* batch_in_epoch);
  // InputError, saying what to do, when the checkpoint whose trainer_state.json
  // is `state` cannot resume this run (another trainer, another optimizer layout).
  void check_resumable(const std::filesystem::path& dir, const nlohmann::json& state) const;
  // After resume: metrics.jsonl without the rows logged after the checkpoint.
  void drop_metrics_after_step();
  // Creates output_dir and fails now, not at the first save, when it is not writable.
  void prepare_output_dir();
  // The checkpoint resume_from_checkpoint names ("latest": the newest in output_dir), if any.
  std::optional<std::filesystem::path> checkpoint_to_resume() const;
  void open_tensorboard();
  void log_metrics(const std::map<std::string, double>& m);
  void print_startup(Trainer& trainer);
  std::string memory_savers() const;

  config::TrainingConfig config_;
  config::DistributedConfig dist_;
  MemoryPlan plan_;
  model::LanguageModel policy_;
  model::LanguageModel reference_{nullptr};
  model::LanguageModel value_{nullptr};  // trained with the policy (Role::Value)
  model::LanguageModel reward_{nullptr};  // frozen (Role::Reward)
  std::optional<model::LoraInfo> lora_;
  torch::Device device_{torch::kCPU};
  std::shared_ptr<dist::Communicator> comm_;
  std::unique_ptr<dist::Strategy> strategy_;
  std::string trainer_name_;
  std::optional<std::filesystem::path> tokenizer_dir_;
  std::optional<std::filesystem::path> base_dir_;
  std::filesystem::path output_dir_;
  std::unique_ptr<torch::optim::AdamW> optimizer_;
  Schedule schedule_;
  int64_t step_ = 0;
  // The precision forwards compute in under mixed precision (none: fp32).
  std::optional<at::ScalarType> autocast_dtype() const {
    if (config_.fp16) return at::kHalf;
    if (config_.use_bf16()) return at::kBFloat16;
    return std::nullopt;
  }
  int64_t updates_per_step_ = 1;  // the trainer's (setup)
  double step_lr_ = 0;            // the learning rate of the last step
  // fp16 mixed precision's dynamic loss scale (none otherwise).
  std::optional<LossScale> loss_scale_;
  bool standing_in_ = false;
  // The separate reference has been moved by sync_reference (TR-DPO):
  // checkpoints then carry it (reference/), and resume restores it.
  bool reference_moved_ = false;
  struct ReferenceSync {
    int64_t every_steps;
    double alpha;
  };
  std::optional<ReferenceSync> reference_sync_;
  int64_t micro_per_step_ = 1;
  // The trainer train() runs (its state goes into checkpoints).
  Trainer* trainer_ = nullptr;
  // An online trainer's current round: its micro-batches and how many of
  // the round's micro-steps (passes x micro-batches) are still to train.
  int64_t online_prompts_per_round_ = 0;
  std::vector<TensorMap> round_batches_;
  size_t round_next_ = 0, round_left_ = 0;
  double round_tokens_ = 0;  // this rank's tokens of rounds generated in the current step
  // Generation rounds run in the current step (each gets its own seed).
  int64_t generation_step_ = -1, generation_rounds_ = 0;
  // Evaluation samples from seeds of its own (per evaluation, counted from
  // 0), so that evaluating leaves training's completions as they were.
  bool evaluating_ = false;
  int64_t eval_generation_rounds_ = 0;
  size_t batches_per_epoch_ = 0;
  double tokens_seen_ = 0;
  std::vector<std::string> log_history_;  // JSON lines, for trainer_state.json
  std::unique_ptr<io::EventWriter> tensorboard_;  // rank 0, report_to: tensorboard
  // Moves a collated batch to the device, noting first what only the host
  // copy tells without a device read: which attention masks' padding trails,
  // and the branch reach of packed positions (model::branch_reach).
  void move_collated(TensorMap& batch);
  // What move_collated noted for this step's micro-batches, held with the
  // device tensors it describes (so that none is freed and its address
  // reused while the step runs): masks whose padding trails, and packed
  // position ids with their branch reach on the device.
  std::vector<torch::Tensor> trailing_masks_;
  std::vector<std::pair<torch::Tensor, torch::Tensor>> branch_reaches_;
};

}  // namespace trlx::engine
