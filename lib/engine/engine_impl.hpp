#pragma once
// The Engine's insides: its state and the steps of the loop, saving,
// resuming and reporting. Private to the engine: only lib/engine/*.cpp
// include this header (engine_probe.cpp among them, for tests), so that a
// change here recompiles those files alone. Each public Engine method
// forwards to the Impl method of the same name (engine.cpp).
#include <filesystem>
#include <functional>
#include <map>
#include <memory>
#include <optional>
#include <string>
#include <utility>
#include <vector>

#include <nlohmann/json_fwd.hpp>
#include <torch/torch.h>

#include "config/accelerate.hpp"
#include "config/training.hpp"
#include "dist/strategy/mesh.hpp"
#include "dist/strategy/strategy.hpp"
#include "engine/engine.hpp"
#include "engine/loss_scale.hpp"
#include "engine/memory_plan.hpp"
#include "engine/metrics.hpp"
#include "engine/schedule.hpp"
#include "io/safetensors.hpp"
#include "rewards/program.hpp"
#include "io/tensorboard.hpp"
#include "io/trackio.hpp"
#include "losses/logprobs.hpp"
#include "model/decoder.hpp"
#include "model/generate.hpp"
#include "model/lora.hpp"

namespace trlx::engine {

struct Engine::Impl {
  Impl(Engine& owner, const config::TrainingConfig& config, model::LanguageModel policy, std::string trainer_name,
       std::optional<std::filesystem::path> tokenizer_dir, std::optional<model::LoraInfo> lora,
       std::shared_ptr<dist::Communicator> comm, model::LanguageModel value_model);

  // The Engine this is the inside of: what trainer hooks are handed.
  Engine& owner() { return *owner_; }
  Engine* owner_;

  // --- the public methods' bodies (see engine.hpp) ---------------------------
  RunSummary train(Trainer& trainer);
  torch::Tensor forward(Role role, const model::Batch& batch);
  losses::TokenLogProbs logprobs(Role role, const torch::Tensor& hidden, const torch::Tensor& targets,
                                 const torch::Tensor& mask, const losses::LogProbOptions& options);
  torch::Tensor head(Role role, const torch::Tensor& hidden);
  torch::Tensor mean_logits(Role role, const torch::Tensor& hidden);
  torch::Tensor head_weight(Role role);
  std::vector<torch::Tensor> with_heads(Role trained, const torch::Tensor& input, Role frozen,
                                        const Engine::TwoHeads& compute);
  const model::ModelConfig& model_config(Role role);
  model::Generation generate(const std::vector<std::vector<int64_t>>& prompts, model::GenerationOptions options,
                             const GenerationPlacement& placement);
  bool training() const { return policy_->is_training(); }
  void set_training(bool on) {
    on ? policy_->train() : policy_->eval();
    if (value_) on ? value_->train() : value_->eval();
  }
  void sync_reference_every(int64_t every_steps, double alpha);
  bool has_separate_reference() const { return static_cast<bool>(reference_); }
  bool has_value_model() const { return static_cast<bool>(value_); }
  void set_reference(model::LanguageModel reference);
  void set_reward_model(model::LanguageModel reward);
  void sum_across_ranks(std::vector<double>& values) { strategy_->sum_across_ranks(values); }
  torch::Tensor sum_across_ranks(const torch::Tensor& t) { return strategy_->sum_across_ranks(t); }
  void max_across_ranks(std::vector<double>& values) { strategy_->max_across_ranks(values); }
  std::vector<std::vector<double>> gather_across_ranks(const std::vector<double>& mine) {
    return strategy_->gather_across_ranks(mine);
  }
  LossOutput run_loss(Trainer& trainer, TensorMap batch);
  bool standing_in() const { return standing_in_; }
  int rank() const { return comm_->rank(); }
  int world_size() const { return comm_->world_size(); }
  // Data parallelism: the ranks of a sequence group read the same batch, so
  // a global batch is split over data ranks, not over every rank.
  int data_rank() const { return mesh_.data_rank(); }
  int data_size() const { return mesh_.data_size(); }
  // Sequence parallelism's group size (1: none): each rank of a group
  // counts the group's items and tokens again.
  int seq_size() const { return mesh_.seq(); }
  torch::Device device() const { return device_; }
  std::map<std::string, torch::Tensor> parameter_values(bool trainable_only);
  const config::TrainingConfig& config() const { return config_; }
  const MemoryPlan& memory_plan() const { return plan_; }
  int64_t global_step() const { return step_; }
  const std::filesystem::path& output_dir() const { return output_dir_; }
  double tokens_seen() const { return tokens_seen_; }
  double learning_rate() const {
    const bool lags = loss_scale_ && updates_per_step_ == 1;
    return schedule_.lr(step_ - (lags ? loss_scale_->skipped() : 0));
  }
  int64_t total_steps() const { return schedule_.total_steps; }

  // --- private steps ---------------------------------------------------------
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
  // The trained weights of checkpoint `dir` (the policy or its adapter, and
  // the value model) into the running models, under any strategy.
  void load_checkpoint_weights(const std::filesystem::path& dir);
  // metric_for_best_model as logged (eval_...), when checkpoints are ranked.
  std::optional<std::string> best_metric_name() const;
  // After an evaluation: whether `metrics` set a new best (and its step).
  bool note_best_metric(const std::map<std::string, double>& metrics);
  // load_best_model_at_end, once training ends: the best checkpoint's weights.
  void load_best_model();
  // best_checkpoint_ from best_global_step_, once that checkpoint is saved.
  void note_best_checkpoint();
  // InputError, saying what to do, when the checkpoint whose trainer_state.json
  // is `state` cannot resume this run (another trainer, another optimizer layout).
  // Checks the checkpoint's files against its manifest (those this rank
  // reads); InputError naming the damaged file and the checkpoint before it.
  void verify_checkpoint(const std::filesystem::path& dir) const;
  void check_resumable(const std::filesystem::path& dir, const nlohmann::json& state) const;
  // After resume: metrics.jsonl without the rows logged after the checkpoint.
  void drop_metrics_after_step();
  // Creates output_dir and fails now, not at the first save, when it is not writable.
  void prepare_output_dir();
  // The checkpoint resume_from_checkpoint names ("latest": the newest in output_dir), if any.
  std::optional<std::filesystem::path> checkpoint_to_resume() const;
  void open_tensorboard();
  // load_in_4bit: the policy's linear layers kept in 4 bits, before adapters.
  void quantize_base();
  // report_to: trackio, on rank 0: the run in trackio's local database.
  void open_trackio();
  void log_metrics(const std::map<std::string, double>& m);
  void print_startup(Trainer& trainer);
  std::string memory_savers() const;

  // --- state -----------------------------------------------------------------
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
  dist::Mesh mesh_;
  // Installed in every model a forward runs through (policy, reference);
  // null without sequence parallelism.
  std::shared_ptr<model::SequenceParallel> sequence_parallel_;
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
  // The weight of the policy's load-balancing loss (mixture of experts) in
  // the training loss; 0: not added, and no router statistics kept.
  double router_aux_coef_ = 0.0;
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
  double input_tokens_seen_ = 0;  // every token id fed in, padding too (include_num_input_tokens_seen)
  // The best evaluation so far of metric_for_best_model, the step it was
  // reached at (0: none) and that step's checkpoint, once saved.
  std::optional<double> best_metric_;
  int64_t best_global_step_ = 0;
  std::optional<std::filesystem::path> best_checkpoint_;
  bool pin_batches_ = false;      // dataloader_pin_memory on a GPU
  std::vector<std::string> log_history_;  // JSON lines, for trainer_state.json
  // Rank 0: metrics.jsonl rows not written yet (a full disk), oldest first;
  // each log tries them again, and the run fails at its end if any is left.
  std::vector<std::string> unwritten_metrics_;
  bool flush_metrics();
  std::unique_ptr<io::EventWriter> tensorboard_;  // rank 0, report_to: tensorboard
  std::unique_ptr<io::TrackioRun> trackio_;       // rank 0, report_to: trackio
  // Rank 0, report_to: [{command: ...}]: programs that receive the run as
  // JSON lines; one that fails is dropped with a warning and the run goes on.
  std::vector<std::unique_ptr<rewards::LoggerProgram>> loggers_;
  void start_loggers(const std::string& trainer);
  void send_to_loggers(const nlohmann::ordered_json& event);
  void close_loggers(bool interrupted);
  // Moves a collated batch to the device, noting first what only the host
  // copy tells without a device read: which attention masks' padding trails,
  // and the branch reach of packed positions (model::branch_reach).
  void move_collated(TensorMap& batch);
  // What move_collated noted for this step's micro-batches, held with the
  // device tensors it describes (so that none is freed and its address
  // reused while the step runs): masks whose padding trails, packed
  // position ids with their branch reach on the device, and packed document
  // ids with their segments (model::document_segments) on the device.
  std::vector<torch::Tensor> trailing_masks_;
  std::vector<std::pair<torch::Tensor, torch::Tensor>> branch_reaches_;
  struct Segments {
    torch::Tensor document_ids, cu_seqlens;
    int64_t longest = 0;
  };
  std::vector<Segments> segments_;
  // How often a forward read those facts from a host tensor that
  // move_collated had not seen: on a GPU the tensor would be on the device
  // and the facts lost (a masked attention path, a device read), so the
  // tests hold it at 0 for batches the engine moves.
  mutable int64_t host_fact_reads_ = 0;
  void forget_host_facts() {
    trailing_masks_.clear();
    branch_reaches_.clear();
    segments_.clear();
  }
};

}  // namespace trlx::engine
