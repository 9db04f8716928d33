#pragma once
// Fields every trainer shares: where the model and data are, the optimizer and
// schedule, precision, logging, checkpoints, memory savers, distribution.
// Names and defaults are those TRL users know (TrainingArguments, ModelConfig,
// ScriptArguments); tests compare the defaults with TRL's own.
#include <cmath>
#include <optional>
#include <string>
#include <vector>

#include <fmt/format.h>

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
  std::optional<std::string> attn_implementation;
  bool trust_remote_code = false;
  // model_init_kwargs: TRL's keyword arguments of from_pretrained. dtype,
  // attn_implementation, revision and trust_remote_code are other names of
  // the fields above (FieldSpec::same_as); the rest are checked here.
  std::optional<std::string> init_dtype, init_attn_implementation, init_revision, init_device_map;
  std::optional<bool> init_trust_remote_code, init_use_cache, init_low_cpu_mem_usage;
  bool use_peft = false;
  int64_t lora_r = 0;
  int64_t lora_alpha = 0;
  double lora_dropout = 0;
  std::optional<std::vector<std::string>> lora_target_modules;
  std::optional<std::vector<std::string>> lora_modules_to_save;
  bool use_rslora = false;
  bool use_dora = false;
  bool load_in_8bit = false, load_in_4bit = false, use_bnb_nested_quant = false;
  std::string bnb_4bit_quant_type;
  std::optional<std::string> bnb_4bit_quant_storage;
  std::string lora_task_type;
  bool remove_unused_columns = true;
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
  int64_t dataloader_num_workers = 0;
  bool dataloader_pin_memory = true;
  std::optional<bool> tf32;
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
  std::optional<int64_t> torch_empty_cache_steps;
  // not built (refused unless at TRL's default)
  bool torch_compile = false;
  std::optional<std::string> torch_compile_backend, torch_compile_mode;
  std::optional<std::string> deepspeed, fsdp, fsdp_config;
  std::optional<double> neftune_noise_alpha;
  // logging, evaluation, checkpoints
  std::optional<std::string> output_dir;
  std::optional<bool> disable_tqdm;
  std::optional<std::string> run_name;
  std::string include_num_input_tokens_seen;
  bool push_to_hub = false;
  std::optional<std::string> hub_model_id, hub_token, hub_revision;
  std::string hub_strategy;
  std::optional<bool> hub_private_repo;
  bool hub_always_push = false;
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
  std::optional<std::string> metric_for_best_model;
  std::optional<bool> greater_is_better;
  bool load_best_model_at_end = false;
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
  bool remove_unused_columns = true;  // TRL's online trainers: false
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
  b.field(&T::attn_implementation, "attn_implementation", std::nullopt,
          "Attention kernel asked of transformers: sdpa, flash_attention_2, flash_attention_3 or a "
          "kernels-community/... hub kernel are all served by trlx's fused attention (the startup table says which "
          "kernel runs); eager and flex_attention are refused, as their numbers differ.");
  b.field(&T::trust_remote_code, "trust_remote_code", false,
          "Run a model repository's own Python code.")
      .not_built("trlx runs no Python: a model that needs its repository's code is an architecture trlx does not "
                 "know (`trlx env` lists the ones it does)");

  b.group("model_init_kwargs");
  b.field(&T::init_dtype, "model_init_kwargs.dtype", std::nullopt, "Another name of dtype (TRL's model_init_kwargs).")
      .one_of({"auto", "float32", "bfloat16", "float16"})
      .same_as("dtype")
      .bound_to("init_dtype");
  b.alias("model_init_kwargs.torch_dtype", "model_init_kwargs.dtype");
  b.field(&T::init_attn_implementation, "model_init_kwargs.attn_implementation", std::nullopt,
          "Another name of attn_implementation.")
      .same_as("attn_implementation")
      .bound_to("init_attn_implementation");
  b.field(&T::init_revision, "model_init_kwargs.revision", std::nullopt, "Another name of model_revision.")
      .same_as("model_revision")
      .bound_to("init_revision");
  b.field(&T::init_trust_remote_code, "model_init_kwargs.trust_remote_code", std::nullopt,
          "Another name of trust_remote_code.")
      .same_as("trust_remote_code")
      .bound_to("init_trust_remote_code");
  b.field(&T::init_use_cache, "model_init_kwargs.use_cache", std::nullopt,
          "The model's KV cache: as in TRL, training forwards never use one and generation always does, whatever "
          "this says (the numbers are the same either way).")
      .bound_to("init_use_cache")
      .only_describes();
  b.field(&T::init_low_cpu_mem_usage, "model_init_kwargs.low_cpu_mem_usage", std::nullopt,
          "trlx always loads tensor by tensor from the safetensors files, never holding a second copy; false "
          "(a full copy first) is refused.")
      .bound_to("init_low_cpu_mem_usage")
      .only_describes();
  b.field(&T::init_device_map, "model_init_kwargs.device_map", std::nullopt,
          "auto or null: the whole model on each process's device, as TRL loads it for DDP, DeepSpeed and FSDP "
          "and as auto does on one GPU; spreading layers over devices (balanced, sequential, a mapping) is not "
          "built.")
      .bound_to("init_device_map")
      .only_describes();

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
  b.field(&T::lora_task_type, "lora_task_type", "CAUSAL_LM",
          "PEFT task type written to adapter_config.json: CAUSAL_LM (SEQ_CLS for reward and value models is "
          "chosen by the trainer).")
      .not_built("trlx writes the task type its trainer trains (CAUSAL_LM, or SEQ_CLS for a score head); leave "
                 "it unset");
  b.field(&T::use_dora, "use_dora", false, "Weight-decomposed LoRA (DoRA).")
      .not_built("DoRA is not built in trlx yet; train plain LoRA (use_peft) or rsLoRA (use_rslora)");
  b.field(&T::load_in_4bit, "load_in_4bit", false, "QLoRA: the frozen base in 4 bits (bitsandbytes).")
      .not_built("4-bit bases (QLoRA) are not built in trlx yet; train LoRA on a bf16 base (use_peft, dtype: "
                 "bfloat16)");
  b.field(&T::load_in_8bit, "load_in_8bit", false, "The frozen base in 8 bits (bitsandbytes).")
      .not_built("8-bit bases are not built in trlx; train LoRA on a bf16 base (use_peft, dtype: bfloat16)");
  b.field(&T::bnb_4bit_quant_type, "bnb_4bit_quant_type", "nf4", "4-bit code: nf4 or fp4.")
      .not_built("4-bit bases (QLoRA) are not built in trlx yet");
  b.field(&T::use_bnb_nested_quant, "use_bnb_nested_quant", false, "Double-quantise the 4-bit block scales.")
      .not_built("4-bit bases (QLoRA) are not built in trlx yet");
  b.field(&T::bnb_4bit_quant_storage, "bnb_4bit_quant_storage", std::nullopt, "Storage dtype of 4-bit weights.")
      .not_built("4-bit bases (QLoRA) are not built in trlx yet");

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
  b.field(&T::remove_unused_columns, "remove_unused_columns", d.remove_unused_columns,
          "Accepted for TRL configs: each trainer reads the columns it trains on, and the online trainers hand "
          "every other column of a row to the reward functions, whichever value this has.")
      .only_describes();
  b.field(&T::dataloader_num_workers, "dataloader_num_workers", 0,
          "Accepted for TRL configs: trlx tokenizes the dataset before training (on dataset_num_proc threads) and "
          "collates each batch from memory, so there is no loading to spread over worker processes.")
      .min(0);
  b.field(&T::dataloader_pin_memory, "dataloader_pin_memory", true,
          "On a GPU, copy each batch from page-locked host memory, without blocking the host.");
  b.field(&T::tf32, "tf32", std::nullopt,
          "On Ampere and newer GPUs, float32 matrix products and convolutions in TF32 (null: PyTorch's default).");
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

  b.field(&T::torch_empty_cache_steps, "torch_empty_cache_steps", std::nullopt,
          "Every N steps, return the GPU memory PyTorch's caching allocator holds unused (slower, fewer "
          "out-of-memory failures from fragmentation); nothing to return on CPU.")
      .min(1);

  b.group("not built");
  b.field(&T::torch_compile, "torch_compile", false, "Compile the model with torch.compile.")
      .not_built("trlx is compiled C++ with fused kernels; there is no torch.compile");
  b.field(&T::torch_compile_backend, "torch_compile_backend", std::nullopt, "torch.compile backend.")
      .not_built("there is no torch.compile in trlx");
  b.field(&T::torch_compile_mode, "torch_compile_mode", std::nullopt, "torch.compile mode.")
      .not_built("there is no torch.compile in trlx");
  b.field(&T::deepspeed, "deepspeed", std::nullopt, "A DeepSpeed config file.")
      .not_built("give the ZeRO stage through accelerate_config (zero1, zero2, zero3 or an accelerate file with "
                 "deepspeed_config)");
  b.field(&T::fsdp, "fsdp", std::nullopt, "FSDP options of transformers' Trainer.")
      .not_built("give FSDP through accelerate_config (fsdp, or an accelerate file with fsdp_config)");
  b.field(&T::fsdp_config, "fsdp_config", std::nullopt, "FSDP config of transformers' Trainer.")
      .not_built("give FSDP through accelerate_config (fsdp, or an accelerate file with fsdp_config)");
  b.field(&T::neftune_noise_alpha, "neftune_noise_alpha", std::nullopt, "NEFTune noise on the input embeddings.")
      .not_built("NEFTune is not built in trlx yet");
  b.field(&T::push_to_hub, "push_to_hub", false, "Upload the model to the Hugging Face Hub at each save.")
      .not_built("trlx writes Hugging Face model directories; upload one with `huggingface-cli upload <repo> "
                 "<output_dir>`");
  b.field(&T::hub_model_id, "hub_model_id", std::nullopt, "Hub repository of push_to_hub.")
      .not_built("push_to_hub is not built; upload with `huggingface-cli upload <repo> <output_dir>`");
  b.field(&T::hub_strategy, "hub_strategy", "every_save", "When push_to_hub uploads.")
      .not_built("push_to_hub is not built; upload with `huggingface-cli upload <repo> <output_dir>`");
  b.field(&T::hub_token, "hub_token", std::nullopt, "Token of push_to_hub.")
      .not_built("push_to_hub is not built; downloads read HF_TOKEN");
  b.field(&T::hub_private_repo, "hub_private_repo", std::nullopt, "Create the push_to_hub repository private.")
      .not_built("push_to_hub is not built; upload with `huggingface-cli upload <repo> <output_dir>`");
  b.field(&T::hub_always_push, "hub_always_push", false, "push_to_hub without waiting for the previous upload.")
      .not_built("push_to_hub is not built; upload with `huggingface-cli upload <repo> <output_dir>`");
  b.field(&T::hub_revision, "hub_revision", std::nullopt, "Branch push_to_hub uploads to.")
      .not_built("push_to_hub is not built; upload with `huggingface-cli upload <repo> <output_dir> --revision "
                 "<branch>`");

  b.group("logging and checkpoints");
  b.field(&T::output_dir, "output_dir", std::nullopt, "Where checkpoints, metrics and the final model go (default trainer_output).");
  b.field(&T::logging_steps, "logging_steps", d.logging_steps, "Log every N steps (a fraction of all steps when below 1).").min(0, true);
  b.field(&T::logging_first_step, "logging_first_step", false, "Also log after the first step.");
  b.field(&T::logging_strategy, "logging_strategy", "steps", "When to log.").one_of({"no", "steps", "epoch"});
  b.field(&T::run_name, "run_name", std::nullopt,
          "A name for the run, shown in the startup table and written to trainer_state.json of each checkpoint.");
  b.field(&T::disable_tqdm, "disable_tqdm", std::nullopt,
          "No progress bar between logged steps on a terminal (null: shown unless log_level is warning or above).");
  b.field(&T::include_num_input_tokens_seen, "include_num_input_tokens_seen", "no",
          "Also log num_input_tokens_seen: the input tokens trained on so far over all processes, padding "
          "included (all, or true) or not (non_padding).")
      .one_of({"no", "all", "non_padding", "true", "false"});
  b.field(&T::log_level, "log_level", "passive", "Log level of rank 0 (passive = info).")
      .one_of({"passive", "debug", "info", "warning", "error", "critical"});
  b.field(&T::report_to, "report_to", std::vector<std::string>{"none"},
          "Extra metric sinks besides stdout and metrics.jsonl: tensorboard (all), and logger programs "
          "({command: \"python3 examples/loggers/wandb_logger.py\"}, docs/loggers.md) that receive the run as JSON "
          "lines, which is how wandb and trackio are reached.")
      .one_of({"none", "tensorboard", "all", "wandb", "trackio"})
      .items_may_be_mappings();
  b.field(&T::eval_strategy, "eval_strategy", "no", "When to evaluate.").one_of({"no", "steps", "epoch"});
  b.field(&T::eval_steps, "eval_steps", std::nullopt, "Evaluate every N steps (defaults to logging_steps).").min(0, true);
  b.field(&T::save_strategy, "save_strategy", "steps",
          "When to save checkpoints: every save_steps, every epoch, or each time an evaluation sets a new best "
          "metric_for_best_model (best).")
      .one_of({"no", "steps", "epoch", "best"});
  b.field(&T::save_steps, "save_steps", 500.0, "Save every N steps (a fraction of all steps when below 1).").min(0, true);
  b.field(&T::save_total_limit, "save_total_limit", std::nullopt, "Keep at most this many checkpoints.").min(1);
  b.field(&T::metric_for_best_model, "metric_for_best_model", std::nullopt,
          "The evaluation metric that ranks checkpoints (save_strategy best, load_best_model_at_end): a logged "
          "name with or without eval_ (null: loss).");
  b.field(&T::greater_is_better, "greater_is_better", std::nullopt,
          "Whether a larger metric_for_best_model is better (null: false for names ending in loss, else true).");
  b.field(&T::load_best_model_at_end, "load_best_model_at_end", false,
          "The final model is the best checkpoint's (by metric_for_best_model), which save_total_limit never "
          "deletes.");
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
    // As transformers' TrainingArguments checks them.
    if ((c.save_strategy == "best" || c.load_best_model_at_end) && c.eval_strategy == "no")
      out.invalid(c.save_strategy == "best" ? "save_strategy" : "load_best_model_at_end",
                  "the best checkpoint is found by evaluating: set eval_strategy (steps or epoch) and a test split");
    if (c.load_best_model_at_end && c.save_strategy != "best" && c.eval_strategy != "no") {
      if (c.save_strategy != c.eval_strategy)
        out.conflict({"save_strategy", "eval_strategy"},
                     "load_best_model_at_end needs a checkpoint at each evaluation: the same strategy for both (or "
                     "save_strategy: best)");
      else if (c.save_strategy == "steps" && c.eval_steps && *c.eval_steps >= 1 && c.save_steps >= 1 &&
               std::fmod(c.save_steps, *c.eval_steps) != 0)
        out.conflict({"save_steps", "eval_steps"},
                     "load_best_model_at_end needs save_steps to be a multiple of eval_steps");
    }
    if (c.eval_strategy != "no" && !c.dataset_name)
      out.invalid("eval_strategy", "evaluation needs a dataset (dataset_name with a test split)");
    for (const auto& r : c.report_to)
      if (r == "wandb" || r == "trackio")
        out.invalid("report_to",
                    fmt::format("{0} is reached through a logger program: report_to: [{{command: \"python3 "
                                "examples/loggers/{0}_logger.py\"}}] (it needs `pip install {0}`{1}; "
                                "docs/loggers.md)",
                                r, r == "wandb" ? ", and WANDB_MODE=offline works without a network" : ""));
    if (c.attn_implementation) {
      const std::string& a = *c.attn_implementation;
      if (a == "eager")
        out.invalid("attn_implementation",
                    "eager attention rounds the attention scores and probabilities to the weights' dtype between "
                    "its steps, so its numbers differ from fused attention's, and trlx has fused attention only: "
                    "use sdpa (the numbers transformers gives with it)");
      else if (a == "flex_attention" || a.rfind("paged", 0) == 0 || a.find("paged|") != std::string::npos)
        out.invalid("attn_implementation", a + " is not built in trlx; use sdpa, flash_attention_2 or "
                                                 "flash_attention_3 (all served by its fused attention)");
      else if (a != "sdpa" && a != "flash_attention_2" && a != "flash_attention_3" &&
               a.rfind("kernels-community/", 0) != 0)
        out.invalid("attn_implementation",
                    "expected sdpa, flash_attention_2, flash_attention_3 or a kernels-community/... hub kernel");
    }
    if (c.init_low_cpu_mem_usage == false)
      out.invalid("model_init_kwargs.low_cpu_mem_usage",
                  "trlx always loads tensor by tensor; remove it or set it to true");
    if (c.init_device_map && *c.init_device_map != "auto")
      out.invalid("model_init_kwargs.device_map",
                  "trlx places the whole model on each process's device (device_map auto on one GPU, null under "
                  "distributed runs, as TRL does); spreading layers over devices is not built");
    if (!c.use_peft && (c.lora_target_modules || c.lora_modules_to_save))
      out.warn("lora_* settings are ignored because use_peft is false");
  });
}

}  // namespace trlx::config
