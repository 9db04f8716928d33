// What every trainer does the same way around its data and loss: tokenizer, template, collation, runs.
#include "trainers/common.hpp"

#include "engine/engine.hpp"
#include "losses/preference.hpp"

#include <algorithm>
#include <fstream>
#include <sstream>

#include <nlohmann/json.hpp>

#include "core/error.hpp"
#include "dist/comm/make_communicator.hpp"
#include "core/log.hpp"
#include "model/adapter_dir.hpp"
#include "model/loading.hpp"
#include "model/model_config.hpp"

namespace trlx::trainers {

namespace fs = std::filesystem;

fs::path tokenizer_dir_of(const fs::path& model_dir) {
  // An adapter saved without tokenizer files uses its base model's.
  if (fs::exists(model_dir / "tokenizer.json") || !model::is_adapter_dir(model_dir)) return model_dir;
  return model::adapter_base_dir(model_dir);
}

TextInputs load_tokenizer_and_template(const fs::path& model_dir, const std::optional<std::string>& chat_template_path) {
  TextInputs out{text::Tokenizer::from_dir(model_dir), std::nullopt};
  if (chat_template_path) {
    const fs::path p = *chat_template_path;
    if (fs::is_directory(p)) {
      auto other = text::Tokenizer::from_dir(p);
      if (other.chat_template().empty()) fail_input("chat_template_path {} has no chat_template", p.string());
      out.chat_template.emplace(other.chat_template(), (p / "tokenizer_config.json").string() + ": chat_template");
    } else {
      std::ifstream in(p);
      if (!in) fail_input("chat_template_path {} cannot be read", p.string());
      std::stringstream ss;
      ss << in.rdbuf();
      out.chat_template.emplace(ss.str(), p.string());
    }
  } else if (!out.tokenizer.chat_template().empty()) {
    out.chat_template.emplace(out.tokenizer.chat_template(), (model_dir / "tokenizer_config.json").string() + ": chat_template");
  }
  return out;
}

TextInputs load_text_inputs(const config::TrainingConfig& c, const std::string& trainer,
                            const std::optional<std::string>& chat_template_path) {
  if (!c.model_name_or_path) fail_input("{}: set model_name_or_path (a Hugging Face model directory)", trainer);
  const fs::path dir = *c.model_name_or_path;
  const fs::path tokenizer_dir = tokenizer_dir_of(dir);
  auto out = load_tokenizer_and_template(tokenizer_dir, chat_template_path);
  const fs::path model_dir = model::is_adapter_dir(dir) ? model::adapter_base_dir(dir) : dir;
  check_tokenizer_fits(out.tokenizer, tokenizer_dir, model::load_model_config(model_dir).vocab_size, model_dir);
  return out;
}

text::ChatOptions chat_options(const text::Tokenizer& tok, bool add_generation_prompt) {
  text::ChatOptions o;
  o.add_generation_prompt = add_generation_prompt;
  o.bos_token = tok.bos_token();
  o.eos_token = tok.eos_token();
  o.pad_token = tok.pad_token();
  o.unk_token = tok.unk_token();
  return o;
}

TemplateInputs template_inputs(const nlohmann::ordered_json& row, const nlohmann::ordered_json& config_kwargs) {
  TemplateInputs in;
  if (auto it = row.find("tools"); it != row.end()) in.tools = *it;
  in.variables = config_kwargs.is_object() ? config_kwargs : nlohmann::ordered_json::object();
  if (auto it = row.find("chat_template_kwargs"); it != row.end() && it->is_object())
    for (const auto& [k, v] : it->items()) in.variables[k] = v;
  return in;
}

text::ChatOptions chat_options(const text::Tokenizer& tok, bool add_generation_prompt, const TemplateInputs& inputs) {
  text::ChatOptions o = chat_options(tok, add_generation_prompt);
  if (!inputs.tools.is_null()) o.tools = &inputs.tools;
  if (!inputs.variables.empty()) o.extra = &inputs.variables;
  return o;
}

std::string render_conversation(const text::Tokenizer& tok, const text::ChatTemplate& tmpl,
                                const nlohmann::ordered_json& messages, bool add_generation_prompt,
                                const TemplateInputs& inputs) {
  return text::apply_chat_template(tmpl, messages, chat_options(tok, add_generation_prompt, inputs)).text;
}

std::vector<int64_t> render_conversation_ids(const text::Tokenizer& tok, const text::ChatTemplate& tmpl,
                                             const nlohmann::ordered_json& messages, bool add_generation_prompt,
                                             const TemplateInputs& inputs) {
  return encode_text(tok, render_conversation(tok, tmpl, messages, add_generation_prompt, inputs), false);
}

std::string render_prompt(const text::Tokenizer& tok, const text::ChatTemplate& tmpl,
                          const nlohmann::ordered_json& prompt, const TemplateInputs& inputs) {
  const std::string role =
      prompt.is_array() && !prompt.empty() && prompt.back().is_object() && prompt.back().value("role", "").size()
          ? prompt.back().value("role", "")
          : std::string();
  text::ChatOptions o = chat_options(tok, false, inputs);
  if (role == "user" || role == "tool")
    o.add_generation_prompt = true;
  else if (role == "assistant")
    o.continue_final_message = true;
  else
    fail_input("a conversational prompt must end with a user, tool or assistant message; this one ends with {}",
               role.empty() ? std::string("no role") : "role \"" + role + "\"");
  return text::apply_chat_template(tmpl, prompt, o).text;
}

nlohmann::ordered_json prompt_then(const nlohmann::ordered_json& prompt, const nlohmann::ordered_json& completion) {
  nlohmann::ordered_json all = prompt;
  for (const auto& m : completion) all.push_back(m);
  return all;
}

std::vector<int64_t> encode_text(const text::Tokenizer& tok, const std::string& text, bool add_special_tokens,
                                 std::optional<size_t> limit) {
  if (limit) {
    const auto head = tok.encode_head(text, add_special_tokens, *limit);
    return {head.ids.begin(), head.ids.end()};
  }
  const auto ids = tok.encode_ids(text, add_special_tokens);
  return {ids.begin(), ids.end()};
}

std::string with_eos(std::string text, const std::string& eos) {
  if (text.size() < eos.size() || text.compare(text.size() - eos.size(), eos.size(), eos) != 0) text += eos;
  return text;
}

size_t common_prefix(const std::vector<int64_t>& a, const std::vector<int64_t>& b) {
  size_t n = 0;
  while (n < a.size() && n < b.size() && a[n] == b[n]) ++n;
  return n;
}

DataSource data_source(const config::TrainingConfig& c, std::string trainer) {
  DataSource s;
  s.trainer = std::move(trainer);
  s.dataset_name = c.dataset_name;
  s.skip_bad_rows = c.skip_bad_rows;
  s.row_bytes_limit = row_bytes_limit(c.max_length);
  return s;
}

std::optional<size_t> row_bytes_limit(const std::optional<int64_t>& max_length) {
  if (!max_length) return std::nullopt;
  return std::max<size_t>(size_t{1} << 20, static_cast<size_t>(*max_length) * 1024);
}

namespace {

size_t text_bytes(const nlohmann::ordered_json& v) {
  if (v.is_string()) return v.get_ref<const std::string&>().size();
  size_t n = 0;
  if (v.is_object() || v.is_array())
    for (const auto& x : v) n += text_bytes(x);
  return n;
}

}  // namespace

std::optional<data::Shaped> read_split(data::Task task, const DataSource& source, const std::string& split,
                                       bool required) {
  if (!source.dataset_name)
    fail_input("{}: no dataset: set dataset_name (a JSONL, JSON, Parquet or Arrow file, or a directory)", source.trainer);
  data::LoadOptions lo;
  lo.split = split;
  lo.skip_bad_rows = source.skip_bad_rows;
  lo.text_field = source.text_field;
  data::Shaped shaped;
  try {
    shaped = data::load_for(task, *source.dataset_name, lo);
  } catch (const data::MissingSplitError&) {
    if (!required) return std::nullopt;
    throw;
  }
  if (source.row_bytes_limit) {
    std::vector<data::Row> kept;
    kept.reserve(shaped.rows.size());
    for (auto& row : shaped.rows) {
      const size_t bytes = text_bytes(row.value);
      if (bytes <= *source.row_bytes_limit) {
        kept.push_back(std::move(row));
        continue;
      }
      if (!source.skip_bad_rows)
        fail_input("{}: the row holds {} bytes of text, more than the {} trlx tokenizes for a max_length of tokens "
                   "this short (1 KiB per token, at least 1 MiB); shorten the row, skip it (skip_bad_rows: true) or "
                   "raise max_length",
                   row.where(), bytes, *source.row_bytes_limit);
      ++shaped.skipped;
    }
    shaped.rows = std::move(kept);
  }
  if (shaped.skipped) log::warn("{} split: skipped {} bad row(s) (skip_bad_rows)", split, shaped.skipped);
  if (shaped.prompts_extracted)
    log::info("{} split: {} row(s) had no prompt; took the shared start of chosen and rejected", split,
              shaped.prompts_extracted);
  return shaped;
}

bool is_conversational(const data::Shaped& shaped, const text::ChatTemplate* tmpl, const std::string& trainer,
                    bool template_settable) {
  const bool conv = shaped.form == data::Form::conversational;
  if (conv && !tmpl)
    fail_input("{}: the dataset is conversational but the tokenizer has no chat template{}", trainer,
               template_settable ? "; set chat_template_path" : "");
  return conv;
}

std::string completion_eos(const text::Tokenizer& tok, const std::optional<std::string>& eos_token,
                           const std::string& trainer, bool eos_token_settable, bool conversational) {
  if (eos_token && !tok.token_to_id(*eos_token))
    fail_input("eos_token `{}` is not in the tokenizer's vocabulary", *eos_token);
  if (conversational) return "";
  const std::string eos = eos_token.value_or(tok.eos_token().value_or(""));
  if (eos.empty())
    fail_input("{}: the tokenizer has no eos_token to end completions with{}", trainer,
               eos_token_settable ? "; set eos_token in the config" : "");
  return eos;
}

bool EmptyCompletions::drop(const data::Row& row, std::initializer_list<const char*> columns) {
  for (const char* column : columns) {
    const auto& v = row.value[column];
    const bool empty = (v.is_string() && v.get<std::string>().empty()) || (v.is_array() && v.empty());
    if (!empty) continue;
    if (!skip_)
      fail_input("{}: the {} is empty; {} (or set skip_bad_rows: true to drop such rows)", row.where(),
                 std::string(column) == "completion" ? std::string("completion") : std::string(column) + " completion",
                 why_);
    ++dropped_;
    return true;
  }
  return false;
}

void EmptyCompletions::report(const std::string& split) const {
  if (dropped_) log::warn("{} split: skipped {} row(s) with an empty completion (skip_bad_rows)", split, dropped_);
}

namespace {

int64_t pad_or_eos(const text::Tokenizer& tok, const std::string& trainer, const char* advice) {
  if (auto id = tok.pad_token_id()) return *id;
  if (auto id = tok.eos_token_id()) return *id;
  fail_input("{}: the tokenizer has neither a pad nor an eos token; {}", trainer, advice);
}

}  // namespace

int64_t resolve_pad_id(const text::Tokenizer& tok, const std::optional<std::string>& pad_token, const std::string& trainer) {
  if (pad_token) {
    auto id = tok.token_to_id(*pad_token);
    if (!id) fail_input("pad_token `{}` is not in the tokenizer's vocabulary", *pad_token);
    return *id;
  }
  return pad_or_eos(tok, trainer, "set pad_token");
}

int64_t resolve_pad_id(const text::Tokenizer& tok, const std::string& trainer) {
  return pad_or_eos(tok, trainer, "use a tokenizer that defines one of them");
}

std::vector<fs::path> model_files(const fs::path& dir) {
  std::vector<fs::path> out;
  if (!fs::is_directory(dir)) return out;
  for (const auto& e : fs::directory_iterator(dir)) {
    const auto name = e.path().filename().string();
    if (!e.is_regular_file()) continue;
    if (name == "config.json" || name == "adapter_config.json" || e.path().extension() == ".safetensors")
      out.push_back(e.path());
  }
  std::sort(out.begin(), out.end());
  return out;
}

Reference load_reference(const config::TrainingConfig& c, const engine::LoadedPolicy& policy,
                         const std::optional<std::string>& ref_model, bool precompute, model::HeadKind head) {
  Reference out;
  if (ref_model) {
    out.separate = model::load_language_model(*ref_model, head, c.dtype, /*defer_casts=*/true);
    const int64_t vocab = policy.model->config().vocab_size;
    if (out.separate->config().vocab_size != vocab)
      fail_input("ref_model {} has a vocabulary of {} tokens but the policy {} has {}; the reference must share the "
                 "policy's tokenizer",
                 *ref_model, out.separate->config().vocab_size, c.model_name_or_path.value_or(""), vocab);
    out.files = model_files(*ref_model);
    return out;
  }
  out.files = model_files(policy.base_dir);
  if (policy.lora) {
    // Continuing from an adapter: the adapter as it starts.
    auto adapter = model_files(*c.model_name_or_path);
    out.files.insert(out.files.begin(), adapter.begin(), adapter.end());
    if (precompute) out.is_start_policy = true;
    else out.separate = engine::load_policy(c, head).model;
  } else if (!c.use_peft) {
    // A second copy of the starting model, as TRL loads one; with precomputed
    // log-probs the policy before its first step gives the same numbers
    // without a second copy in memory.
    if (precompute) out.is_start_policy = true;
    else out.separate = model::load_language_model(policy.base_dir, head, c.dtype, /*defer_casts=*/true);
  }
  return out;
}

int train_to_exit_code(engine::Engine& engine, engine::Trainer& trainer) {
  const auto summary = engine.train(trainer);
  if (summary.interrupted) {
    log::error("training stopped at step {} on request; resume with resume_from_checkpoint: latest", summary.steps);
    // The stop is agreed over the ranks, so they leave together.
    dist::stopping_together();
    return 1;
  }
  return 0;
}

void check_tokenizer_fits(const text::Tokenizer& tokenizer, const fs::path& tokenizer_dir, int64_t vocab_size,
                          const fs::path& model_dir) {
  const auto [id, token] = tokenizer.largest_id();
  if (id < vocab_size) return;
  fail_input("{}: token `{}` has id {}, but the model in {} has {} token embeddings (vocab_size in its config.json): "
             "the tokenizer belongs to another model; use the model's own tokenizer files",
             (tokenizer_dir / "tokenizer.json").string(), token, id, model_dir.string(), vocab_size);
}

void check_same_vocabulary(const text::Tokenizer& tokenizer, const fs::path& tokenizer_dir, const fs::path& model_dir,
                           const std::string& field) {
  if (!fs::exists(model_dir / "tokenizer.json")) return;
  std::error_code ec;
  if (fs::equivalent(model_dir, tokenizer_dir, ec)) return;
  const auto theirs = text::Tokenizer::from_dir(model_dir);
  const int32_t ours_last = tokenizer.largest_id().first, theirs_last = theirs.largest_id().first;
  const int32_t last = std::max(ours_last, theirs_last);
  for (int32_t id = 0; id <= last; ++id) {
    const std::string a = tokenizer.id_to_token(id), b = theirs.id_to_token(id);
    if (a == b) continue;
    fail_input("{}: {} maps token id {} to `{}`, but the policy's tokenizer ({}) maps it to `{}`: this model reads "
               "the policy's token ids, so it needs the policy's vocabulary. Use a reward or value model trained "
               "with the policy's tokenizer",
               field, (model_dir / "tokenizer.json").string(), id, b.empty() ? "(no token)" : b,
               (tokenizer_dir / "tokenizer.json").string(), a.empty() ? "(no token)" : a);
  }
}

void add_preference_metrics(engine::MetricSums& m, const torch::Tensor& chosen_rewards,
                            const torch::Tensor& rejected_rewards, const torch::Tensor& chosen_logps,
                            const torch::Tensor& rejected_logps) {
  torch::NoGradGuard ng;
  auto sums = losses::preference_metric_sums(chosen_rewards, rejected_rewards, chosen_logps, rejected_logps);
  const char* names[] = {"rewards/chosen", "rewards/rejected", "rewards/accuracies", "rewards/margins", "logps/chosen",
                         "logps/rejected"};
  for (int i = 0; i < 6; ++i) m.add(names[i], sums[i], sums[6]);
}

}  // namespace trlx::trainers
