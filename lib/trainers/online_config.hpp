#pragma once
// The fields every online trainer (grpo, rloo, online-dpo, ppo) shares: how
// completions are generated and scored, how often, and the trust region
// around the policy that generated them. One table, so that the trainers cannot drift apart.
#include <fmt/format.h>
#include <nlohmann/json.hpp>

#include "config/loader.hpp"
#include "config/training.hpp"

namespace trlx::trainers {

struct OnlineConfig : config::TrainingConfig {
  // Scoring: built-in names, reward model directories, or programs
  // ({command: ...}; JSON text, see ProgramOptions in rewards/program.hpp).
  std::vector<std::string> reward_funcs;
  // A reward model directory scored before reward_funcs (online-dpo's
  // field; the group trainers name theirs in reward_funcs).
  std::optional<std::string> reward_model_path;
  // A judge program ranking pairs instead of scores (online-dpo's field;
  // empty or one program entry, JSON text).
  std::vector<std::string> judge;
  std::optional<std::vector<double>> reward_weights;
  // Generation.
  int64_t num_generations = 0;
  // Completions per prompt when evaluating (the group trainers); null:
  // num_generations.
  std::optional<int64_t> num_generations_eval;
  std::optional<int64_t> generation_batch_size;
  std::optional<int64_t> steps_per_generation;
  int64_t max_completion_length = 0;
  std::optional<int64_t> max_prompt_length;
  double temperature = 0, top_p = 0;
  int64_t top_k = 0;
  std::optional<double> min_p;
  double repetition_penalty = 0;
  bool shuffle_dataset = true;
  bool use_vllm = false;
  // TRL's generation_kwargs (JSON object text): sampler settings that
  // override the fields above for sampling only (parse_generation_kwargs).
  std::optional<std::string> generation_kwargs;
  // vLLM's settings, refused with use_vllm (add_vllm_fields).
  std::string vllm_mode, vllm_model_impl, vllm_server_host, vllm_importance_sampling_mode;
  std::optional<std::string> vllm_server_base_url, vllm_structured_outputs_regex;
  int64_t vllm_server_port = 0, vllm_group_port = 0, vllm_tensor_parallel_size = 0;
  double vllm_server_timeout = 0, vllm_gpu_memory_utilization = 0, vllm_importance_sampling_clip_max = 0;
  bool vllm_enable_sleep_mode = false, vllm_importance_sampling_correction = false;
  std::optional<int64_t> vllm_max_model_length;
  std::optional<double> vllm_importance_sampling_cap, vllm_importance_sampling_clip_min;
  bool ds3_gather_for_generation = true;
  double ds3_gather_for_generation_budget_mb = 0;
  // transformers' generation engines, not built (trlx has its own).
  std::optional<std::string> cache_implementation, transformers_continuous_batching_config;
  bool use_transformers_continuous_batching = false, use_transformers_paged = false;
  bool log_multimodal = true, cast_lm_head_to_fp32 = false;
  std::optional<std::string> log_completions_hub_repo;
  // The update.
  double beta = 0;
  double epsilon = 0;
  std::optional<double> epsilon_high;
  int64_t num_iterations = 0;
  bool mask_truncated_completions = false;
  bool sync_ref_model = false;
  double ref_model_mixup_alpha = 0;
  int64_t ref_model_sync_steps = 0;
  std::optional<std::string> ref_model;
  bool log_completions = false;
  // Completions printed at each logging step with log_completions (a random
  // sample); null: all of the round's.
  std::optional<int64_t> num_completions_to_print;
  bool log_unique_prompts = false;
  // GRPO and RLOO: template variables for every prompt (JSON object text;
  // a row's own chat_template_kwargs win).
  std::optional<std::string> chat_template_kwargs;
  // Agent rollouts (grpo, rloo): the tool programs the model may call while
  // it generates (a command, or a program entry as JSON text; see
  // rewards/tool_program.hpp), and the most tool-calling turns per
  // completion (null: no limit but max_completion_length).
  std::vector<std::string> tools;
  std::optional<int64_t> max_tool_calling_iterations;

  // TRL's resolution of generation_batch_size and steps_per_generation for
  // `world_size` processes (InputError when they do not fit together);
  // defined with the online trainers (trainers/online.cpp).
  struct Rounds {
    int64_t generation_batch_size;  // completions per round, all processes
    int64_t steps_per_generation;   // micro-batches per round on each process
  };
  Rounds rounds(int64_t world_size) const;
};

struct OnlineDefaults {
  int64_t num_generations;
  double beta;
};

// How a generation round holds sharded weights (ZeRO-3/FSDP).
template <class C>
void add_generation_placement_fields(config::SchemaBuilder<C>& b) {
  using O = OnlineConfig;
  b.field(&O::ds3_gather_for_generation, "ds3_gather_for_generation", true,
          "Under ZeRO-3/FSDP: gather all weights once per generation round (fast, needs the whole model per "
          "process) or each layer for each forward (fits anything, slow).");
  b.field(&O::ds3_gather_for_generation_budget_mb, "ds3_gather_for_generation_budget_mb", 0.0,
          "With ds3_gather_for_generation false: MiB of weights kept gathered for the whole generation round "
          "(the first layers that fit); the rest are gathered per forward. 0: none.")
      .min(0);
}

// TRL passes generation_kwargs to transformers' GenerationConfig after its
// own sampling settings, so that they win, for sampling only (the log-probs
// keep `temperature`). trlx takes the keys its sampler has, with their
// meaning, read here once for the config's check and for the sampler: a key
// given holds its value (null, where a key takes one, is its off value).
struct GenerationKwargs {
  std::optional<double> temperature, top_p, repetition_penalty;
  std::optional<std::optional<double>> min_p;
  std::optional<int64_t> top_k, no_repeat_ngram_size;  // null given: 0
  std::optional<bool> do_sample;
  std::optional<std::vector<int64_t>> suppress_tokens, eos_token_id;
  std::optional<std::vector<std::vector<int64_t>>> bad_words_ids;
  std::optional<std::vector<std::string>> stop_strings;
};

// Reads generation_kwargs' JSON text; the first unknown key or bad value
// goes to `problem` ("" for none), and what was read before it is returned.
inline GenerationKwargs parse_generation_kwargs(const std::string& text, std::string& problem) {
  GenerationKwargs g;
  problem.clear();
  const auto j = nlohmann::json::parse(text, nullptr, false);
  if (j.is_discarded() || !j.is_object()) {
    problem = "expects a mapping of generation settings";
    return g;
  }
  auto id = [](const nlohmann::json& v) { return v.is_number_integer() && v.get<int64_t>() >= 0; };
  auto ids = [&](const nlohmann::json& v) {
    if (!v.is_array()) return false;
    for (const auto& x : v)
      if (!id(x)) return false;
    return true;
  };
  auto count = [](const nlohmann::json& v) { return v.is_null() || (v.is_number_integer() && v.get<int64_t>() >= 0); };
  for (const auto& [k, v] : j.items()) {
    const bool number = v.is_number();
    if (k == "temperature" || k == "repetition_penalty") {
      if (!number || !(v.get<double>() > 0)) problem = fmt::format("`{}` expects a number > 0, found {}", k, v.dump());
      else (k == "temperature" ? g.temperature : g.repetition_penalty) = v.get<double>();
    } else if (k == "top_p") {
      if (!number || !(v.get<double>() > 0 && v.get<double>() <= 1))
        problem = fmt::format("`top_p` expects a number in (0, 1], found {}", v.dump());
      else g.top_p = v.get<double>();
    } else if (k == "min_p") {
      if (!v.is_null() && (!number || !(v.get<double>() >= 0 && v.get<double>() <= 1)))
        problem = fmt::format("`min_p` expects a number in [0, 1] or null, found {}", v.dump());
      else g.min_p = v.is_null() ? std::nullopt : std::optional<double>(v.get<double>());
    } else if (k == "top_k" || k == "no_repeat_ngram_size") {
      if (!count(v)) problem = fmt::format("`{}` expects an integer >= 0 or null, found {}", k, v.dump());
      else (k == "top_k" ? g.top_k : g.no_repeat_ngram_size) = v.is_null() ? 0 : v.get<int64_t>();
    } else if (k == "do_sample") {
      if (!v.is_boolean()) problem = fmt::format("`do_sample` expects true or false, found {}", v.dump());
      else g.do_sample = v.get<bool>();
    } else if (k == "suppress_tokens" || k == "eos_token_id") {
      const bool one = k == "eos_token_id" && id(v);
      if (!(v.is_null() || one || ids(v)))
        problem = fmt::format("`{}` expects {}a list of token ids, found {}", k,
                              k == "eos_token_id" ? "a token id or " : "", v.dump());
      else if (!v.is_null())
        (k == "eos_token_id" ? g.eos_token_id : g.suppress_tokens) =
            one ? std::vector<int64_t>{v.get<int64_t>()} : v.get<std::vector<int64_t>>();
    } else if (k == "bad_words_ids") {
      bool good = v.is_null() || (v.is_array() && !v.empty());
      if (v.is_array())
        for (const auto& words : v) good = good && ids(words) && !words.empty();
      if (!good)
        problem = fmt::format("`bad_words_ids` expects a non-empty list of non-empty lists of token ids, found {}",
                              v.dump());
      else if (!v.is_null()) g.bad_words_ids = v.get<std::vector<std::vector<int64_t>>>();
    } else if (k == "stop_strings") {
      bool good = v.is_null() || (v.is_string() && !v.get<std::string>().empty()) || v.is_array();
      if (v.is_array())
        for (const auto& x : v) good = good && x.is_string() && !x.get<std::string>().empty();
      if (!good) problem = fmt::format("`stop_strings` expects a text or a list of texts (none empty), found {}", v.dump());
      else if (!v.is_null())
        g.stop_strings = v.is_string() ? std::vector<std::string>{v.get<std::string>()} : v.get<std::vector<std::string>>();
    } else if (k == "max_new_tokens" || k == "max_length" || k == "min_new_tokens" || k == "min_length") {
      problem = fmt::format("`{}`: the completion length is max_completion_length; set that instead", k);
    } else if (k == "num_beams" || k == "num_beam_groups" || k == "num_return_sequences") {
      problem = fmt::format("`{}`: completions are sampled one by one, num_generations per prompt; beam search is not "
                            "built",
                            k);
    } else {
      problem = fmt::format("`{}` is not built in trlx's sampler, which takes temperature, top_p, top_k, min_p, "
                            "repetition_penalty, do_sample, no_repeat_ngram_size, bad_words_ids, suppress_tokens, "
                            "eos_token_id and stop_strings",
                            k);
    }
    if (!problem.empty()) break;
  }
  return g;
}

// vLLM's settings, at TRL's defaults: each refused at any other value, as
// use_vllm is (`max_model_length`: grpo and rloo; `importance_sampling`: grpo;
// TRL's default GPU memory share differs per trainer).
template <class C>
void add_vllm_fields(config::SchemaBuilder<C>& b, bool max_model_length, bool importance_sampling,
                     double gpu_memory_utilization) {
  using O = OnlineConfig;
  const std::string why = "there is no vLLM in trlx (use_vllm is not built); drop the vllm_* settings";
  b.field(&O::vllm_mode, "vllm_mode", "colocate", "vLLM: server or colocate.").not_built(why);
  b.field(&O::vllm_model_impl, "vllm_model_impl", "vllm", "vLLM model implementation.").not_built(why);
  b.field(&O::vllm_server_base_url, "vllm_server_base_url", std::nullopt, "vLLM server URL.").not_built(why);
  b.field(&O::vllm_server_host, "vllm_server_host", "0.0.0.0", "vLLM server host.").not_built(why);
  b.field(&O::vllm_server_port, "vllm_server_port", 8000, "vLLM server port.").not_built(why);
  b.field(&O::vllm_server_timeout, "vllm_server_timeout", 240.0, "Wait for the vLLM server.").not_built(why);
  b.field(&O::vllm_group_port, "vllm_group_port", 51216, "vLLM weight-update port.").not_built(why);
  b.field(&O::vllm_gpu_memory_utilization, "vllm_gpu_memory_utilization", gpu_memory_utilization,
          "vLLM's share of GPU memory.")
      .not_built(why);
  b.field(&O::vllm_tensor_parallel_size, "vllm_tensor_parallel_size", 1, "vLLM tensor parallelism.").not_built(why);
  b.field(&O::vllm_enable_sleep_mode, "vllm_enable_sleep_mode", false, "vLLM sleep mode.").not_built(why);
  b.field(&O::vllm_structured_outputs_regex, "vllm_structured_outputs_regex", std::nullopt,
          "vLLM structured outputs.")
      .not_built(why);
  if (max_model_length)
    b.field(&O::vllm_max_model_length, "vllm_max_model_length", std::nullopt, "vLLM context length.").not_built(why);
  if (importance_sampling) {
    b.field(&O::vllm_importance_sampling_correction, "vllm_importance_sampling_correction", true,
            "Correct for vLLM's sampling distribution.")
        .not_built(why);
    b.field(&O::vllm_importance_sampling_mode, "vllm_importance_sampling_mode", "sequence_mask",
            "How the vLLM correction is applied.")
        .not_built(why);
    b.field(&O::vllm_importance_sampling_cap, "vllm_importance_sampling_cap", std::nullopt, "Cap of the correction.")
        .not_built(why);
    b.field(&O::vllm_importance_sampling_clip_min, "vllm_importance_sampling_clip_min", std::nullopt,
            "Lower clip of the correction.")
        .not_built(why);
    b.field(&O::vllm_importance_sampling_clip_max, "vllm_importance_sampling_clip_max", 3.0,
            "Upper clip of the correction.")
        .not_built(why);
  }
}

// How completions are sampled (every online trainer): the sampler's
// settings, generation_kwargs, and how sharded weights are held for it.
// `temperature` is the trainer's default.
template <class C>
void add_generation_fields(config::SchemaBuilder<C>& b, double temperature) {
  using O = OnlineConfig;
  b.group("generation");
  b.field(&O::temperature, "temperature", temperature, "Sampling temperature.").min(0, true);
  b.field(&O::top_p, "top_p", 1.0, "Nucleus sampling mass.").min(0, true).max(1);
  b.field(&O::top_k, "top_k", 0, "Sample among the k most likely tokens; 0 disables.").min(0);
  b.field(&O::min_p, "min_p", std::nullopt, "Drop tokens below min_p times the top probability.").min(0).max(1);
  b.field(&O::repetition_penalty, "repetition_penalty", 1.0, "Penalty on tokens already present.").min(0, true);
  b.field(&O::generation_kwargs, "generation_kwargs", std::nullopt,
          "Generation settings applied last, as TRL passes them to the generator: temperature, top_p, top_k, min_p, "
          "repetition_penalty and do_sample (for sampling only; the log-probs keep `temperature`), "
          "no_repeat_ngram_size, bad_words_ids, suppress_tokens, eos_token_id (ends completions instead of the "
          "model's eos ids) and stop_strings, with transformers' meaning; other keys are refused by name.")
      .holds_mapping();
  b.field(&O::use_vllm, "use_vllm", false, "Generate with vLLM.")
      .not_built("trlx generates with its own batched generator (KV cache, continuous batching); there is no vLLM");
  b.field(&O::cache_implementation, "cache_implementation", std::nullopt, "transformers' KV cache kind for generation.")
      .not_built("trlx's generator keeps its own KV cache (one per round, each prompt's prefill shared by its "
                 "samples)");
  add_generation_placement_fields(b);
  b.rule([](const C& c, config::Conflicts& out) {
    if (c.generation_kwargs) {
      std::string problem;
      parse_generation_kwargs(*c.generation_kwargs, problem);
      if (!problem.empty()) out.invalid("generation_kwargs", problem);
    }
  });
}

// The fields of the online trainers that score completions: what scores
// them, how they are sampled, and the reference (beta > 0). `temperature`
// is the trainer's default.
template <class C>
void add_sampling_fields(config::SchemaBuilder<C>& b, double temperature) {
  using O = OnlineConfig;
  b.group("rewards");
  b.field(&O::reward_funcs, "reward_funcs", std::vector<std::string>{},
          "What scores completions, one entry per function: a built-in by name (think_format_reward, "
          "accuracy_reward, ...; with parameters as {name: get_soft_overlong_punishment, max_completion_len: 512}), "
          "a reward model directory, or a program ({command: \"python3 my_reward.py\"}) speaking JSON lines.")
      .items_may_be_mappings();
  b.field(&O::reward_weights, "reward_weights", std::nullopt, "Weight of each reward function (default 1 each).");
  add_generation_fields(b, temperature);
  b.group("update");
  b.field(&O::ref_model, "ref_model", std::nullopt,
          "Reference model directory (beta > 0); null uses a copy of the starting policy, or the base with adapters "
          "off under use_peft. A hub name works too.")
      .hub_model();
  b.rule([](const C& c, config::Conflicts& out) {
    const size_t functions = c.reward_funcs.size() + (c.reward_model_path ? 1 : 0);
    if (c.reward_weights && c.reward_weights->size() != functions)
      out.conflict({"reward_funcs", "reward_weights"},
                   fmt::format("give one weight per reward function ({} functions{}, {} weights)", functions,
                               c.reward_model_path ? ", reward_model_path first" : "", c.reward_weights->size()));
  });
}

// What every online trainer that samples rounds of completions shares
// beyond the sampler (grpo, rloo, distill): their length, the chat
// template's variables, tool calls, the prompt order and the completion
// logs (`log_completions_help` says what the trainer's logs hold).
template <class C>
void add_rollout_fields(config::SchemaBuilder<C>& b, const std::string& log_completions_help) {
  using O = OnlineConfig;
  b.group("generation");
  b.field(&O::max_completion_length, "max_completion_length", 512, "Most tokens generated per completion.").min(1);
  b.field(&O::chat_template_kwargs, "chat_template_kwargs", std::nullopt,
          "Variables passed to the chat template with every conversational prompt (e.g. {enable_thinking: false}); "
          "a row's own chat_template_kwargs column wins over them.")
      .holds_mapping();
  b.group("agents");
  b.field(&O::tools, "tools", std::vector<std::string>{},
          "Tool programs the model may call while it generates, one entry each: {command: \"python3 "
          "examples/tools/python_tools.py my_tools.py\"} (and name, timeout_seconds, working_dir), speaking JSON "
          "lines (docs/tools.md). Their function schemas are rendered into every prompt; calls are parsed from the "
          "model's turns, run, and their results appended, masked out of the loss.")
      .items_may_be_mappings();
  b.field(&O::max_tool_calling_iterations, "max_tool_calling_iterations", std::nullopt,
          "With tools: the most tool-calling turns per completion (null: as many as max_completion_length "
          "allows).")
      .min(0);
  b.rule([](const C& c, config::Conflicts& out) {
    if (c.max_tool_calling_iterations && c.tools.empty())
      out.conflict({"max_tool_calling_iterations", "tools"}, "max_tool_calling_iterations limits tool-calling turns; "
                   "without tools there are none (name the tool programs in tools, or drop it)");
  });
  b.group("generation");
  b.field(&O::shuffle_dataset, "shuffle_dataset", true, "Visit prompts in a seeded random order (else file order).");
  b.field(&O::log_completions, "log_completions", false,
          log_completions_help);
  b.field(&O::num_completions_to_print, "num_completions_to_print", std::nullopt,
          "With log_completions: how many of the round's completions to print, picked at random (null: all; 0: "
          "none).")
      .min(0);
  b.field(&O::use_transformers_continuous_batching, "use_transformers_continuous_batching", false,
          "transformers' continuous batching engine: trlx's generator always batches continuously (a finished row's "
          "slot takes the next prompt), whatever this says.")
      .only_describes();
  b.field(&O::use_transformers_paged, "use_transformers_paged", false,
          "Older name of use_transformers_continuous_batching: trlx's generator always batches continuously.")
      .only_describes();
  b.field(&O::transformers_continuous_batching_config, "transformers_continuous_batching_config", std::nullopt,
          "Settings of transformers' continuous batching engine.")
      .holds_mapping()
      .not_built("trlx's generator is not transformers'; it sizes its batch from the generation round");
  b.field(&O::log_multimodal, "log_multimodal", true,
          "Log images and videos with completions: trlx trains text models, so there is none to log either way.")
      .only_describes();
  b.field(&O::log_unique_prompts, "log_unique_prompts", false,
          "Keep one completion per prompt in the wandb/trackio completions table.")
      .not_built("it filters only the wandb/trackio table, which trlx does not log; the completions files hold "
                 "every row");
  b.rule([](const C& c, config::Conflicts& out) {
    if (c.num_completions_to_print && !c.log_completions)
      out.conflict({"num_completions_to_print", "log_completions"},
                   "completions are printed only with log_completions: true; set it or remove "
                   "num_completions_to_print");
    // TRL's online configs have no max_length: a sequence is bounded by its
    // prompt and its completion lengths.
    if (c.max_length)
      out.invalid("max_length", "online trainers do not use it: a sequence is bounded by its prompt and "
                                "max_completion_length; remove max_length");
  });
}

// The group trainers' fields (grpo, rloo), under the trainer's training
// fields.
template <class C>
void add_online_fields(config::SchemaBuilder<C>& b, const OnlineDefaults& d) {
  using O = OnlineConfig;
  add_sampling_fields(b, 1.0);
  // TRL's grpo and rloo scripts take a reward model under this name, scored
  // before reward_funcs; it is online-dpo's reward_model_path.
  b.field(&O::reward_model_path, "reward_model_name_or_path", std::nullopt,
          "A reward model directory (or hub name) scored before the reward_funcs entries, as TRL's grpo and rloo "
          "scripts take it.")
      .bound_to("reward_model_path")
      .hub_model();
  b.group("generation");
  b.field(&O::num_generations, "num_generations", d.num_generations, "Completions sampled per prompt.").min(2);
  b.field(&O::num_generations_eval, "num_generations_eval", std::nullopt,
          "Completions sampled per prompt of the test split when evaluating (default num_generations); the global "
          "eval batch, per_device_eval_batch_size x processes, must hold whole groups of them.")
      .min(1);
  b.field(&O::generation_batch_size, "generation_batch_size", std::nullopt,
          "Completions generated per generation round, over all processes (default: per-device batch x "
          "processes x steps_per_generation).")
      .min(1);
  b.field(&O::steps_per_generation, "steps_per_generation", std::nullopt,
          "Micro-batches each generation round feeds (default gradient_accumulation_steps).")
      .min(1);
  b.field(&O::max_prompt_length, "max_prompt_length", std::nullopt,
          "Longer prompts keep their last max_prompt_length tokens; null keeps them whole.")
      .min(1);
  add_rollout_fields(b, "At each logging step, write the last generation round (step, prompt, completion, each "
                        "reward, advantage; every process's completions) to "
                        "output_dir/completions/completions_<step>.parquet and print num_completions_to_print of "
                        "them.");
  b.group("update");
  b.field(&O::beta, "beta", d.beta, "KL coefficient towards the reference model; 0 loads no reference.").min(0);
  b.field(&O::epsilon, "epsilon", 0.2, "Clipping range of the importance ratio.").min(0);
  b.field(&O::epsilon_high, "epsilon_high", std::nullopt, "Upper clipping range (defaults to epsilon).").min(0);
  b.field(&O::num_iterations, "num_iterations", 1, "Optimisation passes over each generation round.").min(1);
  b.field(&O::mask_truncated_completions, "mask_truncated_completions", false,
          "Exclude completions cut at max_completion_length from the loss.");
  b.field(&O::sync_ref_model, "sync_ref_model", false, "Mix the policy into the reference every ref_model_sync_steps.");
  b.field(&O::ref_model_mixup_alpha, "ref_model_mixup_alpha", 0.6, "Mixing weight of the policy.").min(0).max(1);
  b.field(&O::ref_model_sync_steps, "ref_model_sync_steps", 512, "Steps between reference updates.").min(1);
  b.rule([](const C& c, config::Conflicts& out) {
    if (c.generation_batch_size && c.steps_per_generation)
      out.conflict({"generation_batch_size", "steps_per_generation"},
                   "set one of them: each is derived from the other and the batch size");
    if (c.generation_batch_size && *c.generation_batch_size % c.num_generations != 0)
      out.conflict({"generation_batch_size", "num_generations"},
                   fmt::format("a round holds whole groups: generation_batch_size ({}) must be a multiple of "
                               "num_generations ({})",
                               *c.generation_batch_size, c.num_generations));
    if (c.sync_ref_model && c.beta == 0)
      out.conflict({"sync_ref_model", "beta"}, "with beta 0 there is no reference to sync; set beta > 0");
    if (c.sync_ref_model && c.use_peft && !c.ref_model)
      out.conflict({"sync_ref_model", "use_peft"},
                   "with use_peft and no ref_model the reference is the base model with adapters off, which cannot "
                   "be synced; set ref_model or turn sync_ref_model off");
  });
}

}  // namespace trlx::trainers
