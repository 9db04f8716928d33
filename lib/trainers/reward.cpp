// `trlx reward`: a Bradley-Terry reward model on chosen/rejected pairs.
#include "trainers/reward.hpp"

#include <tuple>

#include "core/error.hpp"
#include "core/log.hpp"
#include "engine/engine.hpp"
#include "engine/shared_prefix.hpp"
#include "losses/preference.hpp"
#include "model/decoder.hpp"
#include "text/data/dataset.hpp"
#include "text/tokenizer/parallel.hpp"

namespace trlx::trainers {

RewardSplit prepare_reward_split(const RewardConfig& c, const text::Tokenizer& tok, const text::ChatTemplate* tmpl,
                                 const std::string& split, bool required) {
  const auto read = read_split(data::Task::reward, data_source(c, "reward"), split, required);
  if (!read) return {};
  const data::Shaped& shaped = *read;
  const bool conversational = is_conversational(shaped, tmpl, "reward", true);
  const std::string eos = completion_eos(tok, c.eos_token, "reward", true, conversational);

  RewardSplit out;
  EmptyCompletions empty(c.skip_bad_rows, "a reward pair needs two texts to compare");
  std::string first_long;
  // Tokenized on dataset_num_proc threads; the rows are then taken in order,
  // so the examples, counts and errors are those of one thread.
  using ChosenRejected = std::pair<std::vector<int64_t>, std::vector<int64_t>>;
  text::RowResults<ChosenRejected> tokenized(shaped.rows.size(), static_cast<int>(c.dataset_num_proc.value_or(1)), [&](size_t i) {
    const auto& row = shaped.rows[i].value;
    const bool has_prompt = row.contains("prompt");
    if (conversational) {
      const auto inputs = template_inputs(row);
      auto full = [&](const char* side) {
        return render_conversation_ids(
            tok, *tmpl, prompt_then(has_prompt ? row["prompt"] : nlohmann::ordered_json::array(), row[side]), false,
            inputs);
      };
      return ChosenRejected{full("chosen"), full("rejected")};
    }
    const std::string prompt = has_prompt ? row["prompt"].get<std::string>() : "";
    auto ids = [&](const char* side) { return encode_text(tok, prompt + with_eos(row[side].get<std::string>(), eos), true); };
    return ChosenRejected{ids("chosen"), ids("rejected")};
  });
  for (size_t i = 0; i < shaped.rows.size(); ++i) {
    const auto& row = shaped.rows[i].value;
    if (empty.drop(shaped.rows[i], {"chosen", "rejected"})) continue;
    RewardExample ex;
    ex.source_row = i;
    std::tie(ex.chosen_ids, ex.rejected_ids) = std::move(tokenized.get(i, shaped.rows[i].where()));
    if (shaped.has_margin) ex.margin = row["margin"].get<double>();
    if (c.max_length && (ex.chosen_ids.size() > static_cast<size_t>(*c.max_length) ||
                         ex.rejected_ids.size() > static_cast<size_t>(*c.max_length))) {
      ++out.dropped_long;
      if (first_long.empty()) first_long = shaped.rows[i].where();
      continue;
    }
    out.examples.push_back(std::move(ex));
  }
  empty.report(split);
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
  // Each pair's shared start (its prompt) once. Only the score at each row's
  // last token is read (the rightmost that is not the pad id, as
  // pool_last_non_pad finds it).
  engine::ShareOptions share;
  for (int64_t r = 0; r < 2 * b; ++r) {
    int64_t last = 0;
    for (int64_t j = t - 1; j >= 0; --j)
      if (pi[r * t + j] != pad_id_) {
        last = j;
        break;
      }
    share.wanted_from.push_back(last);
  }
  for (auto& [k, v] : engine::share_prefixes(ids, attn, engine::pair_groups(b), pad_id_, share)) out[k] = v;
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
  auto hidden = engine::forward_rows(engine, engine::Role::Policy, batch);
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
  // of all ranks, as TRL takes them over the gathered batch (the engine
  // takes the extreme over ranks at a logging step). Device values: no host
  // synchronisation per micro-batch.
  const auto f64 = [](const torch::Tensor& t) { return t.detach().to(torch::kFloat64); };
  lo.metrics.add("accuracy", f64(out.accuracy), 1.0);
  lo.metrics.add("margin", f64(out.margin), 1.0);
  lo.metrics.add_entry("min_reward", f64(out.min_reward), engine::EntryReduce::Min);
  lo.metrics.add("mean_reward", f64(out.mean_reward), 1.0);
  lo.metrics.add_entry("max_reward", f64(out.max_reward), engine::EntryReduce::Max);
  return lo;
}

int run_reward(const RewardConfig& c) {
  auto [tok, tmpl] = load_text_inputs(c, "reward", c.chat_template_path);
  auto policy = engine::load_policy(c, model::HeadKind::SequenceClassification);
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
  return train_to_exit_code(engine, trainer);
}

}  // namespace trlx::trainers
