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
  // transformers 5's names of the two above (FieldSpec::same_as), and the
  // kwargs of its activation_checkpointing_enable that are not built.
  std::optional<bool> ac_enabled, ac_use_reentrant, ac_offload;
  std::optional<int64_t> ac_every_n_layers;
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
  // trackio: the project its run is logged under (report_to: trackio).
  std::string project;
  std::optional<std::string> trackio_space_id, trackio_bucket_id, trackio_static_space_id;
  // transformers' Trainer fields that change nothing in trlx (accepted with
  // what trlx does instead) or are refused unless at their default.
  bool do_train = false, do_eval = false, do_predict = false, tr_use_cache = false;
  bool dataloader_persistent_workers = false;
  std::optional<int64_t> dataloader_prefetch_factor;
  bool save_on_each_node = false, save_only_model = false, use_cpu = false, full_determinism = false;
  bool ignore_data_skip = false, bf16_full_eval = false, fp16_full_eval = false, batch_eval_metrics = false;
  bool eval_do_concat_batches = true, eval_use_gather_object = false, restore_callback_states_from_checkpoint = false;
  bool auto_find_batch_size = false, skip_memory_metrics = true, enable_jit_checkpoint = false;
  double label_smoothing_factor = 0, eval_delay = 0;
  std::optional<int64_t> eval_accumulation_steps;
  std::optional<std::vector<std::string>> label_names;
  std::vector<std::string> include_for_metrics;
  std::optional<std::string> optim_args, ddp_backend, accelerator_config, dataset_config;
  bool dataset_streaming = false;
  std::optional<std::vector<std::string>> lora_target_parameters;
  bool ignore_bias_buffers = false;
  // TRL fields of some trainers, refused unless at TRL's default (the
  // add_*_field functions below).
  bool activation_offloading = false;
  std::optional<std::string> pad_to_multiple_of;
  std::optional<double> router_aux_loss_coef;
  bool generate_during_eval = false;
  std::optional<bool> is_encoder_decoder;
  std::optional<int64_t> pair_max_completion_length;
  std::optional<std::vector<std::string>> optim_target_modules;
  std::string length_column_name, debug;
  std::optional<bool> ddp_broadcast_buffers, ddp_static_graph;
  int64_t local_rank = 0;
  bool prediction_loss_only = false;

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
  // The PEFT task type the trainer's adapters are: SEQ_CLS for a score head.
  std::string lora_task_type = "CAUSAL_LM";
};

// transformers' Trainer fields with nothing to do in trlx: accepted where
// every value means what trlx does anyway, otherwise refused unless at
// transformers' default, each with what to do instead.
template <class C>
void add_trainer_only_fields(SchemaBuilder<C>& b) {
  using T = TrainingConfig;
  b.field(&T::do_train, "do_train", false,
          "Read by transformers' example scripts, not by its Trainer; trlx trains on every run, whatever this says.")
      .only_describes();
  b.field(&T::do_eval, "do_eval", false,
          "Read by transformers' example scripts, not by its Trainer; trlx evaluates as eval_strategy says.")
      .only_describes();
  b.field(&T::do_predict, "do_predict", false,
          "Read by transformers' example scripts, not by its Trainer; trlx has no predict step.")
      .only_describes();
  b.field(&T::tr_use_cache, "use_cache", false,
          "The model's KV cache in training: as in TRL, training forwards never use one and generation always does, "
          "whatever this says (the numbers are the same either way).")
      .bound_to("tr_use_cache")
      .only_describes();
  b.field(&T::dataloader_persistent_workers, "dataloader_persistent_workers", false,
          "Accepted for TRL configs: trlx collates batches from memory, with no loader workers to keep.")
      .only_describes();
  b.field(&T::dataloader_prefetch_factor, "dataloader_prefetch_factor", std::nullopt,
          "Accepted for TRL configs: trlx collates batches from memory, with no loader workers to prefetch.")
      .min(1)
      .only_describes();
  const std::string no_metrics =
      "trlx has no compute_metrics: evaluation logs the trainer's own losses and metrics (eval_*)";
  b.field(&T::prediction_loss_only, "prediction_loss_only", false, "Evaluate the loss only.")
      .not_built(no_metrics);
  b.field(&T::label_names, "label_names", std::nullopt, "Input keys that hold labels.")
      .not_built("each trainer knows its label columns");
  b.field(&T::include_for_metrics, "include_for_metrics", std::vector<std::string>{},
          "Extra inputs handed to compute_metrics.")
      .not_built(no_metrics);
  b.field(&T::batch_eval_metrics, "batch_eval_metrics", false, "compute_metrics per batch.").not_built(no_metrics);
  b.field(&T::eval_do_concat_batches, "eval_do_concat_batches", true, "Concatenate predictions for compute_metrics.")
      .not_built(no_metrics);
  b.field(&T::eval_use_gather_object, "eval_use_gather_object", false, "Gather compute_metrics objects.")
      .not_built(no_metrics);
  b.field(&T::eval_accumulation_steps, "eval_accumulation_steps", std::nullopt,
          "Move predictions to the CPU every N evaluation steps.")
      .not_built("trlx keeps no predictions in evaluation, only running sums");
  b.field(&T::eval_delay, "eval_delay", 0.0, "Epochs or steps before the first evaluation.")
      .not_built("evaluation runs every eval_steps from the start");
  b.field(&T::bf16_full_eval, "bf16_full_eval", false, "Evaluate with bf16 weights.")
      .not_built("evaluation runs in training's precision");
  b.field(&T::fp16_full_eval, "fp16_full_eval", false, "Evaluate with fp16 weights.")
      .not_built("evaluation runs in training's precision");
  b.field(&T::label_smoothing_factor, "label_smoothing_factor", 0.0, "Label smoothing of the cross-entropy.")
      .not_built("label smoothing is not built in trlx");
  b.field(&T::save_on_each_node, "save_on_each_node", false, "Every node writes its own checkpoints.")
      .not_built("checkpoints are written once to output_dir, which every node must see (a shared file system)");
  b.field(&T::save_only_model, "save_only_model", false, "Checkpoints without optimizer, scheduler and RNG state.")
      .not_built("checkpoints keep the optimizer and scheduler state so that resume is exact; the final model "
                 "directory holds the model alone");
  b.field(&T::restore_callback_states_from_checkpoint, "restore_callback_states_from_checkpoint", false,
          "Restore callbacks' state on resume.")
      .not_built("trlx has no callbacks");
  b.field(&T::ignore_data_skip, "ignore_data_skip", false, "On resume, start the data from the beginning.")
      .not_built("resume always restores the data position");
  b.field(&T::use_cpu, "use_cpu", false, "Train on the CPU although a GPU is present.")
      .not_built("hide the GPUs to train on the CPU: CUDA_VISIBLE_DEVICES= trlx ...");
  b.field(&T::full_determinism, "full_determinism", false, "Deterministic kernels everywhere.")
      .not_built("trlx's CPU runs are deterministic; deterministic GPU kernels are not forced");
  b.field(&T::auto_find_batch_size, "auto_find_batch_size", false, "Halve the batch after out-of-memory errors.")
      .not_built("the startup table estimates a config's memory; set per_device_train_batch_size from it");
  b.field(&T::skip_memory_metrics, "skip_memory_metrics", true, "Leave memory metrics out of the logs.")
      .not_built("trlx logs the run's peak GPU memory at the end (peak_gpu_memory_mb), and the startup table "
                 "estimates it");
  b.field(&T::enable_jit_checkpoint, "enable_jit_checkpoint", false, "Checkpoint when the job is told to stop.")
      .not_built("trlx always saves the last finished step on SIGTERM or SIGINT (stop_grace_seconds)");
  b.field(&T::optim_args, "optim_args", std::nullopt, "Extra optimizer arguments.")
      .not_built("AdamW's settings are adam_beta1, adam_beta2, adam_epsilon and weight_decay");
  b.field(&T::optim_target_modules, "optim_target_modules", std::nullopt, "Modules of GaLore-like optimizers.")
      .not_built("trlx implements AdamW only");
  b.field(&T::length_column_name, "length_column_name", "length", "Column of precomputed lengths (group_by_length).")
      .not_built("group_by_length is not built in trlx");
  b.field(&T::debug, "debug", "", "transformers' debug options.").not_built("transformers' debug options do not apply");
  b.field(&T::local_rank, "local_rank", -1, "Local rank given by an old launcher on the command line.")
      .not_built("trlx reads LOCAL_RANK from the launcher's environment (torchrun, mpirun, srun)");
  const std::string launcher = "trlx picks NCCL on GPUs and its own CPU communicator otherwise; set distribution "
                               "through accelerate_config";
  b.field(&T::ddp_backend, "ddp_backend", std::nullopt, "torch.distributed backend.").not_built(launcher);
  b.field(&T::ddp_broadcast_buffers, "ddp_broadcast_buffers", std::nullopt, "DDP's broadcast_buffers.")
      .not_built("trlx's models have no buffers to broadcast");
  b.field(&T::ddp_static_graph, "ddp_static_graph", std::nullopt, "DDP's static_graph.")
      .not_built("trlx's gradient reduction needs no graph hint");
  b.field(&T::accelerator_config, "accelerator_config", std::nullopt, "accelerate's Accelerator settings.")
      .not_built("set distribution through accelerate_config");
  b.field(&T::ignore_bias_buffers, "ignore_bias_buffers", false,
          "TRL's fix for DDP broadcasting a model's bias and mask buffers: trlx's models have no such buffers and "
          "its DDP broadcasts none, so both values train the same.")
      .only_describes();
  b.field(&T::dataset_config, "dataset_config", std::nullopt, "A hub dataset's configuration (subset) name.")
      .not_built("dataset configurations are not built: give that configuration's files (a file or a directory) "
                 "in dataset_name");
  b.field(&T::dataset_streaming, "dataset_streaming", false, "Stream the dataset instead of loading it.")
      .not_built("trlx tokenizes the whole dataset before training; streaming is not built");
  b.field(&T::lora_target_parameters, "lora_target_parameters", std::nullopt,
          "Parameters (not modules) that get LoRA adapters: the stacked expert weights of a mixture of experts "
          "(e.g. mlp.experts.gate_up_proj, mlp.experts.down_proj), one adapter per expert as PEFT's "
          "target_parameters. Needs lora_dropout 0.");
}

// TRL's fields of some trainers only, not built in trlx.
template <class C>
void add_activation_offloading_field(SchemaBuilder<C>& b) {
  b.field(&TrainingConfig::activation_offloading, "activation_offloading", false,
          "Offload the activations kept for backward to host memory.")
      .not_built("activation offloading is not built in trlx; gradient_checkpointing keeps one layer's input each");
}
template <class C>
void add_pad_to_multiple_of_field(SchemaBuilder<C>& b) {
  b.field(&TrainingConfig::pad_to_multiple_of, "pad_to_multiple_of", "auto",
          "Pad batches to a multiple of this length (auto: 128 on AWS Neuron, else none).")
      .not_built("trlx pads each batch to its longest row (auto's meaning off Neuron); other multiples are not built");
}
template <class C>
void add_router_aux_loss_coef_field(SchemaBuilder<C>& b) {
  b.field(&TrainingConfig::router_aux_loss_coef, "router_aux_loss_coef", std::nullopt,
          "Weight of a mixture-of-experts model's load-balancing loss in the training loss (null: the model "
          "config's; 0: off). Refused for a model without experts.");
}

// CPO's and ORPO's fields for encoder-decoder models and W&B tables.
template <class C>
void add_pair_extra_fields(SchemaBuilder<C>& b) {
  using T = TrainingConfig;
  b.field(&T::generate_during_eval, "generate_during_eval", false, "Log generated completions to W&B in evaluation.")
      .not_built("completions in evaluation are not built for this trainer");
  b.field(&T::is_encoder_decoder, "is_encoder_decoder", std::nullopt, "Whether the model is an encoder-decoder.")
      .not_built("trlx trains decoder-only models; it reads this from the model");
  b.field(&T::pair_max_completion_length, "max_completion_length", std::nullopt,
          "Longest completion (encoder-decoder models).")
      .bound_to("pair_max_completion_length")
      .not_built("max_length limits prompt and completion together, as for decoder-only models in TRL");
}

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
          "PEFT task type of the adapters: the trainer's (SEQ_CLS for reward models, whose score head trains and "
          "is saved with them; CAUSAL_LM for the rest). The default, CAUSAL_LM, is taken as the trainer's.")
      .one_of({"CAUSAL_LM", "SEQ_CLS"})
      .only_describes();
  b.rule([task = d.lora_task_type](const C& c, Conflicts& out) {
    if (c.lora_task_type != "CAUSAL_LM" && c.lora_task_type != task)
      out.invalid("lora_task_type", fmt::format("this trainer's adapters are {}; leave lora_task_type unset", task));
  });
  b.field(&T::use_dora, "use_dora", false,
          "Weight-decomposed LoRA (DoRA, with use_peft): each adapted layer also trains a magnitude per output row, "
          "saved in PEFT's format (lora_magnitude_vector); merge-lora folds it in.");
  b.field(&T::load_in_4bit, "load_in_4bit", false,
          "QLoRA (with use_peft): the frozen base's linear layers (all but the head) kept in 4 bits as bitsandbytes "
          "stores them, dequantized layer by layer in the model's dtype; adapters train on top.");
  b.field(&T::load_in_8bit, "load_in_8bit", false, "The frozen base in 8 bits (bitsandbytes).")
      .not_built("8-bit bases are not built in trlx; use load_in_4bit (QLoRA) or a bf16 base (dtype: bfloat16)");
  b.field(&T::bnb_4bit_quant_type, "bnb_4bit_quant_type", "nf4", "4-bit code of load_in_4bit: nf4 or fp4.")
      .one_of({"nf4", "fp4"});
  b.field(&T::use_bnb_nested_quant, "use_bnb_nested_quant", false,
          "load_in_4bit: keep the block scales in 8 bits too (double quantization, about 0.4 bits per weight less).");
  b.field(&T::bnb_4bit_quant_storage, "bnb_4bit_quant_storage", std::nullopt,
          "Storage dtype of the 4-bit codes; trlx stores them as uint8 (null or uint8).")
      .one_of({"uint8"})
      .only_describes();
  b.rule([](const C& c, Conflicts& out) {
    if (c.load_in_4bit && !c.use_peft)
      out.conflict({"load_in_4bit", "use_peft"}, "a 4-bit base is frozen: train adapters on it (use_peft: true)");
    if (!c.load_in_4bit && (c.bnb_4bit_quant_type != "nf4" || c.use_bnb_nested_quant || c.bnb_4bit_quant_storage))
      out.conflict({"bnb_4bit_quant_type", "load_in_4bit"}, "the bnb_4bit settings apply with load_in_4bit: true");
  });

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
  b.field(&T::optim, "optim", "adamw_torch_fused",
          "Optimizer: AdamW (adamw_torch and adamw_torch_fused are the same update), or AdamW with both moments in "
          "8 bits as bitsandbytes' AdamW8bit (adamw_8bit, adamw_bnb_8bit; paged_adamw_8bit is the same here: "
          "trlx does not page optimizer state).")
      .one_of({"adamw_torch", "adamw_torch_fused", "adamw_8bit", "adamw_bnb_8bit", "paged_adamw_8bit"});
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
  b.field(&T::ac_enabled, "activation_checkpointing", std::nullopt,
          "transformers 5's name of gradient_checkpointing.")
      .same_as("gradient_checkpointing")
      .bound_to("ac_enabled");
  b.field(&T::ac_use_reentrant, "activation_checkpointing_kwargs.use_reentrant", std::nullopt,
          "transformers 5's name of gradient_checkpointing_kwargs.use_reentrant.")
      .same_as("gradient_checkpointing_kwargs.use_reentrant")
      .bound_to("ac_use_reentrant");
  b.field(&T::ac_every_n_layers, "activation_checkpointing_kwargs.every_n_layers", std::nullopt,
          "Checkpoint only every n-th decoder layer.")
      .bound_to("ac_every_n_layers")
      .not_built("trlx checkpoints every decoder layer; the startup table's memory estimate says what that saves");
  b.field(&T::ac_offload, "activation_checkpointing_kwargs.offload", std::nullopt,
          "Keep the saved activations in host memory.")
      .bound_to("ac_offload")
      .not_built("activation offloading is not built in trlx");
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
  const std::string upload = "trlx writes Hugging Face model directories; upload one with `huggingface-cli upload <repo> "
                             "<output_dir>`";
  const std::string no_push = "push_to_hub is not built; upload with `huggingface-cli upload <repo> <output_dir>`";
  b.field(&T::push_to_hub, "push_to_hub", false, "Upload the model to the Hugging Face Hub at each save.")
      .not_built(upload);
  b.field(&T::hub_model_id, "hub_model_id", std::nullopt, "Hub repository of push_to_hub.").not_built(no_push);
  b.field(&T::hub_strategy, "hub_strategy", "every_save", "When push_to_hub uploads.").not_built(no_push);
  b.field(&T::hub_token, "hub_token", std::nullopt, "Token of push_to_hub.")
      .not_built("push_to_hub is not built; downloads read HF_TOKEN");
  b.field(&T::hub_private_repo, "hub_private_repo", std::nullopt, "Create the push_to_hub repository private.")
      .not_built(no_push);
  b.field(&T::hub_always_push, "hub_always_push", false, "push_to_hub without waiting for the previous upload.")
      .not_built(no_push);
  b.field(&T::hub_revision, "hub_revision", std::nullopt, "Branch push_to_hub uploads to.")
      .not_built(no_push + " --revision <branch>");
  add_trainer_only_fields(b);

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
          "Extra metric sinks besides stdout and metrics.jsonl: tensorboard (all), trackio (its local database, "
          "which `trackio show` opens), and logger programs ({command: \"python3 examples/loggers/wandb_logger.py\"}, "
          "docs/loggers.md) that receive the run as JSON lines, which is how wandb is reached.")
      .one_of({"none", "tensorboard", "all", "wandb", "trackio"})
      .items_may_be_mappings();
  b.field(&T::project, "project", "huggingface",
          "report_to trackio: the project the run is logged under (run_name names the run).");
  const std::string local_trackio =
      "trlx writes trackio's local database (TRACKIO_DIR, else HF_HOME/trackio); sync or deploy it with trackio "
      "itself";
  b.field(&T::trackio_space_id, "trackio_space_id", std::nullopt, "trackio: a Hugging Face Space to log to.")
      .not_built(local_trackio);
  b.field(&T::trackio_bucket_id, "trackio_bucket_id", std::nullopt, "trackio: a storage bucket to log to.")
      .not_built(local_trackio);
  b.field(&T::trackio_static_space_id, "trackio_static_space_id", std::nullopt, "trackio: a static Space.")
      .not_built(local_trackio);
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
          "Distributed preset (single_gpu, multi_gpu, fsdp, fsdp_hybrid, zero1, zero2, zero3) or an accelerate config file.");
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
      if (r == "wandb")
        out.invalid("report_to", "wandb is reached through a logger program: report_to: [{command: \"python3 "
                                 "examples/loggers/wandb_logger.py\"}] (it needs `pip install wandb`, and "
                                 "WANDB_MODE=offline works without a network; docs/loggers.md)");
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
