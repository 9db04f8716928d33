#pragma once
// Fields every trainer shares: where the model and data are, the optimizer and
// schedule, precision, logging, checkpoints, memory savers, distribution.
// Names and defaults are those TRL users know (TrainingArguments, ModelConfig,
// ScriptArguments); tests compare the defaults with TRL's own.
#include <optional>
#include <string>
#include <vector>

#include "config/loader.hpp"
#include "config/schema.hpp"
#include "config/trainer_names.hpp"

namespace trlx::config {

struct TrainingConfig {
  // what to train on
  std::string trainer;
  std::optional<std::string> model_name_or_path;
  std::optional<std::string> dataset_name;
  std::string model_revision;
  std::optional<int64_t> dataset_num_proc;
  std::string dataset_train_split;
  std::string dataset_test_split;
  bool skip_bad_rows = false;
  // model and adapters
  std::string dtype;
  bool use_peft = false;
  int64_t lora_r = 0;
  int64_t lora_alpha = 0;
  double lora_dropout = 0;
  std::optional<std::vector<std::string>> lora_target_modules;
  std::optional<std::vector<std::string>> lora_modules_to_save;
  bool use_rslora = false;
  // optimisation
  double learning_rate = 0;
  int64_t per_device_train_batch_size = 0;
  int64_t per_device_eval_batch_size = 0;
  int64_t gradient_accumulation_steps = 0;
  double num_train_epochs = 0;
  int64_t max_steps = 0;
  std::string lr_scheduler_type;
  std::optional<double> lr_scheduler_min_lr, lr_scheduler_min_lr_rate, lr_scheduler_num_cycles;
  double warmup_steps = 0;
  std::optional<double> warmup_ratio;
  double weight_decay = 0;
  double adam_beta1 = 0, adam_beta2 = 0, adam_epsilon = 0;
  std::string optim;
  double max_grad_norm = 0;
  int64_t seed = 0;
  std::optional<int64_t> data_seed;
  std::optional<bool> bf16;
  bool fp16 = false;
  bool dataloader_drop_last = false;
  std::string train_sampling_strategy = "random";
  bool average_tokens_across_devices = true;
  // sequence handling
  std::optional<int64_t> max_length;
  bool disable_dropout = false;
  // memory savers
  bool gradient_checkpointing = false;
  std::optional<bool> use_reentrant;
  bool use_liger_kernel = false;
  int64_t logprob_chunk_size = 0;
  // logging, evaluation, checkpoints
  std::optional<std::string> output_dir;
  double logging_steps = 0;
  bool logging_first_step = false;
  std::string logging_strategy;
  std::string log_level;
  std::vector<std::string> report_to;
  std::string eval_strategy;
  std::optional<double> eval_steps;
  std::string save_strategy;
  double save_steps = 0;
  std::optional<int64_t> save_total_limit;
  std::optional<std::string> resume_from_checkpoint;
  // distribution
  std::optional<std::string> accelerate_config;
  int64_t ddp_timeout = 0;
  std::optional<double> ddp_bucket_cap_mb;
  std::optional<bool> ddp_find_unused_parameters;
  int64_t debug_check_grad_sync_steps = 0;
  bool debug_force_distributed = false;

  // Derived: bf16 resolves to true unless fp16 is set, as in TRL.
  bool use_bf16() const { return bf16.value_or(!fp16); }
};

// Per-trainer defaults that differ from the shared ones (TRL sets these per trainer).
struct TrainingDefaults {
  double learning_rate = 2e-5;
  bool gradient_checkpointing = true;
  bool disable_dropout = false;
  std::optional<int64_t> max_length = 1024;
  double logging_steps = 10;
  std::string train_sampling_strategy = "random";
};

template <class C>
void add_training_fields(SchemaBuilder<C>& b, const TrainingDefaults& d) {
  using T = TrainingConfig;
  b.group("data and model");
  b.field(&T::trainer, "trainer", "", "Trainer this config is for; lets `trlx validate --config F` tell.")
      .one_of([] {
        auto v = trainer_names();
        v.insert(v.begin(), "");
        return v;
      }());
  b.field(&T::model_name_or_path, "model_name_or_path", std::nullopt,
          "Model to start from: a Hugging Face model directory (config.json + safetensors) or a hub name "
          "(org/name) found in the Hugging Face cache or downloaded into it.")
      .hub_model("model_revision");
  b.field(&T::model_revision, "model_revision", "main",
          "Hub revision (branch, tag or commit) of model_name_or_path when it is a hub name.");
  b.field(&T::dataset_name, "dataset_name", std::nullopt,
          "Dataset: a JSONL/JSON/Parquet file, a directory of them (train/test splits), a save_to_disk "
          "directory, or a hub dataset name (org/name).")
      .hub_dataset();
  b.field(&T::dataset_num_proc, "dataset_num_proc", std::nullopt,
          "Threads that tokenize and shape the dataset; null: one.")
      .min(1);
  b.field(&T::dataset_train_split, "dataset_train_split", "train", "Split used for training.");
  b.field(&T::dataset_test_split, "dataset_test_split", "test", "Split used for evaluation.");
  b.field(&T::skip_bad_rows, "skip_bad_rows", false,
          "Skip dataset rows that fail to parse or lack a column (counted and logged) instead of stopping.");
  b.field(&T::dtype, "dtype", "float32", "Dtype the model weights are loaded in.")
      .one_of({"auto", "float32", "bfloat16", "float16"});

  b.group("LoRA");
  b.field(&T::use_peft, "use_peft", false, "Train LoRA adapters instead of all weights.");
  b.field(&T::lora_r, "lora_r", 16, "LoRA rank.").min(1);
  b.field(&T::lora_alpha, "lora_alpha", 32, "LoRA scaling numerator (scale = alpha / r).").min(1);
  b.field(&T::lora_dropout, "lora_dropout", 0.05, "Dropout on the LoRA input.").min(0).max(1, true);
  b.field(&T::lora_target_modules, "lora_target_modules", std::nullopt,
          "Modules that get adapters (names or \"all-linear\"); null: q_proj and v_proj.");
  b.field(&T::lora_modules_to_save, "lora_modules_to_save", std::nullopt,
          "Modules trained in full and saved with the adapter (e.g. lm_head).");
  b.field(&T::use_rslora, "use_rslora", false, "Rank-stabilised LoRA: scale = alpha / sqrt(r).");

  b.group("optimisation");
  b.field(&T::learning_rate, "learning_rate", d.learning_rate, "Peak learning rate of AdamW.").min(0);
  b.field(&T::per_device_train_batch_size, "per_device_train_batch_size", 8, "Sequences per process per micro-step.").min(1);
  b.field(&T::per_device_eval_batch_size, "per_device_eval_batch_size", 8, "Sequences per process per evaluation step.").min(1);
  b.field(&T::gradient_accumulation_steps, "gradient_accumulation_steps", 1,
          "Micro-steps accumulated before each optimizer step.").min(1);
  b.field(&T::num_train_epochs, "num_train_epochs", 3.0, "Passes over the training data (ignored when max_steps > 0).").min(0, true);
  b.field(&T::max_steps, "max_steps", -1, "Total optimizer steps; -1 derives them from num_train_epochs.").min(-1);
  b.field(&T::lr_scheduler_type, "lr_scheduler_type", "linear", "Learning-rate schedule.")
      .one_of({"linear", "cosine", "cosine_with_min_lr", "constant", "constant_with_warmup"});
  b.field(&T::lr_scheduler_min_lr, "lr_scheduler_kwargs.min_lr", std::nullopt,
          "cosine_with_min_lr: the floor learning rate.").min(0).bound_to("lr_scheduler_min_lr");
  b.field(&T::lr_scheduler_min_lr_rate, "lr_scheduler_kwargs.min_lr_rate", std::nullopt,
          "cosine_with_min_lr: the floor as a fraction of learning_rate.").min(0).max(1).bound_to("lr_scheduler_min_lr_rate");
  b.field(&T::lr_scheduler_num_cycles, "lr_scheduler_kwargs.num_cycles", std::nullopt,
          "cosine schedules: number of cosine waves (default 0.5: one half-wave down).").min(0)
      .bound_to("lr_scheduler_num_cycles");
  b.field(&T::warmup_steps, "warmup_steps", 0.0,
          "Linear warmup: a step count, or a fraction of all steps when below 1.").min(0);
  b.field(&T::warmup_ratio, "warmup_ratio", std::nullopt, "Older form of a fractional warmup_steps.").min(0).max(1);
  b.field(&T::weight_decay, "weight_decay", 0.0, "Decoupled weight decay (not applied to biases and norm weights).").min(0);
  b.field(&T::adam_beta1, "adam_beta1", 0.9, "AdamW beta1.").min(0).max(1, true);
  b.field(&T::adam_beta2, "adam_beta2", 0.999, "AdamW beta2.").min(0).max(1, true);
  b.field(&T::adam_epsilon, "adam_epsilon", 1e-8, "AdamW epsilon.").min(0, true);
  b.field(&T::optim, "optim", "adamw_torch_fused", "Optimizer (trlx implements AdamW).")
      .one_of({"adamw_torch", "adamw_torch_fused"});
  b.field(&T::max_grad_norm, "max_grad_norm", 1.0, "Clip the global gradient norm to this; 0 disables clipping.").min(0);
  b.field(&T::seed, "seed", 42, "Seed for initialisation, shuffling, dropout and sampling.");
  b.field(&T::data_seed, "data_seed", std::nullopt, "Seed for data shuffling only (defaults to seed).");
  b.field(&T::bf16, "bf16", std::nullopt, "bf16 mixed precision; null means true unless fp16 is set.")
      .read_via("use_bf16");
  b.field(&T::fp16, "fp16", false,
          "fp16 mixed precision: float32 weights, fp16 autocast, and dynamic loss scaling (from 65536, halved and "
          "the update skipped when gradients overflow, doubled after 2000 clean updates).");
  b.field(&T::dataloader_drop_last, "dataloader_drop_last", false, "Drop the last incomplete batch of an epoch.");
  b.field(&T::train_sampling_strategy, "train_sampling_strategy", d.train_sampling_strategy,
          "Order of the training examples: random (reshuffled every epoch, from data_seed) or sequential "
          "(as stored). group_by_length and batch_rebalance are not built.")
      .one_of({"random", "sequential"});
  b.field(&T::average_tokens_across_devices, "average_tokens_across_devices", true,
          "Normalise the loss by the token count summed over all ranks.");

  b.group("sequences");
  b.field(&T::max_length, "max_length", d.max_length, "Truncate tokenized sequences to this length; null keeps all.").min(1);
  b.field(&T::disable_dropout, "disable_dropout", d.disable_dropout, "Turn off dropout in the model(s).");

  b.group("memory");
  b.field(&T::gradient_checkpointing, "gradient_checkpointing", d.gradient_checkpointing,
          "Recompute each decoder layer in backward instead of keeping its activations.");
  b.field(&T::use_reentrant, "gradient_checkpointing_kwargs.use_reentrant", std::nullopt,
          "Checkpointing mode: true recomputes through a separate backward per layer, false inside the main "
          "backward; null lets trlx choose.");
  b.field(&T::use_liger_kernel, "use_liger_kernel", false,
          "Chunked log-prob/cross-entropy that never builds the [tokens x vocab] logits.");
  b.field(&T::logprob_chunk_size, "logprob_chunk_size", 1024,
          "Tokens per chunk of the chunked log-prob path (with use_liger_kernel).").min(1);

  b.group("logging and checkpoints");
  b.field(&T::output_dir, "output_dir", std::nullopt, "Where checkpoints, metrics and the final model go (default trainer_output).");
  b.field(&T::logging_steps, "logging_steps", d.logging_steps, "Log every N steps (a fraction of all steps when below 1).").min(0, true);
  b.field(&T::logging_first_step, "logging_first_step", false, "Also log after the first step.");
  b.field(&T::logging_strategy, "logging_strategy", "steps", "When to log.").one_of({"no", "steps", "epoch"});
  b.field(&T::log_level, "log_level", "passive", "Log level of rank 0 (passive = info).")
      .one_of({"passive", "debug", "info", "warning", "error", "critical"});
  b.field(&T::report_to, "report_to", std::vector<std::string>{"none"},
          "Extra metric sinks besides stdout and metrics.jsonl.")
      .one_of({"none", "tensorboard", "all"});
  b.field(&T::eval_strategy, "eval_strategy", "no", "When to evaluate.").one_of({"no", "steps", "epoch"});
  b.field(&T::eval_steps, "eval_steps", std::nullopt, "Evaluate every N steps (defaults to logging_steps).").min(0, true);
  b.field(&T::save_strategy, "save_strategy", "steps", "When to save checkpoints.").one_of({"no", "steps", "epoch"});
  b.field(&T::save_steps, "save_steps", 500.0, "Save every N steps (a fraction of all steps when below 1).").min(0, true);
  b.field(&T::save_total_limit, "save_total_limit", std::nullopt, "Keep at most this many checkpoints.").min(1);
  b.field(&T::resume_from_checkpoint, "resume_from_checkpoint", std::nullopt,
          "Checkpoint directory to resume from, or \"latest\" for the newest in output_dir.");

  b.group("distributed");
  b.field(&T::accelerate_config, "accelerate_config", std::nullopt,
          "Distributed preset (single_gpu, multi_gpu, fsdp, zero1, zero2, zero3) or an accelerate config file.");
  b.field(&T::ddp_timeout, "ddp_timeout", 1800, "Seconds a collective may wait before the run fails.").min(1);
  b.field(&T::ddp_bucket_cap_mb, "ddp_bucket_cap_mb", std::nullopt,
          "DDP: gradients are all-reduced in buckets of this many MB as backward produces them (null = 25).")
      .min(0, true);
  b.field(&T::ddp_find_unused_parameters, "ddp_find_unused_parameters", std::nullopt,
          "DDP: allow parameters that get no gradient in a step (they are reduced as zeros); "
          "null reports them as an error.");
  b.field(&T::debug_check_grad_sync_steps, "debug_check_grad_sync_steps", 0,
          "Every N steps, compare a hash of the reduced gradients across ranks and stop on a mismatch "
          "(0 = off).").min(0);
  b.field(&T::debug_force_distributed, "debug_force_distributed", false,
          "Run the accelerate config's strategy (DDP, ZeRO, FSDP), and on a GPU the NCCL communicator, even with "
          "one process, so that one GPU exercises the multi-GPU code paths (checks and benchmarks).");

  b.rule([](const C& c, Conflicts& out) {
    if (c.fp16 && c.bf16.value_or(false))
      out.conflict({"fp16", "bf16"}, "choose one mixed precision: fp16 (with loss scaling) or bf16");
    if (c.fp16 && !c.use_peft &&
        (c.dtype == "float16" || c.dtype == "fp16" || c.dtype == "bfloat16" || c.dtype == "bf16"))
      out.invalid("dtype", "fp16 mixed precision trains float32 weights and computes in fp16 under autocast (16-bit "
                           "gradients would lose what the loss scale keeps): set dtype: float32, or train LoRA "
                           "adapters (use_peft: true), which are float32 on any base");
    if (c.warmup_ratio && c.warmup_steps > 0)
      out.conflict({"warmup_ratio", "warmup_steps"}, "give the warmup once: drop warmup_ratio (warmup_steps below 1 is a ratio)");
    if (c.lr_scheduler_type == "cosine_with_min_lr" && !c.lr_scheduler_min_lr && !c.lr_scheduler_min_lr_rate)
      out.invalid("lr_scheduler_type", "cosine_with_min_lr needs lr_scheduler_kwargs.min_lr or lr_scheduler_kwargs.min_lr_rate");
    if (c.lr_scheduler_min_lr && c.lr_scheduler_min_lr_rate)
      out.conflict({"lr_scheduler_kwargs.min_lr", "lr_scheduler_kwargs.min_lr_rate"}, "set only one of them");
    if ((c.lr_scheduler_min_lr || c.lr_scheduler_min_lr_rate) && c.lr_scheduler_type != "cosine_with_min_lr")
      out.conflict({"lr_scheduler_type", c.lr_scheduler_min_lr ? "lr_scheduler_kwargs.min_lr" : "lr_scheduler_kwargs.min_lr_rate"},
                   "a minimum learning rate only applies to lr_scheduler_type: cosine_with_min_lr");
    if (c.eval_strategy != "no" && !c.dataset_name)
      out.invalid("eval_strategy", "evaluation needs a dataset (dataset_name with a test split)");
    if (!c.use_peft && (c.lora_target_modules || c.lora_modules_to_save))
      out.warn("lora_* settings are ignored because use_peft is false");
  });
}

}  // namespace trlx::config
