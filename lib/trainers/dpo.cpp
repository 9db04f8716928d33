// `trlx dpo`: its data preparation, its reference log-probs and the call to the preference loss.
#include "trainers/dpo.hpp"

#include <algorithm>
#include <fstream>

#include <fmt/format.h>
#include <nlohmann/json.hpp>

#include "core/error.hpp"
#include "core/log.hpp"
#include "engine/engine.hpp"
#include "engine/reference_cache.hpp"
#include "engine/shared_prefix.hpp"
#include "losses/preference.hpp"
#include "model/loading.hpp"
#include "text/data/dataset.hpp"
#include "text/template/chat_template.hpp"
#include "text/tokenizer/parallel.hpp"
#include "text/tokenizer/tokenizer.hpp"

namespace trlx::trainers {

namespace fs = std::filesystem;

namespace {

// Per-sequence sums of per-token log-probs [2B, T]; with ld_alpha, split into
// the pair's shared length and the rest (TRL's LD-DPO masks).
std::pair<torch::Tensor, torch::Tensor> sequence_sums(const torch::Tensor& per_token, const torch::Tensor& mask,
                                                      bool split_tail) {
  if (!split_tail) return {per_token.sum(1), torch::Tensor()};
  auto pos = mask.cumsum(1);
  auto lens = mask.sum(1);
  auto halves = lens.chunk(2, 0);
  auto shared = torch::minimum(halves[0], halves[1]);
  shared = torch::cat({shared, shared}, 0).unsqueeze(1);
  auto shared_mask = (pos > 0).logical_and(pos <= shared);
  auto tail_mask = pos > shared;
  return {(per_token * shared_mask).sum(1), (per_token * tail_mask).sum(1)};
}

// Per token: log sum_v p(v)^2 under `weight`, for WPO weights (no gradient).
// Only masked-in positions are computed, in chunks of rows.
torch::Tensor log_sum_sq_probs(const torch::Tensor& hidden, const torch::Tensor& weight, const torch::Tensor& mask,
                               std::optional<double> softcap) {
  torch::NoGradGuard ng;
  auto out = torch::zeros(mask.sizes(), hidden.options().dtype(torch::kFloat32));
  auto flat_mask = mask.reshape({-1}).to(torch::kBool);
  auto idx = flat_mask.nonzero().squeeze(1);
  auto h = hidden.reshape({-1, hidden.size(-1)}).index_select(0, idx);
  auto w = weight.to(torch::kFloat32);
  std::vector<torch::Tensor> parts;
  for (int64_t i = 0; i < h.size(0); i += 1024) {
    auto logits = torch::matmul(h.narrow(0, i, std::min<int64_t>(1024, h.size(0) - i)).to(torch::kFloat32), w.t());
    if (softcap) logits = torch::tanh(logits / *softcap) * *softcap;
    parts.push_back(torch::logsumexp(2 * logits, -1) - 2 * torch::logsumexp(logits, -1));
  }
  if (!parts.empty()) out.view({-1}).index_put_({idx}, torch::cat(parts));
  return out;
}

}  // namespace

PreferenceSplit prepare_preference_split(const PreferenceDataOptions& c, const text::Tokenizer& tok,
                                         const text::ChatTemplate* tmpl, const std::string& split, bool required) {
  const DataSource source{c.trainer, c.dataset_name, c.skip_bad_rows, "text", row_bytes_limit(c.max_length)};
  const auto read = read_split(data::Task::preference, source, split, required);
  if (!read) return {};
  const data::Shaped& shaped = *read;
  const bool conversational = is_conversational(shaped, tmpl, c.trainer, false);
  const std::string eos = completion_eos(tok, std::nullopt, c.trainer, false, conversational);

  PreferenceSplit out;
  out.files = shaped.files;
  EmptyCompletions empty(c.skip_bad_rows, "every pair needs a non-empty chosen and rejected answer");
  bool warned_prefix = false;
  // Tokenized on dataset_num_proc threads; the rows are then taken in order,
  // so the examples, counts, warnings and errors are those of one thread.
  struct Ids {
    std::vector<int64_t> prompt, pc, pr;
  };
  text::RowResults<Ids> tokenized(shaped.rows.size(), static_cast<int>(c.dataset_num_proc.value_or(1)), [&](size_t i) {
    const auto& row = shaped.rows[i].value;
    if (conversational) {
      const auto inputs = template_inputs(row);
      return Ids{render_conversation_ids(tok, *tmpl, row["prompt"], true, inputs),
                 render_conversation_ids(tok, *tmpl, prompt_then(row["prompt"], row["chosen"]), false, inputs),
                 render_conversation_ids(tok, *tmpl, prompt_then(row["prompt"], row["rejected"]), false, inputs)};
    }
    const std::string p = row["prompt"].get<std::string>();
    return Ids{encode_text(tok, p, true), encode_text(tok, p + with_eos(row["chosen"].get<std::string>(), eos), true),
               encode_text(tok, p + with_eos(row["rejected"].get<std::string>(), eos), true)};
  });
  for (size_t i = 0; i < shaped.rows.size(); ++i) {
    const std::string where = shaped.rows[i].where();
    if (empty.drop(shaped.rows[i], {"chosen", "rejected"})) continue;
    const auto& [prompt, pc, pr] = tokenized.get(i, shaped.rows[i].where());
    // The completions start where prompt and prompt+completion diverge.
    const size_t plen = std::min(common_prefix(prompt, pc), common_prefix(prompt, pr));
    if (plen < prompt.size() && !warned_prefix) {
      warned_prefix = true;
      log::warn("{}: the tokenized prompt is not a prefix of prompt+completion (the chat template renders the prompt "
                "alone differently, or tokens merge across the boundary); the completion starts where they diverge and "
                "`{}` is left out of training",
                where, tok.decode(std::vector<int32_t>(prompt.begin() + static_cast<long>(plen), prompt.end()), false));
    }
    if (c.max_length && c.truncation_mode == "keep_start" && static_cast<int64_t>(plen) >= *c.max_length) {
      ++out.dropped_long_prompts;
      continue;
    }
    PreferenceExample ex;
    ex.prompt_ids.assign(prompt.begin(), prompt.begin() + static_cast<long>(plen));
    ex.chosen_ids.assign(pc.begin() + static_cast<long>(plen), pc.end());
    ex.rejected_ids.assign(pr.begin() + static_cast<long>(plen), pr.end());
    ex.source_row = i;
    ex.where = where;
    out.examples.push_back(std::move(ex));
  }
  empty.report(split);
  if (out.dropped_long_prompts)
    log::info("{} split: dropped {} of {} pairs whose prompt alone has max_length ({}) tokens or more", split,
              out.dropped_long_prompts, shaped.rows.size(), *c.max_length);
  if (out.examples.empty() && !shaped.rows.empty())
    fail_input("{} split of {}: no pair left to train on (every prompt reaches max_length {}?)", split, *c.dataset_name,
               c.max_length.value_or(0));
  return out;
}

engine::TensorMap collate_pairs(const std::vector<PreferenceExample>& ex, const std::vector<size_t>& indices,
                                int64_t pad_id, std::optional<int64_t> max_length, const std::string& truncation_mode) {
  const size_t b = indices.size();
  std::vector<std::vector<int64_t>> seqs(2 * b);
  std::vector<std::vector<int64_t>> masks(2 * b);
  for (size_t r = 0; r < b; ++r) {
    const auto& e = ex[indices[r]];
    for (int side = 0; side < 2; ++side) {
      const auto& comp = side == 0 ? e.chosen_ids : e.rejected_ids;
      auto& s = seqs[side * b + r];
      auto& m = masks[side * b + r];
      s = e.prompt_ids;
      s.insert(s.end(), comp.begin(), comp.end());
      m.assign(e.prompt_ids.size(), 0);
      m.resize(s.size(), 1);
      if (max_length && static_cast<int64_t>(s.size()) > *max_length) {
        const auto keep = static_cast<size_t>(*max_length);
        if (truncation_mode == "keep_end") {
          s.erase(s.begin(), s.end() - static_cast<long>(keep));
          m.erase(m.begin(), m.end() - static_cast<long>(keep));
        } else {
          s.resize(keep);
          m.resize(keep);
        }
      }
    }
  }
  size_t width = 1;
  for (const auto& s : seqs) width = std::max(width, s.size());
  const int64_t rows = static_cast<int64_t>(2 * b), t = static_cast<int64_t>(width);
  auto ids = torch::full({rows, t}, pad_id, torch::kInt64);
  auto attn = torch::zeros({rows, t}, torch::kInt64);
  auto comp = torch::zeros({rows, t}, torch::kInt64);
  auto* pi = ids.data_ptr<int64_t>();
  auto* pa = attn.data_ptr<int64_t>();
  auto* pc = comp.data_ptr<int64_t>();
  for (int64_t r = 0; r < rows; ++r) {
    const auto& s = seqs[static_cast<size_t>(r)];
    const auto& m = masks[static_cast<size_t>(r)];
    for (size_t j = 0; j < s.size(); ++j) {
      pi[r * t + static_cast<int64_t>(j)] = s[j];
      pa[r * t + static_cast<int64_t>(j)] = 1;
      pc[r * t + static_cast<int64_t>(j)] = m[j];
    }
  }
  return {{"input_ids", ids}, {"attention_mask", attn}, {"completion_mask", comp}};
}

DPOTrainer::DPOTrainer(const DPOConfig& config, std::map<std::string, std::vector<PreferenceExample>> splits, int64_t pad_id)
    : config_(config), splits_(std::move(splits)), pad_id_(pad_id) {}

engine::TensorMap DPOTrainer::collate_shared_pairs(const std::vector<PreferenceExample>& ex,
                                                   const std::vector<size_t>& indices) const {
  auto out = collate_pairs(ex, indices, pad_id_, config_.max_length, config_.truncation_mode);
  // Each pair's prompt once: the chosen and rejected rows share their start.
  // Hidden states are read from the position before each completion on.
  engine::ShareOptions share;
  share.wanted_from = engine::first_predicting(out.at("completion_mask"));
  for (auto& [k, v] : engine::share_prefixes(out.at("input_ids"), out.at("attention_mask"),
                                             engine::pair_groups(static_cast<int64_t>(indices.size())), pad_id_, share))
    out[k] = v;
  return out;
}

size_t DPOTrainer::num_examples(const std::string& split) const {
  auto it = splits_.find(split);
  return it == splits_.end() ? 0 : it->second.size();
}

engine::TensorMap DPOTrainer::collate(const std::string& split, const std::vector<size_t>& indices) const {
  auto out = collate_shared_pairs(splits_.at(split), indices);
  auto it = ref_.find(split);
  if (it != ref_.end()) {
    auto pick = [&](const std::vector<double>& v) {
      std::vector<float> x;
      for (size_t i : indices) x.push_back(static_cast<float>(v[i]));
      return torch::tensor(x, torch::kFloat32);
    };
    out["ref_chosen_logps"] = pick(it->second.chosen);
    out["ref_rejected_logps"] = pick(it->second.rejected);
    if (config_.ld_alpha) {
      out["ref_chosen_tail_logps"] = pick(it->second.chosen_tail);
      out["ref_rejected_tail_logps"] = pick(it->second.rejected_tail);
    }
  }
  return out;
}

double DPOTrainer::num_items(const engine::TensorMap& batch) const {
  return static_cast<double>(batch.at("input_ids").size(0) / 2);
}

engine::LossOutput DPOTrainer::loss(engine::Engine& engine, const engine::TensorMap& batch) {
  const auto& ids = batch.at("input_ids");
  const int64_t t = ids.size(1);
  const int64_t b = ids.size(0) / 2;
  auto targets = ids.slice(1, 1);
  auto mask = batch.at("completion_mask").slice(1, 1);
  const bool ld = config_.ld_alpha.has_value();

  // Final hidden states in the [2B, T] layout (shared prompts gathered back).
  auto forward = [&](engine::Role role) { return engine::forward_rows(engine, role, batch); };
  auto hidden = forward(engine::Role::Policy);
  auto h = hidden.slice(1, 0, t - 1);
  auto lp = engine.logprobs(engine::Role::Policy, h, targets, mask, {.entropy = true, .accuracy = true});
  auto [sums, tails] = sequence_sums(lp.logps, mask, ld);

  losses::DpoInputs in;
  auto halves = sums.chunk(2, 0);
  in.chosen_logps = halves[0];
  in.rejected_logps = halves[1];
  if (ld) {
    auto th = tails.chunk(2, 0);
    in.chosen_tail_logps = th[0];
    in.rejected_tail_logps = th[1];
  }
  if (batch.count("ref_chosen_logps")) {
    in.ref_chosen_logps = batch.at("ref_chosen_logps").to(sums.device(), sums.scalar_type());
    in.ref_rejected_logps = batch.at("ref_rejected_logps").to(sums.device(), sums.scalar_type());
    if (ld) {
      in.ref_chosen_tail_logps = batch.at("ref_chosen_tail_logps").to(sums.device(), sums.scalar_type());
      in.ref_rejected_tail_logps = batch.at("ref_rejected_tail_logps").to(sums.device(), sums.scalar_type());
    }
  } else {
    torch::NoGradGuard ng;
    auto rh = forward(engine::Role::Reference);
    auto rlp = engine.logprobs(engine::Role::Reference, rh.slice(1, 0, t - 1), targets, mask);
    auto [rs, rt] = sequence_sums(rlp.logps, mask, ld);
    auto rhv = rs.chunk(2, 0);
    in.ref_chosen_logps = rhv[0];
    in.ref_rejected_logps = rhv[1];
    if (ld) {
      auto rtv = rt.chunk(2, 0);
      in.ref_chosen_tail_logps = rtv[0];
      in.ref_rejected_tail_logps = rtv[1];
    }
  }
  // Completion tokens per sequence (the predicted ones).
  auto counts = mask.sum(1).to(torch::kFloat32).chunk(2, 0);
  in.chosen_tokens = counts[0];
  in.rejected_tokens = counts[1];
  if (config_.use_weighting) {
    auto lss = log_sum_sq_probs(h.detach(), engine.head_weight(engine::Role::Policy), mask,
                                engine.model_config(engine::Role::Policy).final_logit_softcapping);
    auto aligned = ((lp.logps.detach() - lss) * mask).sum(1).chunk(2, 0);
    in.chosen_wpo_logps = aligned[0];
    in.rejected_wpo_logps = aligned[1];
  }

  losses::DpoLossOptions o;
  o.beta = config_.beta;
  o.loss_type = config_.loss_type;
  if (config_.loss_weights) o.loss_weights = *config_.loss_weights;
  o.label_smoothing = config_.label_smoothing;
  o.f_divergence_type = config_.f_divergence_type;
  o.f_alpha_divergence_coef = config_.f_alpha_divergence_coef;
  o.discopop_tau = config_.discopop_tau;
  o.ld_alpha = config_.ld_alpha;
  o.use_weighting = config_.use_weighting;
  auto out = losses::dpo_loss(in, o);

  engine::LossOutput result;
  // The loss is the mean over this micro-batch's pairs; as a sum over pairs
  // the engine's division by the step's pairs gives TRL's mean.
  result.loss_sum = out.loss * static_cast<double>(b);

  torch::NoGradGuard ng;
  auto& m = result.metrics;
  add_preference_metrics(m, out.chosen_rewards, out.rejected_rewards, out.chosen_logps, out.rejected_logps);
  // Token metrics as device sums, read at logging.
  auto fmask = mask.to(torch::kFloat32);
  m.add("entropy", (lp.entropy * fmask).sum(), fmask.sum());
  auto mhalves = fmask.chunk(2, 0);
  const auto chosen_tokens = mhalves[0].sum(), rejected_tokens = mhalves[1].sum();
  auto correct = lp.correct.to(torch::kFloat32).chunk(2, 0)[0];
  m.add("mean_token_accuracy", (correct * mhalves[0]).sum(), chosen_tokens);
  // The mean over the vocabulary of a token's logits is the hidden state
  // times the mean row of the head: no [tokens x vocab] tensor needed.
  auto ml = (engine.mean_logits(engine::Role::Policy, h) * fmask).chunk(2, 0);
  m.add("logits/chosen", ml[0].sum(), chosen_tokens);
  m.add("logits/rejected", ml[1].sum(), rejected_tokens);
  last_metrics_ = m;
  return result;
}

void DPOTrainer::precompute_reference(engine::Engine& engine, const std::string& split,
                                      const std::vector<std::string>& data_files, const std::string& reference_key,
                                      engine::Role role) {
  if (!splits_.count(split)) return;
  const auto& ex = splits_.at(split);
  engine::CacheKey key;
  key.text("trlx dpo reference log-probs v1");
  for (const auto& f : data_files) key.file(f);
  for (const auto& e : ex) {
    key.ids(e.prompt_ids);
    key.ids(e.chosen_ids);
    key.ids(e.rejected_ids);
  }
  key.text(reference_key);
  key.text(fmt::format("{}|{}|{}|{}", config_.max_length.value_or(-1), config_.truncation_mode,
                       config_.ld_alpha ? fmt::format("{}", *config_.ld_alpha) : "none", config_.use_bf16()));
  const bool ld = config_.ld_alpha.has_value();
  const auto batch_size = static_cast<size_t>(config_.precompute_ref_batch_size.value_or(
      split == "train" ? config_.per_device_train_batch_size : config_.per_device_eval_batch_size));
  // Per pair: the chosen and rejected sums (the shared part with ld_alpha),
  // then with ld_alpha the rest.
  auto values = engine::cached_reference_values(
      engine, "ref_logps", split, key.hex(), ex.size(), {"chosen", "rejected", "chosen_tail", "rejected_tail"},
      batch_size, [&](const std::vector<size_t>& idx) {
        auto b = collate_shared_pairs(ex, idx);
        const auto& ids = b.at("input_ids");
        const int64_t t = ids.size(1);
        auto mask = b.at("completion_mask").slice(1, 1).to(engine.device());
        auto h = engine::forward_rows(engine, role, b);
        auto lp = engine.logprobs(role, h.slice(1, 0, t - 1), ids.slice(1, 1), mask);
        auto [sums, tails] = sequence_sums(lp.logps, mask, ld);
        auto sc = sums.to(torch::kCPU, torch::kFloat64).contiguous();
        auto tc = ld ? tails.to(torch::kCPU, torch::kFloat64).contiguous() : torch::zeros_like(sc);
        const auto* ps = sc.data_ptr<double>();
        const auto* pt = tc.data_ptr<double>();
        const size_t n = idx.size();
        std::vector<double> out;
        for (size_t r = 0; r < n; ++r) out.insert(out.end(), {ps[r], ps[n + r], pt[r], pt[n + r]});
        return out;
      });
  ref_[split] = {values.column("chosen"), values.column("rejected"), values.column("chosen_tail"),
                 values.column("rejected_tail")};
}

namespace {

PreferenceDataOptions data_options(const DPOConfig& c) {
  PreferenceDataOptions o;
  o.trainer = "dpo";
  o.dataset_name = c.dataset_name;
  o.skip_bad_rows = c.skip_bad_rows;
  o.max_length = c.max_length;
  o.truncation_mode = c.truncation_mode;
  o.dataset_num_proc = c.dataset_num_proc;
  return o;
}

}  // namespace

PreferenceSplit prepare_dpo_split(const DPOConfig& c, const TextInputs& text, const std::string& split) {
  return prepare_preference_split(data_options(c), text.tokenizer, text.chat_template_or_null(), split, true);
}

int run_dpo(const DPOConfig& c) {
  const auto text = load_text_inputs(c, "dpo");
  std::map<std::string, std::vector<PreferenceExample>> splits;
  std::map<std::string, std::vector<std::string>> files;
  auto train = prepare_dpo_split(c, text, c.dataset_train_split);
  splits["train"] = std::move(train.examples);
  files["train"] = train.files;
  if (c.eval_strategy != "no") {
    auto test = prepare_dpo_split(c, text, c.dataset_test_split);
    splits["test"] = std::move(test.examples);
    files["test"] = test.files;
  }
  const int64_t pad = resolve_pad_id(text.tokenizer, c.pad_token, "dpo");

  auto loaded = engine::load_policy(c, model::HeadKind::CausalLM);
  auto reference = load_reference(c, loaded, c.ref_model, c.precompute_ref_log_probs, model::HeadKind::CausalLM);
  engine::Engine engine(c, std::move(loaded), "dpo");
  if (reference.separate) engine.set_reference(reference.separate);
  DPOTrainer trainer(c, std::move(splits), pad);
  if (c.sync_ref_model) engine.sync_reference_every(c.ref_model_sync_steps, c.ref_model_mixup_alpha);
  if (c.precompute_ref_log_probs) {
    engine::CacheKey key;
    for (const auto& f : reference.files) key.file(f);
    for (const auto& [split, f] : files) trainer.precompute_reference(engine, split, f, key.hex(), reference.precompute_role());
  }
  return train_to_exit_code(engine, trainer);
}

}  // namespace trlx::trainers
