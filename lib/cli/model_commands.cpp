// `trlx init-model` (a new random model in Hugging Face format) and
// `trlx generate` (look at what a checkpoint says).
#include <unistd.h>

#include <CLI/CLI.hpp>
#include <chrono>
#include <fstream>
#include <iostream>

#include <nlohmann/json.hpp>

#include "cli/cli.hpp"
#include "cli/jsonl.hpp"
#include "cli/parse.hpp"
#include "core/error.hpp"
#include "config/loader.hpp"
#include "core/log.hpp"
#include "losses/logprobs.hpp"
#include "trainers/common.hpp"
#include "trainers/sft.hpp"
#include "model/adapter_dir.hpp"
#include "model/generate.hpp"
#include "model/lora.hpp"
#include "model/loading.hpp"
#include "model/saving.hpp"
#include "text/template/chat_template.hpp"
#include "text/tokenizer/tokenizer.hpp"

namespace trlx::cli {

namespace {

// What generate and score run: a model directory, or a LoRA adapter
// directory on its base, the adapter folded in (what `trlx merge-lora`
// writes). tokenizer_dir: the adapter's own tokenizer files, else the base's.
struct InferenceModel {
  model::LanguageModel model{nullptr};
  std::string tokenizer_dir;
  std::string base_dir;
};

std::string base_of(const std::string& dir) {
  return model::is_adapter_dir(dir) ? model::adapter_base_dir(dir).string() : dir;
}

std::string tokenizer_dir_of(const std::string& dir) {
  if (!model::is_adapter_dir(dir) || std::filesystem::exists(std::filesystem::path(dir) / "tokenizer.json")) return dir;
  return base_of(dir);
}

InferenceModel load_for_inference(const std::string& dir, model::HeadKind head, const std::string& dtype) {
  InferenceModel out;
  out.base_dir = base_of(dir);
  out.tokenizer_dir = tokenizer_dir_of(dir);
  out.model = model::load_language_model(out.base_dir, head, dtype);
  if (out.base_dir != dir) {
    model::load_adapter(dir, *out.model);
    model::merge_lora(*out.model);
    log::info("{}: a LoRA adapter on {}, folded in", dir, out.base_dir);
  }
  return out;
}

}  // namespace

int run_init_model(std::vector<std::string> args) {
  CLI::App app("Write a new model with random weights in Hugging Face format (for tests and quickstarts)",
               "trlx init-model");
  model::NewModelSpec spec;
  std::string tokenizer_dir, out_dir, dtype = "float32", head = "lm";
  uint64_t seed = 0;
  int64_t num_labels = 1;
  app.add_option("--arch", spec.arch, "llama, mistral, qwen2, qwen3, qwen3_moe, mixtral, gpt_oss or deepseek_v3")->capture_default_str();
  app.add_option("--num_experts", spec.num_experts, "Experts per layer (qwen3_moe, mixtral, gpt_oss, deepseek_v3)")->capture_default_str();
  app.add_option("--num_experts_per_tok", spec.num_experts_per_tok, "Experts each token is routed to")
      ->capture_default_str();
  app.add_option("--moe_intermediate_size", spec.moe_intermediate_size,
                 "Width of each expert (default intermediate_size)");
  app.add_option("--hidden_size", spec.hidden_size, "Hidden size")->capture_default_str();
  app.add_option("--intermediate_size", spec.intermediate_size, "MLP size (default 4 x hidden_size)");
  app.add_option("--num_layers", spec.num_layers, "Decoder layers")->capture_default_str();
  app.add_option("--num_heads", spec.num_heads, "Attention heads")->capture_default_str();
  app.add_option("--num_kv_heads", spec.num_kv_heads, "Key/value heads (default num_heads)");
  app.add_option("--head_dim", spec.head_dim, "Head size (default hidden_size / num_heads)");
  app.add_option("--vocab_size", spec.vocab_size, "Vocabulary size (default: the tokenizer's)");
  app.add_option("--max_position_embeddings", spec.max_position_embeddings, "Longest sequence")->capture_default_str();
  app.add_flag("--tie_word_embeddings", spec.tie_word_embeddings, "Share the embedding and LM head");
  app.add_option("--tokenizer", tokenizer_dir, "Tokenizer directory: sets the vocabulary and special tokens, files copied");
  app.add_option("--head", head, "lm (causal LM) or score (reward/value model)")->capture_default_str();
  app.add_option("--num_labels", num_labels, "Rows of the score head")->capture_default_str();
  app.add_option("--dtype", dtype, "float32, bfloat16 or float16")->capture_default_str();
  app.add_option("--seed", seed, "Seed of the random weights")->capture_default_str();
  app.add_option("--out", out_dir, "Output directory")->required();
  if (auto rc = parse_args(app, args)) return *rc;
  if (head != "lm" && head != "score") fail_input("--head must be lm or score, found `{}`", head);
  if (!tokenizer_dir.empty()) {
    auto tok = text::Tokenizer::from_dir(tokenizer_dir);
    if (spec.vocab_size <= 0) spec.vocab_size = static_cast<int64_t>(tok.vocab_size());
    else if (spec.vocab_size < static_cast<int64_t>(tok.vocab_size()))
      fail_input("--vocab_size {} is smaller than the tokenizer's {} tokens", spec.vocab_size, tok.vocab_size());
    if (auto id = tok.bos_token_id()) spec.bos_token_id = *id;
    if (auto id = tok.eos_token_id()) spec.eos_token_ids = {*id};
    if (auto id = tok.pad_token_id()) spec.pad_token_id = *id;
    else if (auto eos = tok.eos_token_id()) spec.pad_token_id = *eos;
  }
  auto config = model::new_model_config(spec);
  config.num_labels = num_labels;
  const auto kind = head == "lm" ? model::HeadKind::CausalLM : model::HeadKind::SequenceClassification;
  model::LanguageModel m(config, kind);
  model::init_weights(*m, seed);
  m->to(model::parse_dtype(dtype, config));
  model::SaveModelOptions so;
  if (!tokenizer_dir.empty()) so.tokenizer_dir = tokenizer_dir;
  model::save_language_model(out_dir, *m, so);
  int64_t params = 0;
  for (const auto& p : m->parameters()) params += p.numel();
  std::cout << fmt::format("wrote {} ({} {} model, {:.2f}M parameters, {} layers, hidden {}, vocab {})\n", out_dir,
                           spec.arch, head == "lm" ? "causal LM" : "score", static_cast<double>(params) / 1e6,
                           config.num_hidden_layers, config.hidden_size, config.vocab_size);
  return 0;
}

int run_generate(std::vector<std::string> args) {
  CLI::App app("Generate from a model: greedy or sampled, with the model's chat template on request", "trlx generate");
  std::string model_dir, prompts_file, dtype = "float32", field = "prompt";
  std::vector<std::string> prompts, stops;
  bool chat = false, json_out = false;
  model::GenerationOptions o;
  o.max_new_tokens = 64;
  app.add_option("--model", model_dir, "Model directory (Hugging Face format, with tokenizer files)")->required();
  app.add_option("--prompt", prompts, "A prompt (repeat for a batch)");
  app.add_option("--prompts", prompts_file, "JSONL file of prompts (strings, or message lists with --chat)");
  app.add_option("--field", field, "Column of --prompts holding the prompt")->capture_default_str();
  std::string ids_file;
  app.add_option("--prompt_ids", ids_file, "JSONL file of prompts as token ids (an `ids` list per line)");
  bool ignore_eos = false;
  app.add_flag("--ignore_eos", ignore_eos, "Do not stop at eos (every completion runs to max_new_tokens)");
  app.add_flag("--chat", chat, "Render each prompt as a user turn (or message list) through the chat template");
  app.add_option("--max_new_tokens", o.max_new_tokens, "Most tokens to generate")->capture_default_str();
  app.add_flag("--do_sample", o.do_sample, "Sample instead of greedy decoding");
  app.add_option("--temperature", o.temperature, "Sampling temperature")->capture_default_str();
  app.add_option("--top_k", o.top_k, "Keep the k most likely tokens (0: off)")->capture_default_str();
  app.add_option("--top_p", o.top_p, "Nucleus mass (1: off)")->capture_default_str();
  double min_p = 0;
  app.add_option("--min_p", min_p, "Drop tokens below min_p x the top probability (0: off)");
  app.add_option("--repetition_penalty", o.repetition_penalty, "Penalty on tokens already present")->capture_default_str();
  app.add_option("--stop", stops, "Stop a completion when this text appears (repeatable)");
  app.add_option("--stop_token_ids", o.stop_token_ids, "Token ids that end a completion (repeatable)");
  app.add_option("--num_return_sequences", o.num_return_sequences, "Completions per prompt (sharing its prefill)")
      ->capture_default_str();
  app.add_option("--batch_size", o.max_batch,
                 "Completions generated at once; a finished one's slot takes the next prompt (0: all at once)")
      ->capture_default_str();
  app.add_option("--seed", o.seed, "Sampling seed")->capture_default_str();
  app.add_option("--dtype", dtype, "float32, bfloat16, float16 or auto")->capture_default_str();
  app.add_flag("--json", json_out, "One JSON object per prompt");
  if (auto rc = parse_args(app, args)) return *rc;
  if (min_p > 0) o.min_p = min_p;

  auto loaded = load_for_inference(model_dir, model::HeadKind::CausalLM, dtype);
  auto& m = loaded.model;
  auto tok = text::Tokenizer::from_dir(loaded.tokenizer_dir);
  trainers::check_tokenizer_fits(tok, loaded.tokenizer_dir, m->config().vocab_size, loaded.base_dir);
  std::vector<nlohmann::ordered_json> inputs;
  for (const auto& p : prompts) inputs.emplace_back(p);
  if (!prompts_file.empty())
    for_each_jsonl(prompts_file, "--prompts", [&](size_t n, const nlohmann::ordered_json& row) {
      if (row.is_string()) inputs.push_back(row);
      else if (row.is_object() && row.contains(field)) inputs.push_back(row[field]);
      else fail_input("{}:{}: expected a string or an object with `{}`", prompts_file, n, field);
    });
  std::vector<std::vector<int64_t>> batch;
  std::vector<std::string> shown;
  if (!ids_file.empty())
    for_each_jsonl(ids_file, "--prompt_ids", [&](size_t n, const nlohmann::ordered_json& row) {
      try {
        batch.push_back(row.at("ids").get<std::vector<int64_t>>());
      } catch (const nlohmann::json::exception& e) {
        fail_input("{}:{}: expected an object with `ids`, a list of token ids: {}", ids_file, n, e.what());
      }
      shown.push_back(tok.decode(std::vector<int32_t>(batch.back().begin(), batch.back().end()), false));
    });
  if (inputs.empty() && batch.empty()) fail_input("no prompt: give --prompt TEXT, --prompts FILE or --prompt_ids FILE");

  std::optional<text::ChatTemplate> tmpl;
  if (chat) {
    if (tok.chat_template().empty()) fail_input("{}: the tokenizer has no chat_template; drop --chat", model_dir);
    tmpl.emplace(tok.chat_template(), loaded.tokenizer_dir + "/tokenizer_config.json: chat_template");
  }
  for (const auto& in : inputs) {
    std::string text;
    bool special = true;
    if (tmpl) {
      nlohmann::ordered_json messages = in.is_array() ? in : nlohmann::ordered_json::array({{{"role", "user"}, {"content", in}}});
      text = trainers::render_conversation(tok, *tmpl, messages, true, trainers::TemplateInputs{});
      special = false;  // the template writes the special tokens itself
    } else {
      if (!in.is_string()) fail_input("a message list needs --chat");
      text = in.get<std::string>();
    }
    auto ids = tok.encode_ids(text, special);
    batch.emplace_back(ids.begin(), ids.end());
    shown.push_back(text);
  }
  if (auto eos = tok.eos_token_id()) o.eos_token_ids = {*eos};
  for (auto e : m->config().eos_token_ids)
    if (std::find(o.eos_token_ids.begin(), o.eos_token_ids.end(), e) == o.eos_token_ids.end()) o.eos_token_ids.push_back(e);
  if (ignore_eos) o.eos_token_ids.clear();
  o.pad_token_id = tok.pad_token_id().value_or(o.eos_token_ids.empty() ? 0 : static_cast<int32_t>(o.eos_token_ids[0]));
  if (!stops.empty()) {
    o.stop = model::stop_on_strings(stops, [&tok](const std::vector<int64_t>& c) {
      return tok.decode(std::vector<int32_t>(c.begin(), c.end()), true);
    });
  }
  if (o.max_context == 0) o.max_context = m->config().max_position_embeddings;
  const auto start = std::chrono::steady_clock::now();
  auto last_report = start;
  const int64_t rows = static_cast<int64_t>(batch.size()) * o.num_return_sequences;
  // Progress on stderr every few seconds, so long runs show they move.
  o.progress = [&](int64_t tokens, int64_t done, int64_t total) {
    const auto now = std::chrono::steady_clock::now();
    if (std::chrono::duration<double>(now - last_report).count() < 5.0) return;
    last_report = now;
    const double secs = std::chrono::duration<double>(now - start).count();
    log::info("generate: {}/{} completions done, {} tokens, {:.1f} tokens/s", done, total, tokens,
              static_cast<double>(tokens) / secs);
  };
  auto g = model::generate(*m, batch, o);
  const double secs = std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
  size_t total = 0;
  for (int64_t row = 0; row < rows; ++row) {
    const auto r = static_cast<size_t>(row);
    const size_t i = r / static_cast<size_t>(o.num_return_sequences);
    const auto& c = g.completions[r];
    total += c.size();
    const std::string completion = tok.decode(std::vector<int32_t>(c.begin(), c.end()), true);
    if (json_out) {
      nlohmann::ordered_json j = {{"prompt", shown[i]},
                                  {"completion", completion},
                                  {"prompt_ids", batch[i]},
                                  {"completion_ids", c},
                                  {"finish_reason", model::finish_reason_name(g.finish[r])}};
      if (o.num_return_sequences > 1) j["sample"] = row % o.num_return_sequences;
      std::cout << j.dump() << "\n";
    } else {
      // The completion in bold on a terminal, so it stands apart from the prompt.
      const bool tty = isatty(STDOUT_FILENO);
      std::cout << shown[i] << (tty ? "\033[1m" : "") << completion << (tty ? "\033[0m" : "") << "\n";
      if (row + 1 < rows) std::cout << "---\n";
    }
  }
  log::info("generated {} tokens for {} completion(s) in {:.2f} s ({:.1f} tokens/s)", total, rows, secs,
            secs > 0 ? static_cast<double>(total) / secs : 0.0);
  return 0;
}

}  // namespace trlx::cli

namespace trlx::cli {

int run_score(std::vector<std::string> args) {
  CLI::App app("Score rows with a model: log-probs of completions under a causal LM, or rewards from a "
               "sequence-classification model",
               "trlx score");
  std::string model_dir, input, dtype = "float32";
  int64_t batch_size = 8;
  bool tokens = false;
  app.add_option("--model", model_dir, "Model directory (Hugging Face format, with tokenizer files)")->required();
  app.add_option("--input", input, "JSONL: prompt+completion, text or messages per row")->required();
  app.add_option("--batch_size", batch_size, "Rows per forward")->capture_default_str();
  app.add_flag("--tokens", tokens, "Also print each target token's log-prob (causal LMs)");
  app.add_option("--dtype", dtype, "float32, bfloat16, float16 or auto")->capture_default_str();
  app.add_flag("--json", [](int64_t) {}, "Output is always one JSON object per row (accepted for symmetry)");
  if (auto rc = parse_args(app, args)) return *rc;
  if (batch_size < 1) fail_input("--batch_size must be at least 1");

  const auto config = model::load_model_config(base_of(model_dir));
  bool reward = false;
  for (const auto& a : config.architectures) reward = reward || a.find("ForSequenceClassification") != std::string::npos;
  // A reward model's adapter carries its score head (task_type SEQ_CLS).
  if (model::is_adapter_dir(model_dir)) reward = reward || model::adapter_task_type(model_dir) == "SEQ_CLS";
  auto [tok, tmpl] = trainers::load_tokenizer_and_template(tokenizer_dir_of(model_dir), std::nullopt);
  // The rows go through the SFT trainer's own preparation, so the scored
  // tokens are exactly those SFT trains on (completion only for
  // prompt-completion rows, eos appended).
  trainers::SFTConfig c;
  {
    config::ConfigLoader loader(trainers::sft_schema());
    loader.apply_flag("dataset_name", {input});
    loader.apply_flag("max_length", {"null"});
    loader.resolve(&c);
  }
  std::vector<trainers::SFTExample> rows = trainers::prepare_sft_split(c, tok, tmpl ? &*tmpl : nullptr, "train", true);
  const auto head = reward ? model::HeadKind::SequenceClassification : model::HeadKind::CausalLM;
  auto loaded = load_for_inference(model_dir, head, dtype);
  auto& m = loaded.model;
  trainers::check_tokenizer_fits(tok, loaded.tokenizer_dir, m->config().vocab_size, loaded.base_dir);
  const int64_t pad = tok.pad_token_id().value_or(tok.eos_token_id().value_or(0));
  torch::NoGradGuard no_grad;
  for (size_t start = 0; start < rows.size(); start += static_cast<size_t>(batch_size)) {
    const size_t end = std::min(rows.size(), start + static_cast<size_t>(batch_size));
    size_t width = 1;
    for (size_t i = start; i < end; ++i) width = std::max(width, rows[i].ids.size());
    const int64_t b = static_cast<int64_t>(end - start), t = static_cast<int64_t>(width);
    auto ids = torch::full({b, t}, pad, torch::kInt64);
    auto attn = torch::zeros({b, t}, torch::kInt64);
    auto mask = torch::zeros({b, t}, torch::kInt64);
    for (size_t i = start; i < end; ++i) {
      const auto& r = rows[i];
      const auto n = static_cast<int64_t>(r.ids.size());
      const int64_t row = static_cast<int64_t>(i - start);
      ids[row].narrow(0, 0, n).copy_(torch::tensor(r.ids, torch::kInt64));
      attn[row].narrow(0, 0, n).fill_(1);
      mask[row].narrow(0, 0, n).copy_(torch::tensor(std::vector<int64_t>(r.loss_mask.begin(), r.loss_mask.end()), torch::kInt64));
    }
    model::Batch in{ids, attn, {}};
    in.padding_trails = true;  // right-padded rows: causal attention, no mask
    auto hidden = m->hidden_states(in);
    if (reward) {
      // The last real token of each (right-padded) row.
      auto last = attn.sum(1) - 1;
      auto scores = m->head(hidden).index({torch::arange(b), last}).to(torch::kFloat32).contiguous();
      for (int64_t row = 0; row < b; ++row) {
        nlohmann::ordered_json j = {{"row", rows[start + static_cast<size_t>(row)].source_row}};
        if (scores.size(1) == 1) j["reward"] = scores[row][0].item<double>();
        else j["scores"] = std::vector<double>(scores[row].data_ptr<float>(), scores[row].data_ptr<float>() + scores.size(1));
        std::cout << j.dump() << "\n";
      }
      continue;
    }
    losses::LogProbOptions lo;
    lo.logit_softcap = m->config().final_logit_softcapping.value_or(0.0);
    auto lp = losses::token_logprobs(hidden.slice(1, 0, t - 1), m->head_weight(), ids.slice(1, 1), mask.slice(1, 1), lo);
    auto logps = lp.logps.to(torch::kFloat64);
    for (int64_t row = 0; row < b; ++row) {
      const auto& r = rows[start + static_cast<size_t>(row)];
      const double n = mask[row].slice(0, 1).sum().item<double>();
      const double sum = logps[row].sum().item<double>();
      nlohmann::ordered_json j = {{"row", r.source_row}, {"sum_logprob", sum}, {"mean_logprob", n > 0 ? sum / n : 0.0},
                                  {"num_tokens", static_cast<int64_t>(n)}};
      if (tokens) {
        nlohmann::ordered_json per = nlohmann::ordered_json::array();
        for (int64_t k = 1; k < static_cast<int64_t>(r.ids.size()); ++k)
          if (r.loss_mask[static_cast<size_t>(k)])
            per.push_back({{"id", r.ids[static_cast<size_t>(k)]}, {"token", tok.id_to_token(static_cast<int32_t>(r.ids[static_cast<size_t>(k)]))},
                           {"logprob", logps[row][k - 1].item<double>()}});
        j["tokens"] = per;
      }
      std::cout << j.dump() << "\n";
    }
  }
  return 0;
}

}  // namespace trlx::cli
