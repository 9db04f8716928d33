#include "trainers/reward.hpp"

#include <limits>
#include <fstream>
#include <sstream>

#include "core/error.hpp"
#include "core/log.hpp"
#include "losses/preference.hpp"
#include "model/decoder.hpp"
#include "text/data/dataset.hpp"

namespace trlx::trainers {

std::pair<text::Tokenizer, std::optional<text::ChatTemplate>> load_tokenizer_and_template(
    const std::filesystem::path& model_dir, const std::optional<std::string>& chat_template_path) {
  auto tok = text::Tokenizer::from_dir(model_dir);
  std::optional<text::ChatTemplate> tmpl;
  if (chat_template_path) {
    const std::filesystem::path p = *chat_template_path;
    if (std::filesystem::is_directory(p)) {
      auto other = text::Tokenizer::from_dir(p);
      if (other.chat_template().empty()) fail_input("chat_template_path {} has no chat_template", p.string());
      tmpl.emplace(other.chat_template(), (p / "tokenizer_config.json").string() + ": chat_template");
    } else {
      std::ifstream in(p);
      if (!in) fail_input("chat_template_path {} cannot be read", p.string());
      std::stringstream ss;
      ss << in.rdbuf();
      tmpl.emplace(ss.str(), p.string());
    }
  } else if (!tok.chat_template().empty()) {
    tmpl.emplace(tok.chat_template(), (model_dir / "tokenizer_config.json").string() + ": chat_template");
  }
  return {std::move(tok), std::move(tmpl)};
}

std::vector<int64_t> render_conversation_ids(const text::Tokenizer& tok, const text::ChatTemplate& tmpl,
                                             const nlohmann::ordered_json& messages, bool add_generation_prompt) {
  text::ChatOptions o;
  o.add_generation_prompt = add_generation_prompt;
  o.bos_token = tok.bos_token();
  o.eos_token = tok.eos_token();
  o.pad_token = tok.pad_token();
  o.unk_token = tok.unk_token();
  const auto ids = tok.encode_ids(text::apply_chat_template(tmpl, messages, o).text, false);
  return {ids.begin(), ids.end()};
}

int64_t resolve_pad_id(const text::Tokenizer& tok, const std::optional<std::string>& pad_token, const std::string& trainer) {
  if (pad_token) {
    auto id = tok.token_to_id(*pad_token);
    if (!id) fail_input("pad_token `{}` is not in the tokenizer's vocabulary", *pad_token);
    return *id;
  }
  if (auto id = tok.pad_token_id()) return *id;
  if (auto id = tok.eos_token_id()) return *id;
  fail_input("{}: the tokenizer has neither a pad nor an eos token; set pad_token", trainer);
}

namespace {

bool is_empty_text(const data::Value& v) { return (v.is_string() && v.get<std::string>().empty()) || (v.is_array() && v.empty()); }

std::string with_eos(std::string s, const std::string& eos) {
  if (s.size() < eos.size() || s.compare(s.size() - eos.size(), eos.size(), eos) != 0) s += eos;
  return s;
}

}  // namespace

RewardSplit prepare_reward_split(const RewardConfig& c, const text::Tokenizer& tok, const text::ChatTemplate* tmpl,
                                 const std::string& split, bool required) {
  if (!c.dataset_name) fail_input("reward: no dataset: set dataset_name (a JSONL/JSON file or a directory)");
  data::LoadOptions lo;
  lo.split = split;
  lo.skip_bad_rows = c.skip_bad_rows;
  data::Shaped shaped;
  try {
    shaped = data::load_for(data::Task::reward, *c.dataset_name, lo);
  } catch (const InputError& e) {
    if (!required && std::string(e.what()).find("split") != std::string::npos) return {};
    throw;
  }
  if (shaped.skipped) log::warn("{} split: skipped {} bad row(s) (skip_bad_rows)", split, shaped.skipped);
  const bool conversational = shaped.form == data::Form::conversational;
  if (conversational && !tmpl)
    fail_input("the dataset is conversational but the tokenizer has no chat template; set chat_template_path");
  const std::string eos = c.eos_token.value_or(tok.eos_token().value_or(""));
  if (c.eos_token && !tok.token_to_id(*c.eos_token))
    fail_input("eos_token `{}` is not in the tokenizer's vocabulary", *c.eos_token);
  if (!conversational && eos.empty()) fail_input("reward: the tokenizer has no eos_token; set eos_token in the config");

  RewardSplit out;
  size_t empty = 0;
  std::string first_long;
  for (size_t i = 0; i < shaped.rows.size(); ++i) {
    const auto& row = shaped.rows[i].value;
    for (const char* side : {"chosen", "rejected"})
      if (is_empty_text(row[side])) {
        if (!c.skip_bad_rows)
          fail_input("{}: `{}` is empty: a reward pair needs two texts to compare (set skip_bad_rows: true to drop such "
                     "rows)",
                     shaped.rows[i].where(), side);
      }
    if (is_empty_text(row["chosen"]) || is_empty_text(row["rejected"])) {
      ++empty;
      continue;
    }
    RewardExample ex;
    ex.source_row = i;
    const bool has_prompt = row.contains("prompt");
    if (conversational) {
      auto full = [&](const char* side) {
        nlohmann::ordered_json all = has_prompt ? row["prompt"] : nlohmann::ordered_json::array();
        for (const auto& m : row[side]) all.push_back(m);
        return render_conversation_ids(tok, *tmpl, all, false);
      };
      ex.chosen_ids = full("chosen");
      ex.rejected_ids = full("rejected");
    } else {
      const std::string prompt = has_prompt ? row["prompt"].get<std::string>() : "";
      auto ids = [&](const char* side) {
        const auto v = tok.encode_ids(prompt + with_eos(row[side].get<std::string>(), eos), true);
        return std::vector<int64_t>(v.begin(), v.end());
      };
      ex.chosen_ids = ids("chosen");
      ex.rejected_ids = ids("rejected");
    }
    if (shaped.has_margin) ex.margin = row["margin"].get<double>();
    if (c.max_length && (ex.chosen_ids.size() > static_cast<size_t>(*c.max_length) ||
                         ex.rejected_ids.size() > static_cast<size_t>(*c.max_length))) {
      ++out.dropped_long;
      if (first_long.empty()) first_long = shaped.rows[i].where();
      continue;
    }
    out.examples.push_back(std::move(ex));
  }
  if (empty) log::warn("{} split: dropped {} pair(s) with an empty chosen or rejected text (skip_bad_rows)", split, empty);
  if (out.dropped_long) {
    if (out.examples.empty())
      fail_input("{} split: every pair has a chosen or rejected sequence longer than max_length {} (e.g. {}); raise "
                 "max_length",
                 split, *c.max_length, first_long);
    log::warn("{} split: dropped {} of {} pair(s) whose chosen or rejected sequence is longer than max_length {}, e.g. {}",
              split, out.dropped_long, shaped.rows.size(), *c.max_length, first_long);
  }
  if (required && out.examples.empty()) fail_input("{} split: no pairs to train on", split);
  return out;
}

RewardTrainer::RewardTrainer(const RewardConfig& config, std::map<std::string, std::vector<RewardExample>> splits,
                             int64_t pad_id)
    : config_(config), splits_(std::move(splits)), pad_id_(pad_id) {}

size_t RewardTrainer::num_examples(const std::string& split) const {
  auto it = splits_.find(split);
  return it == splits_.end() ? 0 : it->second.size();
}

engine::TensorMap RewardTrainer::collate(const std::string& split, const std::vector<size_t>& indices) const {
  const auto& ex = splits_.at(split);
  const int64_t b = static_cast<int64_t>(indices.size());
  size_t width = 1;
  for (size_t i : indices) width = std::max({width, ex[i].chosen_ids.size(), ex[i].rejected_ids.size()});
  const int64_t t = static_cast<int64_t>(width);
  auto ids = torch::full({2 * b, t}, pad_id_, torch::kInt64);
  auto attn = torch::zeros({2 * b, t}, torch::kInt64);
  auto* pi = ids.data_ptr<int64_t>();
  auto* pa = attn.data_ptr<int64_t>();
  auto put = [&](int64_t row, const std::vector<int64_t>& seq) {
    for (size_t j = 0; j < seq.size(); ++j) {
      pi[row * t + static_cast<int64_t>(j)] = seq[j];
      pa[row * t + static_cast<int64_t>(j)] = 1;
    }
  };
  for (int64_t r = 0; r < b; ++r) {
    const auto& e = ex[indices[static_cast<size_t>(r)]];
    put(r, e.chosen_ids);
    put(b + r, e.rejected_ids);
  }
  engine::TensorMap out = {{"input_ids", ids}, {"attention_mask", attn}};
  if (ex[indices.front()].margin) {
    std::vector<float> m;
    for (size_t i : indices) m.push_back(static_cast<float>(ex[i].margin.value_or(0)));
    out["margin"] = torch::tensor(m, torch::kFloat32);
  }
  return out;
}

double RewardTrainer::num_items(const engine::TensorMap& batch) const {
  return static_cast<double>(batch.at("input_ids").size(0) / 2);
}

torch::Tensor RewardTrainer::rewards(engine::Engine& engine, const engine::TensorMap& batch) const {
  const auto& ids = batch.at("input_ids");
  auto hidden = engine.forward(engine::Role::Policy, {ids, batch.at("attention_mask"), {}, {}});
  // The score at each row's last non-pad token, as transformers'
  // *ForSequenceClassification reads it.
  auto scores = model::pool_last_non_pad(engine.head(engine::Role::Policy, hidden), ids.to(hidden.device()), pad_id_);
  return scores.squeeze(-1).to(torch::kFloat32);
}

engine::LossOutput RewardTrainer::loss(engine::Engine& engine, const engine::TensorMap& batch) {
  auto r = rewards(engine, batch);
  const int64_t b = r.size(0) / 2;
  losses::RewardInputs in;
  in.chosen_rewards = r.slice(0, 0, b);
  in.rejected_rewards = r.slice(0, b);
  if (batch.count("margin")) in.margin = batch.at("margin").to(r.device());
  losses::RewardLossOptions o;
  o.center_rewards_coefficient = config_.center_rewards_coefficient;
  auto out = losses::reward_loss(in, o);
  engine::LossOutput lo;
  // reward_loss is the micro-batch mean; the engine wants the sum over pairs.
  lo.loss_sum = out.loss * static_cast<double>(b);
  // TRL logs each micro-batch's values and averages them over the logging
  // window, so each micro-batch counts once. min/max are over the rewards
  // of all ranks, as TRL takes them over the gathered batch: every rank
  // adds the same global value (a stand-in adds nothing to it).
  const double none = -std::numeric_limits<double>::infinity();
  std::vector<double> extremes = {engine.standing_in() ? none : out.max_reward.item<double>(),
                                  engine.standing_in() ? none : -out.min_reward.item<double>()};
  engine.max_across_ranks(extremes);
  lo.metrics.add("accuracy", out.accuracy.item<double>(), 1);
  lo.metrics.add("margin", out.margin.item<double>(), 1);
  lo.metrics.add("min_reward", -extremes[1], 1);
  lo.metrics.add("mean_reward", out.mean_reward.item<double>(), 1);
  lo.metrics.add("max_reward", extremes[0], 1);
  return lo;
}

int run_reward(const RunRequest& request) {
  const auto& c = *static_cast<const RewardConfig*>(request.config);
  if (!c.model_name_or_path) fail_input("reward: set model_name_or_path (a Hugging Face model directory)");
  auto policy = engine::load_policy(c, model::HeadKind::SequenceClassification);
  auto [tok, tmpl] = load_tokenizer_and_template(policy.tokenizer_dir, c.chat_template_path);
  if (policy.model->config().num_labels != 1)
    fail_input("{}: the model has num_labels {}; a reward model outputs one score per sequence (num_labels 1)",
               *c.model_name_or_path, policy.model->config().num_labels);
  const int64_t pad = resolve_pad_id(tok, c.pad_token, "reward");
  if (policy.model->config().pad_token_id && *policy.model->config().pad_token_id != pad)
    log::warn("reward: padding with id {} but the model's config.json says pad_token_id {}; the saved model will read "
              "its score at the last token that is not {}",
              pad, *policy.model->config().pad_token_id, *policy.model->config().pad_token_id);
  std::map<std::string, std::vector<RewardExample>> splits;
  splits["train"] = prepare_reward_split(c, tok, tmpl ? &*tmpl : nullptr, c.dataset_train_split, true).examples;
  if (c.eval_strategy != "no")
    splits["test"] = prepare_reward_split(c, tok, tmpl ? &*tmpl : nullptr, c.dataset_test_split, true).examples;
  engine::Engine engine(c, std::move(policy), "reward");
  RewardTrainer trainer(c, std::move(splits), pad);
  auto summary = engine.train(trainer);
  if (summary.interrupted) {
    log::error("training stopped at step {} on request; resume with resume_from_checkpoint: latest", summary.steps);
    return 1;
  }
  return 0;
}

}  // namespace trlx::trainers
