// What the online trainers share: prompts, generation through the engine, scoring, rounds.
#include "trainers/online.hpp"

#include <algorithm>
#include <cctype>
#include <chrono>
#include <cmath>
#include <filesystem>
#include <fstream>
#include <iterator>
#include <limits>
#include <random>

#include "core/error.hpp"
#include "core/stop.hpp"
#include "core/log.hpp"
#include "engine/engine.hpp"
#include "io/atomic_write.hpp"
#include "rewards/builtin.hpp"
#include "rewards/program.hpp"
#include "text/data/dataset.hpp"
#include "text/data/table_file.hpp"
#include "text/tokenizer/parallel.hpp"
#include "trainers/reward_model_function.hpp"

namespace trlx::trainers {

namespace fs = std::filesystem;

OnlineConfig::Rounds OnlineConfig::rounds(int64_t world_size) const {
  const int64_t global_batch = per_device_train_batch_size * world_size;
  Rounds r{};
  if (generation_batch_size) {
    if (*generation_batch_size % global_batch != 0)
      fail_input("generation_batch_size ({}) must be a multiple of the global batch, per_device_train_batch_size "
                 "({}) x {} process(es) = {}",
                 *generation_batch_size, per_device_train_batch_size, world_size, global_batch);
    r.generation_batch_size = *generation_batch_size;
    r.steps_per_generation = *generation_batch_size / global_batch;
  } else {
    r.steps_per_generation = steps_per_generation.value_or(gradient_accumulation_steps);
    r.generation_batch_size = global_batch * r.steps_per_generation;
  }
  if (r.generation_batch_size % num_generations != 0)
    fail_input("a generation round of {} completions (per_device_train_batch_size {} x {} process(es) x "
               "steps_per_generation {}) does not hold whole groups of num_generations {}: make it a multiple",
               r.generation_batch_size, per_device_train_batch_size, world_size, r.steps_per_generation,
               num_generations);
  return r;
}

OnlineRun::OnlineRun(TextInputs t) : text(std::move(t)) {}
OnlineRun::~OnlineRun() = default;
OnlineRun::OnlineRun(OnlineRun&&) noexcept = default;

PromptSplit prepare_prompts(const OnlineConfig& c, const std::string& trainer, const text::Tokenizer& tok,
                            const text::ChatTemplate* tmpl, const std::string& split, const OnlineSetup& setup,
                            const nlohmann::ordered_json* tool_schemas, int64_t max_context) {
  const auto read = read_split(data::Task::prompt_only, data_source(c, trainer), split, true);
  const data::Shaped& shaped = *read;
  PromptSplit out;
  out.conversational = is_conversational(shaped, tmpl, trainer, false);
  const auto config_kwargs = c.chat_template_kwargs ? nlohmann::ordered_json::parse(*c.chat_template_kwargs)
                                                     : nlohmann::ordered_json::object();
  // Tokenized on dataset_num_proc threads, then taken in row order.
  text::RowResults<std::vector<int64_t>> tokenized(
      shaped.rows.size(), static_cast<int>(c.dataset_num_proc.value_or(1)), [&](size_t i) {
        const auto& row = shaped.rows[i].value;
        const auto& prompt = row["prompt"];
        if (!out.conversational) return encode_text(tok, prompt.get<std::string>(), setup.prompt_special_tokens);
        auto inputs = template_inputs(row, config_kwargs);
        if (tool_schemas) inputs.tools = *tool_schemas;
        return setup.prompts_as_data_utils ? encode_text(tok, render_prompt(tok, *tmpl, prompt, inputs), false)
                                           : render_conversation_ids(tok, *tmpl, prompt, true, inputs);
      });
  for (size_t i = 0; i < shaped.rows.size(); ++i) {
    const auto& row = shaped.rows[i];
    PromptExample ex;
    ex.prompt = row.value["prompt"];
    ex.columns = nlohmann::ordered_json::object();
    for (const auto& [k, v] : row.value.items())
      if (k != "prompt") ex.columns[k] = v;
    ex.prompt_ids = std::move(tokenized.get(i, shaped.rows[i].where()));
    if (ex.prompt_ids.empty()) fail_input("{}: the prompt tokenizes to nothing", row.where());
    if (c.max_prompt_length && static_cast<int64_t>(ex.prompt_ids.size()) > *c.max_prompt_length) {
      ex.prompt_ids.erase(ex.prompt_ids.begin(), ex.prompt_ids.end() - *c.max_prompt_length);
      ++out.truncated;
    }
    // Found here, not when the prompt's round comes (steps later, without its row).
    const auto len = static_cast<int64_t>(ex.prompt_ids.size());
    if (max_context > 0 && c.max_completion_length > max_context - len)
      fail_input("{}: the prompt has {} tokens{}; with max_completion_length {} it needs {} positions, beyond the "
                 "model's context of {} (max_position_embeddings): set max_prompt_length to at most {}, or shorten "
                 "max_completion_length or the prompt",
                 row.where(), len, c.max_prompt_length ? " (after max_prompt_length)" : "", c.max_completion_length,
                 c.max_completion_length > std::numeric_limits<int64_t>::max() - len
                     ? std::string("more than 2^63")
                     : std::to_string(len + c.max_completion_length),
                 max_context,
                 std::max<int64_t>(1, max_context - c.max_completion_length));
    out.examples.push_back(std::move(ex));
  }
  if (out.truncated)
    log::info("{} split: {} of {} prompt(s) longer than max_prompt_length {} keep their last {} tokens", split,
              out.truncated, out.examples.size(), *c.max_prompt_length, *c.max_prompt_length);
  return out;
}

std::unique_ptr<rewards::JudgeProgram> make_judge(const OnlineConfig& c) {
  if (c.judge.empty()) return nullptr;
  const auto& entry = c.judge.front();
  rewards::ProgramOptions o;
  if (!entry.empty() && entry.front() == '{') {
    const auto spec = nlohmann::json::parse(entry);
    if (!spec.contains("command"))
      fail_input("judge: {} has no command; give {{command: \"python3 my_judge.py\"}}", entry);
    o = rewards::program_entry(spec, "judge", entry);
  } else {
    o.command = entry;
  }
  return rewards::start_judge_program(o);
}

std::vector<std::unique_ptr<rewards::RewardFunction>> make_reward_functions(const OnlineConfig& c,
                                                                            const std::string& trainer,
                                                                            torch::Device device,
                                                                            bool conversational,
                                                                            bool environment_rewards) {
  if (c.reward_funcs.empty() && !c.reward_model_path && c.judge.empty() && !environment_rewards)
    fail_input("{}: reward_funcs is empty; name at least one reward function (a built-in such as "
               "think_format_reward, a reward model directory, or {{command: \"python3 my_reward.py\"}})",
               trainer);
  std::vector<std::unique_ptr<rewards::RewardFunction>> out;
  if (c.reward_model_path) {
    if (!fs::is_directory(*c.reward_model_path))
      fail_input("reward_model_path: {} is not a directory; give a reward model directory (one `trlx reward` saved, "
                 "or a Hugging Face ...ForSequenceClassification model)",
                 *c.reward_model_path);
    out.push_back(make_reward_model_function(*c.reward_model_path, device, c.dtype, conversational, c.seed));
  }
  for (const auto& entry : c.reward_funcs) {
    if (!entry.empty() && entry.front() == '{') {
      const auto spec = nlohmann::json::parse(entry);
      if (spec.contains("command")) {
        const auto o = rewards::program_entry(spec, "reward_funcs", entry);
        out.push_back(rewards::start_reward_program(o));
      } else if (spec.contains("name")) {
        auto params = spec;
        params.erase("name");
        out.push_back(rewards::make_builtin_reward(spec["name"].get<std::string>(), params));
      } else {
        fail_input("reward_funcs: {} names neither a program (command: ...) nor a built-in (name: ...)", entry);
      }
    } else if (rewards::is_builtin_reward(entry)) {
      out.push_back(rewards::make_builtin_reward(entry, nlohmann::json::object()));
    } else if (fs::is_directory(entry)) {
      out.push_back(make_reward_model_function(entry, device, c.dtype, conversational, c.seed));
    } else {
      std::string names;
      for (const auto& n : rewards::builtin_reward_names()) names += (names.empty() ? "" : ", ") + n;
      fail_input("reward_funcs: `{}` is not a built-in reward ({}) nor a reward model directory; a program is "
                 "given as {{command: \"...\"}}",
                 entry, names);
    }
  }
  // Metrics are named after the functions: two of one name would merge.
  for (size_t i = 0; i < out.size(); ++i)
    for (size_t j = 0; j < i; ++j)
      if (out[i]->name() == out[j]->name())
        fail_input("reward_funcs: two reward functions are named `{}` (entries {} and {}); their metrics "
                   "rewards/{}/mean would merge. Give a program entry its own name: {{command: ..., name: ...}}",
                   out[i]->name(), j + 1, i + 1, out[i]->name());
  return out;
}

config::TrainingConfig engine_config(const OnlineConfig& c) {
  config::TrainingConfig run = c;
  if (!c.shuffle_dataset) run.train_sampling_strategy = "sequential";
  return run;
}

OnlineRun set_up_online_run(const OnlineConfig& c, const std::string& trainer, const OnlineSetup& setup,
                            model::LanguageModel value_model) {
  OnlineRun r(load_text_inputs(c, trainer));
  auto policy = engine::load_policy(c, model::HeadKind::CausalLM);
  check_tokenizer_fits(r.text.tokenizer, policy.tokenizer_dir, policy.model->config().vocab_size, policy.base_dir);
  r.pad_id = resolve_pad_id(r.text.tokenizer, trainer);
  if (auto e = r.text.tokenizer.eos_token_id()) r.eos_ids.push_back(*e);
  // Every eos id the model declares ends a completion too (an end-of-turn
  // token): config.json's and generation_config.json's, as TRL takes them.
  auto add_eos = [&](int64_t e) {
    if (std::find(r.eos_ids.begin(), r.eos_ids.end(), e) == r.eos_ids.end()) r.eos_ids.push_back(e);
  };
  for (auto e : policy.model->config().eos_token_ids) add_eos(e);
  const fs::path gen_config = policy.base_dir / "generation_config.json";
  if (std::ifstream in(gen_config); in) {
    const auto j = nlohmann::json::parse(in, nullptr, false);
    const auto e = j.is_object() ? j.value("eos_token_id", nlohmann::json()) : nlohmann::json();
    if (j.is_discarded() || !(e.is_null() || e.is_number_integer() || e.is_array()))
      fail_input("{}: not valid JSON, or eos_token_id is neither an id nor a list of ids", gen_config.string());
    if (e.is_number_integer()) add_eos(e.get<int64_t>());
    if (e.is_array())
      for (const auto& x : e) {
        if (!x.is_number_integer()) fail_input("{}: eos_token_id holds `{}`, not a token id", gen_config.string(), x.dump());
        add_eos(x.get<int64_t>());
      }
  }
  // generation_kwargs' eos_token_id ends completions instead (transformers'
  // meaning: it replaces the generation config's; the completion mask
  // follows it, where TRL keeps masking at the model's eos ids).
  if (c.generation_kwargs) {
    std::string problem;  // checked with the config
    if (auto eos = parse_generation_kwargs(*c.generation_kwargs, problem).eos_token_id) r.eos_ids = std::move(*eos);
  }
  // Tool programs start before anything heavy, so that one that cannot
  // start stops the run at once; their schemas render into every prompt.
  r.tools = start_tools(c, trainer, r.text);
  const nlohmann::ordered_json* schemas = r.tools ? &r.tools->schemas : nullptr;
  const int64_t max_context = policy.model->config().max_position_embeddings;
  r.prompts = prepare_prompts(c, trainer, r.text.tokenizer, r.text.chat_template_or_null(), c.dataset_train_split,
                              setup, schemas, max_context);
  if (r.tools && !r.prompts.conversational)
    fail_input("{}: tools need conversational prompts (a list of messages), which the chat template renders with "
               "the tools' schemas; the {} split holds plain text",
               trainer, c.dataset_train_split);
  if (c.eval_strategy != "no")
    r.eval_prompts = prepare_prompts(c, trainer, r.text.tokenizer, r.text.chat_template_or_null(),
                                     c.dataset_test_split, setup, schemas, max_context);
  const config::TrainingConfig run = engine_config(c);
  std::optional<Reference> reference;
  if ((c.beta != 0 && setup.beta_weighs_reference) || setup.always_reference)
    reference = load_reference(run, policy, c.ref_model, false, model::HeadKind::CausalLM);
  r.engine = std::make_unique<engine::Engine>(run, std::move(policy), trainer, std::move(value_model));
  if (reference && reference->separate) r.engine->set_reference(reference->separate);
  if (c.sync_ref_model) r.engine->sync_reference_every(c.ref_model_sync_steps, c.ref_model_mixup_alpha);
  const bool environment_rewards = r.tools && r.tools->environment && r.tools->environment->has_reward();
  if (!setup.scores_itself)
    r.reward_functions =
        make_reward_functions(c, trainer, r.engine->device(), r.prompts.conversational, environment_rewards);
  // The environment's reward comes after the configured ones, as TRL adds it.
  if (environment_rewards) r.reward_functions.push_back(environment_reward(r.tools));
  r.judge = make_judge(c);
  return r;
}

OnlineTrainer::OnlineTrainer(const OnlineConfig& config, std::string name, PromptSplit prompts,
                             text::Tokenizer tokenizer,
                             std::vector<std::unique_ptr<rewards::RewardFunction>> reward_functions, int64_t pad_id,
                             std::vector<int64_t> eos_ids)
    : config_(config),
      name_(std::move(name)),
      prompts_(std::move(prompts)),
      tokenizer_(std::move(tokenizer)),
      reward_functions_(std::move(reward_functions)),
      pad_id_(pad_id),
      eos_ids_(std::move(eos_ids)),
      logprob_temperature_(config.temperature) {
  // reward_weights names the configured functions; one a trainer adds (an
  // environment's reward) brings its own weight.
  size_t configured = 0;
  for (const auto& f : reward_functions_) configured += f->implied_weight() ? 0 : 1;
  if (config_.reward_weights && config_.reward_weights->size() != configured)
    fail_input("{}: {} reward_weights for {} reward functions", name_, config_.reward_weights->size(), configured);
  size_t next = 0;
  for (const auto& f : reward_functions_)
    weights_.push_back(f->implied_weight() ? *f->implied_weight()
                                           : (config_.reward_weights ? (*config_.reward_weights)[next++] : 1.0));
}

GroupTrainer::GroupTrainer(const OnlineConfig& config, std::string name, PromptSplit prompts,
                           text::Tokenizer tokenizer,
                           std::vector<std::unique_ptr<rewards::RewardFunction>> reward_functions, int64_t pad_id,
                           std::vector<int64_t> eos_ids, int world_size)
    : OnlineTrainer(config, std::move(name), std::move(prompts), std::move(tokenizer), std::move(reward_functions),
                    pad_id, std::move(eos_ids)),
      rounds_(config.rounds(world_size)),
      world_size_(world_size) {
  if (config_.log_completions && !data::parquet_writer_built())
    fail_input("{}: log_completions writes Parquet files, and this trlx was built without Apache Arrow; rebuild it "
               "with scripts/setup.sh (it installs pyarrow, whose Arrow libraries trlx uses) or set log_completions: "
               "false",
               name_);
}

size_t OnlineTrainer::num_examples(const std::string& split) const {
  if (split == "train") return prompts_.examples.size();
  return split == "test" ? eval_prompts_.examples.size() : 0;
}

void OnlineTrainer::set_eval_prompts(PromptSplit) {
  // The configs refuse eval_strategy for these trainers; said here too for
  // configs built in code.
  fail_input("{}: evaluation on the {} split is not built yet for this trainer; set eval_strategy: no", name_,
             config_.dataset_test_split);
}

void GroupTrainer::set_eval_prompts(PromptSplit prompts) {
  const auto& c = config_;
  const int64_t group = c.num_generations_eval.value_or(c.num_generations);
  const int64_t batch = c.per_device_eval_batch_size * world_size_;
  if (batch % group != 0)
    fail_input("{}: the global eval batch, per_device_eval_batch_size ({}) x {} process(es) = {}, must hold whole "
               "groups of num_generations_eval {}: make it a multiple",
               name_, c.per_device_eval_batch_size, world_size_, batch, group);
  if (prompts.examples.empty())
    fail_input("{}: the {} split has no prompts to evaluate on; add some or set eval_strategy: no", name_,
               c.dataset_test_split);
  // Completions reach the reward functions in the form of the train split's.
  if (prompts.conversational != prompts_.conversational)
    fail_input("{}: the {} split holds {} prompts and the {} split {}; give both splits one form", name_,
               c.dataset_train_split, prompts_.conversational ? "conversational" : "plain-text",
               c.dataset_test_split, prompts.conversational ? "conversational" : "plain-text");
  eval_prompts_ = std::move(prompts);
}

engine::TensorMap OnlineTrainer::collate(const std::string&, const std::vector<size_t>&) const {
  throw Error(fmt::format("the {} trainer trains on generation rounds, not on collated batches", name_));
}

namespace {

// Where a micro-batch's completion tokens are predicted among the hidden
// states a forward gave from position `from` on ([B, t]): rows are prompt,
// completion, then padding; hidden state p predicts token p + 1, so
// completion token j of row b is predicted at prompt_length_b - 1 + j.
struct CompletionPositions {
  torch::Tensor index;      // [B, C] into the hidden states (clamped past a row's end, where it repeats)
  torch::Tensor real;       // [B, C] bool: j is within the completion
  torch::Tensor positions;  // [B, t - 1] bool: the hidden states that predict a completion token
};
CompletionPositions completion_positions(const engine::TensorMap& batch, int64_t from, int64_t t, torch::Device dev) {
  const auto prompt_len = batch.at("prompt_lengths").to(dev);
  const auto lengths = batch.at("completion_lengths").to(dev);
  const int64_t c = batch.at("completion_mask").size(1);
  const auto j = torch::arange(c, torch::TensorOptions().dtype(torch::kInt64).device(dev)).unsqueeze(0);
  CompletionPositions out;
  out.real = j < lengths.unsqueeze(1);
  out.index = (prompt_len.unsqueeze(1) - 1 - from + j).clamp_max(t - 2).clamp_min(0);
  const auto pos = torch::arange(t - 1, j.options()).unsqueeze(0);
  const auto first = prompt_len.unsqueeze(1) - 1 - from;
  out.positions = (pos >= first) & (pos < first + lengths.unsqueeze(1));
  return out;
}

// The forward of `role` over a micro-batch's rows, from the shortest
// prompt's last position on (the ones before predict nothing read).
torch::Tensor rows_forward(engine::Engine& engine, engine::Role role, const engine::TensorMap& batch) {
  model::Batch in{batch.at("input_ids"), batch.at("attention_mask"), {}, {}};
  in.outputs_from = engine::host_count(batch, "outputs_from");
  return engine.forward(role, in);
}

}  // namespace

torch::Tensor OnlineTrainer::completion_hidden(engine::Engine& engine, engine::Role role,
                                               const engine::TensorMap& batch) {
  const auto hidden = rows_forward(engine, role, batch);
  const int64_t from = engine::host_count(batch, "outputs_from");
  const auto at = completion_positions(batch, from, batch.at("input_ids").size(1) - from, hidden.device());
  const int64_t b = hidden.size(0), c = at.index.size(1);
  return hidden.gather(1, at.index.unsqueeze(-1).expand({b, c, hidden.size(2)}));
}

losses::TokenLogProbs OnlineTrainer::completion_logprobs(engine::Engine& engine, engine::Role role,
                                                         const engine::TensorMap& batch, bool entropy,
                                                         bool entropy_grad) {
  const auto& ids = batch.at("input_ids");
  const int64_t from = engine::host_count(batch, "outputs_from");
  const auto hidden = rows_forward(engine, role, batch);
  const auto dev = hidden.device();
  const int64_t b = ids.size(0), t = ids.size(1) - from;
  const auto at = completion_positions(batch, from, t, dev);
  losses::TokenLogProbs out;
  if (entropy_grad) {
    // The hidden states of the completion positions only, then their logits.
    const int64_t c = at.index.size(1);
    const auto h = hidden.gather(1, at.index.unsqueeze(-1).expand({b, c, hidden.size(2)}));
    const auto logits = engine.head(role, h).to(torch::kFloat32) / logprob_temperature_;
    const auto logp = torch::log_softmax(logits, -1);
    const auto targets = batch.at("completion_ids").to(dev);
    const auto realf = at.real.to(torch::kFloat32);
    out.logps = logp.gather(2, targets.unsqueeze(-1)).squeeze(-1) * realf;
    out.entropy = -(logp.exp() * logp).sum(-1) * realf;
    return out;
  }
  losses::LogProbOptions o;
  o.temperature = logprob_temperature_;
  o.entropy = entropy;
  auto lp = engine.logprobs(role, hidden.slice(1, 0, t - 1), ids.to(dev).slice(1, from + 1), at.positions, o);
  const auto realf = at.real.to(lp.logps.scalar_type());
  out.logps = lp.logps.gather(1, at.index) * realf;
  if (entropy) out.entropy = lp.entropy.gather(1, at.index) * realf;
  return out;
}

namespace {

// A [rows, width] int64 tensor of `seqs`, each row padded with `pad` after it.
torch::Tensor pad_right(const std::vector<std::vector<int64_t>>& seqs, int64_t width, int64_t pad) {
  auto out = torch::full({static_cast<int64_t>(seqs.size()), width}, pad, torch::kInt64);
  auto* p = out.data_ptr<int64_t>();
  for (size_t r = 0; r < seqs.size(); ++r) std::copy(seqs[r].begin(), seqs[r].end(), p + r * width);
  return out;
}

// The config's sampling (temperature, top-k/p, min-p, repetition penalty,
// and the rules of generation_kwargs), ending at `stop_ids` (which hold
// generation_kwargs' eos_token_id when it is given: set_up_online_run) or at
// a stop string; the caller sets how many tokens.
model::GenerationOptions sampling_options(const OnlineConfig& c, const std::vector<int64_t>& stop_ids, int64_t pad,
                                          const text::Tokenizer& tokenizer) {
  model::GenerationOptions o;
  o.do_sample = true;
  o.temperature = c.temperature;
  o.top_k = c.top_k;
  o.top_p = c.top_p;
  o.min_p = c.min_p;
  o.repetition_penalty = c.repetition_penalty;
  // generation_kwargs win, as TRL applies them last (checked with the config).
  if (c.generation_kwargs) {
    std::string problem;
    auto g = parse_generation_kwargs(*c.generation_kwargs, problem);
    o.temperature = g.temperature.value_or(o.temperature);
    o.top_p = g.top_p.value_or(o.top_p);
    o.top_k = g.top_k.value_or(o.top_k);
    if (g.min_p) o.min_p = *g.min_p;
    o.repetition_penalty = g.repetition_penalty.value_or(o.repetition_penalty);
    o.do_sample = g.do_sample.value_or(o.do_sample);
    o.no_repeat_ngram_size = g.no_repeat_ngram_size.value_or(o.no_repeat_ngram_size);
    if (g.suppress_tokens) o.suppress_tokens = std::move(*g.suppress_tokens);
    if (g.bad_words_ids) o.bad_words_ids = std::move(*g.bad_words_ids);
    if (g.stop_strings)
      o.stop = model::stop_on_strings(std::move(*g.stop_strings), [&tokenizer](const std::vector<int64_t>& ids) {
        return tokenizer.decode(std::vector<int32_t>(ids.begin(), ids.end()), true);
      });
  }
  o.eos_token_ids = stop_ids;
  o.pad_token_id = pad;
  return o;
}

engine::Engine::GenerationPlacement generation_placement(const OnlineConfig& c) {
  return {c.ds3_gather_for_generation, c.ds3_gather_for_generation_budget_mb};
}

double nanmean_of(const torch::Tensor& x) { return torch::nanmean(x.to(torch::kFloat64)).item<double>(); }

}  // namespace

std::vector<std::vector<int64_t>> OnlineTrainer::generate_completions(engine::Engine& engine,
                                                                     const std::vector<const PromptExample*>& rows,
                                                                     const std::vector<size_t>& slots, int64_t group,
                                                                     const std::vector<int64_t>& stop_ids) {
  const auto t0 = std::chrono::steady_clock::now();
  std::vector<std::vector<int64_t>> completions;
  if (evaluating_ && fixed_eval_) {
    std::vector<size_t> prompts;
    for (const auto* row : rows) prompts.push_back(static_cast<size_t>(row - eval_prompts_.examples.data()));
    completions = fixed_eval_(prompts, slots);
  } else if (fixed_ && !evaluating_) {
    completions = fixed_(slots);
  } else {
    model::GenerationOptions o = sampling_options(config_, stop_ids, pad_id_, tokenizer_);
    o.max_new_tokens = config_.max_completion_length;
    std::vector<std::vector<int64_t>> prompts;
    // Rows sharing a prompt are sampled together (one shared prefill).
    o.num_return_sequences = group;
    for (size_t i = 0; i < rows.size(); i += static_cast<size_t>(group)) prompts.push_back(rows[i]->prompt_ids);
    auto gen = engine.generate(prompts, o, generation_placement(config_));
    completions = std::move(gen.completions);
  }
  if (completions.size() != rows.size())
    throw Error(fmt::format("{}: {} completions for {} rows", name_, completions.size(), rows.size()));
  generation_seconds_ += std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
  return completions;
}

std::vector<std::vector<int64_t>> OnlineTrainer::generate_turn(engine::Engine& engine,
                                                              const std::vector<std::vector<int64_t>>& contexts,
                                                              const std::vector<int64_t>& room,
                                                              const std::vector<size_t>& slots, int turn) {
  const auto t0 = std::chrono::steady_clock::now();
  std::vector<std::vector<int64_t>> out;
  if (fixed_ && !evaluating_ && fixed_turns_) {
    out = slots.empty() ? out : fixed_turns_(slots, turn);
  } else if (evaluating_ && fixed_eval_) {
    throw Error(fmt::format("{}: replayed evaluation completions call tools; replaying later turns is not built", name_));
  } else {
    model::GenerationOptions o = sampling_options(config_, eos_ids_, pad_id_, tokenizer_);
    // Each row stops at its remaining budget; the cache is sized for the
    // largest of them (the ids past a row's budget would be cut anyway).
    o.max_new_tokens_per_prompt = room;
    for (auto& r : o.max_new_tokens_per_prompt) r = std::max<int64_t>(r, 1);
    o.max_new_tokens = 1;
    for (auto r : o.max_new_tokens_per_prompt) o.max_new_tokens = std::max(o.max_new_tokens, r);
    auto gen = engine.generate(contexts, o, generation_placement(config_));
    out = std::move(gen.completions);
  }
  if (out.size() != contexts.size())
    throw Error(fmt::format("{}: {} turns for {} rows", name_, out.size(), contexts.size()));
  generation_seconds_ += std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
  return out;
}

OnlineTrainer::Scored OnlineTrainer::generate_and_score(engine::Engine& engine,
                                                        const std::vector<const PromptExample*>& rows,
                                                        const std::vector<size_t>& slots, int64_t group) {
  using Clock = std::chrono::steady_clock;
  auto since = [](Clock::time_point t) { return std::chrono::duration<double>(Clock::now() - t).count(); };
  Scored out;
  auto& completions = out.completions;
  completions = generate_completions(engine, rows, slots, group, eos_ids_);
  for (auto& c : completions)
    if (c.empty()) c.push_back(eos_ids_.empty() ? pad_id_ : eos_ids_.front());
  if (tools_) continue_with_tools(engine, rows, slots, out);
  const int64_t f = static_cast<int64_t>(reward_functions_.size());
  if (f == 0 && !judge_) {
    // Nothing scores (distillation): no texts to build, no scoring round.
    out.rewards = torch::empty({static_cast<int64_t>(rows.size()), 0}, torch::kFloat64);
    return out;
  }
  auto t0 = Clock::now();

  for (auto& fn : reward_functions_) fn->set_step(engine.global_step());
  auto& samples = out.samples;
  for (size_t i = 0; i < rows.size(); ++i) {
    rewards::Sample s;
    s.prompt = rows[i]->prompt;
    const std::vector<int32_t> ids32(completions[i].begin(), completions[i].end());
    const std::string text = tokenizer_.decode(ids32, true);
    if (tools_)
      s.completion = out.messages[i];
    else
      s.completion = prompts_.conversational
                         ? nlohmann::ordered_json::array({{{"role", "assistant"}, {"content", text}}})
                         : nlohmann::ordered_json(text);
    s.completion_ids = completions[i];
    s.columns = rows[i]->columns;
    if (tools_ && tools_->environment) s.episode = static_cast<int64_t>(i);
    samples.push_back(std::move(s));
  }
  out.rewards = torch::full({static_cast<int64_t>(rows.size()), f}, std::numeric_limits<double>::quiet_NaN(),
                            torch::kFloat64);
  auto* r = out.rewards.data_ptr<double>();
  score_or_stop(engine, [&] {
    for (int64_t k = 0; k < f; ++k) {
      const auto scores = reward_functions_[static_cast<size_t>(k)]->score(samples);
      if (scores.size() != samples.size())
        throw Error(fmt::format("reward function {} gave {} scores for {} completions",
                                reward_functions_[static_cast<size_t>(k)]->name(), scores.size(), samples.size()));
      for (size_t i = 0; i < samples.size(); ++i) {
        if (!scores[i]) continue;
        // A reward that is not a finite float32 (a NaN from a broken reward
        // model, 1e39 from a program) would make every advantage NaN or 0 and
        // train nothing: stop and name it.
        const double v = *scores[i];
        if (!std::isfinite(v) || std::abs(v) > std::numeric_limits<float>::max())
          fail("reward function {} gave completion {} of this round the reward {}, which is not a finite "
               "float32 number (advantages are computed in float32): fix the function, or scale its rewards",
               reward_functions_[static_cast<size_t>(k)]->name(), i, v);
        r[static_cast<int64_t>(i) * f + k] = v;
      }
    }
  });
  scoring_seconds_ += since(t0);
  return out;
}

void OnlineTrainer::score_or_stop(engine::Engine& engine, const std::function<void()>& score) {
  std::optional<std::string> cut_short;
  try {
    score();
  } catch (const stop::Interrupted& e) {
    cut_short = e.what();
  }
  std::vector<double> any = {cut_short ? 1.0 : 0.0};
  engine.sum_across_ranks(any);
  if (any[0] > 0)
    throw stop::Interrupted(cut_short ? *cut_short : std::string("another rank's reward program was cut short"));
}

bool OnlineTrainer::ends(int64_t id) const {
  return id == pad_id_ || std::find(eos_ids_.begin(), eos_ids_.end(), id) != eos_ids_.end();
}

void OnlineTrainer::mark_outputs_from(engine::TensorMap& rows) {
  // Only the positions from the shortest prompt's last token on predict a
  // completion token (see completion_logprobs). Read from the host lengths,
  // again for every slice of the rows.
  rows.erase("outputs_from");
  const auto& lengths = rows.at("prompt_lengths");
  if (lengths.numel() == 0) return;
  const int64_t from = lengths.min().item<int64_t>() - 1;
  if (from > 0 && from < rows.at("input_ids").size(1)) rows["outputs_from"] = engine::host_count(from);
}

engine::TensorMap OnlineTrainer::pack_rows(const std::vector<std::vector<int64_t>>& prompts,
                                           const std::vector<std::vector<int64_t>>& completions,
                                           const std::vector<bool>& masked,
                                           const std::vector<std::vector<uint8_t>>* tool_masks) const {
  const auto n = static_cast<int64_t>(prompts.size());
  int64_t width = 1, cwidth = 1;
  std::vector<std::vector<int64_t>> seqs;
  std::vector<int64_t> prompt_lengths, lengths;
  for (size_t i = 0; i < prompts.size(); ++i) {
    std::vector<int64_t> seq = prompts[i];
    seq.insert(seq.end(), completions[i].begin(), completions[i].end());
    width = std::max<int64_t>(width, static_cast<int64_t>(seq.size()));
    cwidth = std::max<int64_t>(cwidth, static_cast<int64_t>(completions[i].size()));
    prompt_lengths.push_back(static_cast<int64_t>(prompts[i].size()));
    lengths.push_back(static_cast<int64_t>(completions[i].size()));
    seqs.push_back(std::move(seq));
  }
  auto attention = torch::zeros({n, width}, torch::kInt64);
  auto completion_mask = torch::zeros({n, cwidth}, torch::kFloat32);
  for (int64_t i = 0; i < n; ++i) {
    const auto u = static_cast<size_t>(i);
    attention[i].slice(0, 0, prompt_lengths[u] + lengths[u]).fill_(1);
    if (masked[u]) continue;
    if (tool_masks && u < tool_masks->size() && !(*tool_masks)[u].empty()) {
      // Tool results are context, not the model's: out of the loss.
      const auto& tm = (*tool_masks)[u];
      auto* row = completion_mask[i].data_ptr<float>();
      for (size_t k = 0; k < tm.size(); ++k) row[k] = tm[k] ? 1.0f : 0.0f;
    } else {
      completion_mask[i].slice(0, 0, lengths[u]).fill_(1);
    }
  }
  engine::TensorMap out;
  out["input_ids"] = pad_right(seqs, width, pad_id_);
  out["attention_mask"] = attention;
  out["completion_mask"] = completion_mask;
  out["completion_ids"] = pad_right(completions, cwidth, pad_id_);
  out["prompt_lengths"] = torch::tensor(prompt_lengths, torch::kInt64);
  out["completion_lengths"] = torch::tensor(lengths, torch::kInt64);
  mark_outputs_from(out);
  return out;
}

engine::Trainer::Rollout GroupTrainer::rollout(engine::Engine& engine, const std::vector<size_t>& round_prompts) {
  return build_round(engine, prompts_, round_prompts,
                     {config_.num_generations, rounds_.generation_batch_size, rounds_.steps_per_generation,
                      config_.per_device_train_batch_size, false});
}

engine::MetricSums GroupTrainer::evaluate_rounds(engine::Engine& engine) {
  struct Evaluating {
    bool& flag;
    explicit Evaluating(bool& f) : flag(f) { flag = true; }
    ~Evaluating() { flag = false; }
  } evaluating(evaluating_);
  const int64_t group = config_.num_generations_eval.value_or(config_.num_generations);
  const int64_t world = engine.world_size();
  const int64_t batch = config_.per_device_eval_batch_size * world;
  const size_t per_batch = static_cast<size_t>(batch / group), n = eval_prompts_.examples.size();
  engine::MetricSums m;
  for (size_t start = 0; start < n; start += per_batch) {
    // The batch's prompts in file order; a short last batch is filled with
    // the first prompts again on several processes, and left short on one.
    std::vector<size_t> prompts;
    const size_t real = std::min(per_batch, n - start);
    for (size_t j = 0; j < (world > 1 ? per_batch : real); ++j)
      prompts.push_back(j < real ? start + j : (j - real) % n);
    const int64_t rows = static_cast<int64_t>(prompts.size()) * group;
    const int64_t local = rows / world;
    auto round = build_round(engine, eval_prompts_, prompts, {group, rows, 1, local, true});
    m.merge(round.metrics);
    const auto& mb = round.micro_batches.front();
    auto out = engine.run_loss(*this, mb);
    // TRL's eval loss: each process's batch loss once per row it holds,
    // averaged; in the last batch only the first (test prompts mod global
    // eval batch) of those values count, in process order, as accelerate's
    // gather_for_metrics cuts it (it counts prompts, not completions).
    const int64_t first = engine.rank() * local;
    const int64_t cut = static_cast<int64_t>(n) % batch;
    const bool last = start + per_batch >= n;
    const double own = static_cast<double>(last && cut > 0 ? std::clamp<int64_t>(cut - first, 0, local) : local);
    const auto batch_loss = out.loss_sum.detach().to(torch::kFloat64) / num_items(mb);
    out.metrics.add("loss", batch_loss * own, own);
    m.merge(out.metrics);
  }
  // As TRL, the tokens trained on so far (not counting evaluation's).
  m.add_entry("num_tokens", engine.tokens_seen());
  return m;
}

engine::Trainer::Rollout GroupTrainer::build_round(engine::Engine& engine, const PromptSplit& split,
                                                   const std::vector<size_t>& round_prompts, const RoundShape& shape) {
  using Clock = std::chrono::steady_clock;
  auto since = [](Clock::time_point t) { return std::chrono::duration<double>(Clock::now() - t).count(); };
  const int64_t ng = shape.group;
  const int64_t g = shape.rows;
  const int64_t world = engine.world_size();
  const int64_t local = g / world;
  const int64_t first = engine.rank() * local;
  std::vector<size_t> slots;
  std::vector<const PromptExample*> rows;
  for (int64_t s = first; s < first + local; ++s) {
    slots.push_back(static_cast<size_t>(s));
    rows.push_back(&split.examples.at(round_prompts.at(static_cast<size_t>(s / ng))));
  }

  // An environment starts an episode per rollout; its observations may give
  // each rollout its own prompt.
  std::vector<PromptExample> episodes;
  int64_t sample_group = local % ng == 0 ? ng : 1;
  if (tools_ && tools_->environment) {
    episodes = start_episodes(*tools_, rows, tokenizer_, config_.max_prompt_length);
    for (size_t i = 0; i < rows.size(); ++i) {
      if (episodes[i].prompt_ids != rows[i]->prompt_ids) sample_group = 1;
      rows[i] = &episodes[i];
    }
  }

  // --- generate and score this rank's slots ------------------------------
  // A rank holding whole groups samples each prompt's completions together;
  // otherwise one row per slot.
  auto scored = generate_and_score(engine, rows, slots, sample_group);
  const auto& completions = scored.completions;

  const int64_t f = static_cast<int64_t>(reward_functions_.size());
  // This rank's slots as rows of a table that the ranks' rows, gathered in
  // rank order (slot order), make global. Columns: the f rewards, then the
  // completion's length, whether it was truncated, its loss tokens and its
  // summed KL from the reference (when the reward includes it).
  // With tools, also its tool calls and failed calls; its length counts
  // the model's tokens only (TRL's completion metrics under tools).
  // And its ids' count (with tool results: more than its length).
  const int64_t cols = f + 7;
  const int64_t c_len = f, c_trunc = f + 1, c_loss_tokens = f + 2, c_kl = f + 3, c_calls = f + 4, c_fails = f + 5,
                c_ids = f + 6;
  std::vector<double> mine(static_cast<size_t>(local * cols), 0.0);
  auto at = [&](int64_t slot, int64_t col) -> double& {
    return mine[static_cast<size_t>((slot - first) * cols + col)];
  };
  const auto* r = scored.rewards.data_ptr<double>();
  std::vector<bool> truncated(slots.size());
  std::vector<std::vector<int64_t>> prompt_ids;
  for (size_t i = 0; i < slots.size(); ++i) {
    const auto slot = first + static_cast<int64_t>(i);
    for (int64_t k = 0; k < f; ++k) at(slot, k) = r[static_cast<int64_t>(i) * f + k];
    truncated[i] = !ends(completions[i].back());
    const auto& tm = scored.tool_masks.empty() ? std::vector<uint8_t>() : scored.tool_masks[i];
    at(slot, c_len) = tm.empty() ? static_cast<double>(completions[i].size())
                                 : static_cast<double>(std::count(tm.begin(), tm.end(), uint8_t{1}));
    at(slot, c_trunc) = truncated[i] ? 1.0 : 0.0;
    at(slot, c_ids) = static_cast<double>(completions[i].size());
    at(slot, c_loss_tokens) = config_.mask_truncated_completions && truncated[i] ? 0.0 : at(slot, c_len);
    prompt_ids.push_back(rows[i]->prompt_ids);
  }
  std::vector<bool> masked(slots.size(), false);
  if (config_.mask_truncated_completions) masked = truncated;
  if (!slots.empty()) {
    at(first, c_calls) = static_cast<double>(scored.tool_calls);
    at(first, c_fails) = static_cast<double>(scored.tool_failures);
  }
  const auto packed = pack_rows(prompt_ids, completions, masked, &scored.tool_masks);

  // --- log-probs the loss needs later (per micro-batch-sized chunk) -------
  // Evaluation keeps none of the generating policy's: it is the policy the
  // loss runs (a ratio of 1), unless the reward holds the KL.
  const bool want_old = shape.eval ? reward_includes_kl() : needs_old_logps();
  const int64_t bs = shape.micro_batch_size;
  auto micro = [&](int64_t m) {
    engine::TensorMap mb;
    const int64_t lo = m * bs, hi = std::min(local, lo + bs);
    for (const auto& [k, v] : packed)
      if (k != "outputs_from") mb[k] = v.slice(0, lo, hi);
    mark_outputs_from(mb);
    return mb;
  };
  const int64_t chunks = (local + bs - 1) / bs;
  std::vector<torch::Tensor> old_logps, ref_logps;
  const bool want_ref = needs_ref_logps();
  auto t0 = Clock::now();
  if (want_old || want_ref) {
    torch::NoGradGuard no_grad;
    const bool was_training = engine.training();
    engine.set_training(false);
    for (int64_t m = 0; m < chunks; ++m) {
      auto mb = micro(m);
      engine.move_batch(mb);
      if (want_old) old_logps.push_back(completion_logprobs(engine, engine::Role::Policy, mb, false).logps);
      if (want_ref) ref_logps.push_back(completion_logprobs(engine, engine::Role::Reference, mb, false).logps);
    }
    engine.set_training(was_training);
  }
  logprob_seconds_ += since(t0);
  if (reward_includes_kl()) {
    const auto per_token = (torch::cat(old_logps).cpu().to(torch::kFloat64) -
                            torch::cat(ref_logps).cpu().to(torch::kFloat64)) *
                           packed.at("completion_mask").to(torch::kFloat64);
    const auto seq = per_token.sum(1).contiguous();
    for (int64_t i = 0; i < local; ++i) at(first + i, c_kl) = seq.data_ptr<double>()[i];
  }
  const auto table = engine.concat_across_ranks(mine);
  const auto full = torch::tensor(table, torch::kFloat64).view({g, cols});
  const double loss_tokens = full.select(1, c_loss_tokens).sum().item<double>();
  std::optional<torch::Tensor> seq_kl;
  if (reward_includes_kl()) seq_kl = full.select(1, c_kl).to(torch::kFloat32);

  // --- advantages over the whole round ------------------------------------
  const bool scores = scores_completions();
  const auto rewards_per_func = full.slice(1, 0, f).to(torch::kFloat32);
  const auto weights = torch::tensor(weights_, torch::kFloat64).to(torch::kFloat32);
  losses::Advantages adv;
  if (scores) adv = advantages(rewards_per_func, weights, seq_kl, ng);
  if (config_.log_completions && !shape.eval)
    keep_round_log(engine, split, round_prompts, ng, completions, full.select(1, c_ids), rewards_per_func,
                   adv.advantages);

  // --- the round's metrics (the same on every rank) -----------------------
  Rollout out;
  auto& m = out.metrics;
  const auto comp_len = full.select(1, c_len), trunc = full.select(1, c_trunc) > 0.5;
  m.add_entry("completions/mean_length", comp_len.mean().item<double>());
  m.add_entry("completions/min_length", comp_len.min().item<double>());
  m.add_entry("completions/max_length", comp_len.max().item<double>());
  m.add_entry("completions/clipped_ratio", trunc.to(torch::kFloat64).mean().item<double>());
  auto term = comp_len.masked_select(~trunc);
  if (term.numel() == 0) term = torch::zeros({1}, torch::kFloat64);
  m.add_entry("completions/mean_terminated_length", term.mean().item<double>());
  m.add_entry("completions/min_terminated_length", term.min().item<double>());
  m.add_entry("completions/max_terminated_length", term.max().item<double>());
  if (tools_) {
    // Over every process's completions: calls per completion, and the
    // failed share of the calls.
    const double calls = full.select(1, c_calls).sum().item<double>();
    const double fails = full.select(1, c_fails).sum().item<double>();
    m.add_entry("tools/call_frequency", calls / static_cast<double>(g));
    m.add_entry("tools/failure_frequency", calls > 0 ? fails / calls : 0.0);
  }
  if (reward_includes_kl()) m.add_entry("kl", full.select(1, c_kl).sum().item<double>() / std::max(1.0, loss_tokens));
  // A function's null answers (skipped completions) are counted as a
  // share of the round's completions.
  const auto nulls = torch::isnan(rewards_per_func);
  for (int64_t k = 0; scores && k < f; ++k) {
    const auto col = rewards_per_func.select(1, k);
    const auto& n = reward_functions_[static_cast<size_t>(k)]->name();
    m.add_entry("rewards/" + n + "/mean", nanmean_of(col));
    m.add_entry("rewards/" + n + "/std", losses::nanstd(col.to(torch::kFloat64)).item<double>());
    m.add_entry("rewards/" + n + "/null_frac", nulls.select(1, k).to(torch::kFloat64).mean().item<double>());
  }
  if (scores) {
    m.add_entry("reward", nanmean_of(adv.rewards));
    m.add_entry("reward_std", losses::nanstd(adv.rewards.to(torch::kFloat64)).item<double>());
    const double frac_zero_std = adv.std_is_zero.to(torch::kFloat64).mean().item<double>();
    m.add_entry("frac_reward_zero_std", frac_zero_std);
    if (!shape.eval && engine.rank() == 0)  // the round's metrics are every rank's: one warning
      warn_if_unlearnable(engine.global_step() + 1, f > 0 ? nulls.all(1).sum().item<int64_t>() : 0, g,
                          frac_zero_std);
  }
  if (!shape.eval) {
    if (tools_) {
      // The prompts and the model's own tokens (TRL leaves tool results out).
      double tokens = 0;
      for (size_t i = 0; i < slots.size(); ++i)
        tokens += static_cast<double>(prompt_ids[i].size()) + at(first + static_cast<int64_t>(i), c_len);
      out.tokens = tokens;
    } else {
      out.tokens = packed.at("attention_mask").sum().item<double>();
    }
  }

  // --- micro-batches --------------------------------------------------------
  torch::Tensor local_adv;
  if (scores) local_adv = adv.advantages.slice(0, first, first + local).to(torch::kFloat32);
  const auto items = torch::full({}, loss_tokens, torch::kFloat64);
  for (int64_t mi = 0; mi < shape.micro_batches; ++mi) {
    auto mb = micro(mi);
    const int64_t lo = mi * bs, hi = std::min(local, lo + bs);
    if (scores) mb["advantages"] = local_adv.slice(0, lo, hi);
    mb["round_completion_tokens"] = items;
    if (want_old && !shape.eval) mb["old_logps"] = old_logps[static_cast<size_t>(mi)].cpu();
    if (want_ref) mb["ref_logps"] = ref_logps[static_cast<size_t>(mi)].cpu();
    out.micro_batches.push_back(std::move(mb));
  }
  return out;
}

void GroupTrainer::warn_if_unlearnable(int64_t step, int64_t unscored, int64_t completions, double frac_zero_std) {
  if (unscored == completions && completions > 0) {
    log::warn("step {}: no reward function gave any of the round's {} completions a reward (every answer was null): "
              "they get advantage 0 and this round teaches nothing; check the reward functions "
              "(rewards/<name>/null_frac in the metrics)",
              step, completions);
  } else if (unscored > 0 && !warned_unscored_) {
    log::warn("step {}: {} of the round's {} completions got no reward from any function (every answer null): they "
              "get advantage 0 (warned once; rewards/<name>/null_frac in the metrics counts them)",
              step, unscored, completions);
    warned_unscored_ = true;
  }
  zero_spread_rounds_ = frac_zero_std >= 1.0 ? zero_spread_rounds_ + 1 : 0;
  if (zero_spread_rounds_ == kZeroSpreadRounds)
    log::warn("step {}: for {} rounds in a row every group of {} completions got one reward (frac_reward_zero_std 1), "
              "so every advantage is 0 and nothing is learned; sample more diversely (temperature, "
              "num_generations) or check that the rewards can tell completions apart",
              step, kZeroSpreadRounds, config_.num_generations);
}

void GroupTrainer::keep_round_log(engine::Engine& engine, const PromptSplit& split,
                                  const std::vector<size_t>& round_prompts, int64_t group,
                                  const std::vector<std::vector<int64_t>>& completions,
                                  const torch::Tensor& lengths, const torch::Tensor& rewards,
                                  const torch::Tensor& advantages) {
  // Every slot's completion ids end to end, gathered in rank order, which is
  // slot order (token ids are exact as doubles); `lengths` cut them apart.
  const auto len = lengths.to(torch::kInt64).contiguous();
  const int64_t g = len.numel();
  std::vector<size_t> offset(static_cast<size_t>(g) + 1, 0);
  for (int64_t s = 0; s < g; ++s)
    offset[static_cast<size_t>(s) + 1] = offset[static_cast<size_t>(s)] + static_cast<size_t>(len[s].item<int64_t>());
  std::vector<double> mine;
  for (const auto& c : completions) mine.insert(mine.end(), c.begin(), c.end());
  const auto ids = engine.concat_across_ranks(mine);
  if (ids.size() != offset.back())
    throw Error(fmt::format("round log: {} completion tokens gathered, {} expected", ids.size(), offset.back()));
  if (engine.rank() != 0) return;
  RoundLog log;
  for (int64_t s = 0; s < g; ++s) {
    const auto u = static_cast<size_t>(s);
    const auto& example = split.examples.at(round_prompts.at(static_cast<size_t>(s / group)));
    if (scores_completions()) {
      log.prompts.push_back(example.prompt);
    } else {
      const std::vector<int32_t> prompt_ids(example.prompt_ids.begin(), example.prompt_ids.end());
      log.prompts.push_back(tokenizer_.decode(prompt_ids, /*skip_special_tokens=*/true));
    }
    std::vector<int32_t> slot_ids;
    for (size_t t = offset[u]; t < offset[u + 1]; ++t) slot_ids.push_back(static_cast<int32_t>(ids[t]));
    log.completions.push_back(tokenizer_.decode(slot_ids, /*skip_special_tokens=*/true));
  }
  if (scores_completions()) {
    log.rewards = rewards.to(torch::kFloat32).contiguous();
    log.advantages = advantages.to(torch::kFloat32).contiguous();
  }
  round_log_ = std::move(log);
}

namespace {

// A string as a JSON string literal: control characters and quotes visible.
std::string quoted(const std::string& s) {
  return nlohmann::json(s).dump(-1, ' ', false, nlohmann::json::error_handler_t::replace);
}

// A prompt or completion for the printed sample: text quoted, a
// conversation as "ROLE: content" per message.
std::string printable(const nlohmann::ordered_json& v) {
  if (v.is_string()) return quoted(v.get<std::string>());
  if (!v.is_array()) return v.dump();
  std::string out;
  for (const auto& m : v) {
    if (!out.empty()) out += "  ";
    const auto role = m.is_object() && m.contains("role") && m.at("role").is_string()
                          ? m.at("role").get<std::string>() : std::string("?");
    std::string upper = role;
    std::transform(upper.begin(), upper.end(), upper.begin(), [](unsigned char c) { return std::toupper(c); });
    const auto& content = m.is_object() && m.contains("content") ? m.at("content") : nlohmann::ordered_json();
    out += upper + ": " + (content.is_string() ? quoted(content.get<std::string>()) : content.dump());
  }
  return out;
}

}  // namespace

void GroupTrainer::on_log(engine::Engine& engine, int64_t step) {
  if (!config_.log_completions || engine.rank() != 0 || !round_log_) return;
  const auto& r = *round_log_;
  const size_t n = r.completions.size();
  using Kind = data::TableColumn::Kind;
  // Distillation's logs hold text whatever the prompts are.
  const bool scores = scores_completions();
  const bool chat = prompts_.conversational && scores;
  std::vector<data::TableColumn> table;
  table.push_back({"step", Kind::Int64, std::vector<data::Value>(n, step)});
  table.push_back({"prompt", chat ? Kind::Messages : Kind::Text, {}});
  table.push_back({"completion", chat ? Kind::Messages : Kind::Text, {}});
  for (size_t i = 0; i < n; ++i) {
    table[1].values.push_back(r.prompts[i]);
    if (chat) {
      data::Value message = data::Value::object();
      message["role"] = "assistant";
      message["content"] = r.completions[i];
      data::Value messages = data::Value::array();
      messages.push_back(std::move(message));
      table[2].values.push_back(std::move(messages));
    } else {
      table[2].values.push_back(r.completions[i]);
    }
  }
  const auto names = scores ? reward_names() : std::vector<std::string>{};
  const float* rw = scores ? r.rewards.data_ptr<float>() : nullptr;
  const float* av = scores ? r.advantages.data_ptr<float>() : nullptr;
  for (size_t k = 0; k < names.size(); ++k) {
    data::TableColumn c{names[k], Kind::Double, {}};
    for (size_t i = 0; i < n; ++i) c.values.push_back(static_cast<double>(rw[i * names.size() + k]));
    table.push_back(std::move(c));
  }
  if (scores) {
    data::TableColumn adv{"advantage", Kind::Double, {}};
    for (size_t i = 0; i < n; ++i) adv.values.push_back(static_cast<double>(av[i]));
    table.push_back(std::move(adv));
  }
  const auto dir = engine.output_dir() / "completions";
  const auto file = dir / fmt::format("completions_{:05d}.parquet", step);
  std::error_code ec;
  std::filesystem::create_directories(dir, ec);
  if (ec) fail("{}: cannot create the completions folder: {}", dir.string(), ec.message());
  io::write_file_atomic(file, data::parquet_file_bytes(table));

  // A random sample of the rows, printed in slot order (null: all of them).
  const size_t shown = std::min<size_t>(n, static_cast<size_t>(config_.num_completions_to_print.value_or(
                                               static_cast<int64_t>(n))));
  if (shown == 0) return;
  std::vector<size_t> all(n), picked;
  for (size_t i = 0; i < n; ++i) all[i] = i;
  std::mt19937_64 gen(static_cast<uint64_t>(config_.seed) * 1000003u + static_cast<uint64_t>(step));
  std::sample(all.begin(), all.end(), std::back_inserter(picked), shown, gen);
  std::string out = fmt::format("completions at step {} ({} of {}; all of them in {}):", step, shown, n,
                                file.string());
  for (size_t i : picked) {
    out += fmt::format("\n  [{}] prompt     {}\n      completion {}\n     ", i, printable(r.prompts[i]),
                       printable(table[2].values[i]));
    for (size_t k = 0; k < names.size(); ++k) out += fmt::format(" {} {:.2f}", names[k], rw[i * names.size() + k]);
    if (scores) out += fmt::format("  advantage {:.2f}", av[i]);
  }
  log::info("{}", out);
}

std::vector<std::string> OnlineTrainer::reward_names() const {
  std::vector<std::string> out;
  for (const auto& f : reward_functions_) out.push_back(f->name());
  return out;
}

std::string OnlineTrainer::describe_rewards() const {
  std::string names;
  for (const auto& n : reward_names()) names += (names.empty() ? "" : ", ") + n;
  if (judge_) names += (names.empty() ? "judge " : ", judge ") + judge_->name();
  return names;
}

std::string GroupTrainer::describe() const {
  const auto& c = config_;
  return fmt::format("rounds of {} completions ({} prompts x {}), {} micro-batch(es) each, {} pass(es); max {} new "
                     "tokens, temperature {}; beta {}{}; rewards: {}",
                     rounds_.generation_batch_size, rounds_.generation_batch_size / c.num_generations,
                     c.num_generations, rounds_.steps_per_generation, c.num_iterations, c.max_completion_length,
                     c.temperature, c.beta, c.beta == 0 ? " (no reference)" : "", describe_rewards());
}

std::map<std::string, double> OnlineTrainer::run_totals() const {
  return {{"generation_seconds", generation_seconds_},
          {"scoring_seconds", scoring_seconds_},
          {"round_logprob_seconds", logprob_seconds_}};
}

}  // namespace trlx::trainers
