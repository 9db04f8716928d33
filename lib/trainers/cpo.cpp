// `trlx cpo` and `trlx orpo`: reference-free preference training on prompt/chosen/rejected data.
#include "trainers/cpo.hpp"

#include <algorithm>

#include <nlohmann/json.hpp>

#include "core/error.hpp"
#include "core/log.hpp"
#include "engine/engine.hpp"
#include "engine/shared_prefix.hpp"
#include "losses/preference.hpp"
#include "text/data/dataset.hpp"
#include "text/template/chat_template.hpp"
#include "text/tokenizer/parallel.hpp"
#include "text/tokenizer/tokenizer.hpp"

namespace trlx::trainers {

namespace {

// A completion after its prompt: prompt+answer tokenized whole, the answer
// starting after the prompt's tokens, or one token earlier when the prompt's
// last token merged with the answer.
std::pair<std::vector<int64_t>, size_t> tokenize_answer(const text::Tokenizer& tok, const std::string& prompt,
                                                        const std::string& answer) {
  auto full = encode_text(tok, prompt + answer, false);
  auto p = encode_text(tok, prompt, false);
  size_t start = std::min(p.size(), full.size());
  if (!std::equal(p.begin(), p.begin() + static_cast<long>(start), full.begin()) || start < p.size())
    start = start > 0 ? start - 1 : 0;
  return {full, start};
}

}  // namespace

SidedSplit prepare_sided_preference_split(const PreferenceDataOptions& c, const text::Tokenizer& tok,
                                          const text::ChatTemplate* tmpl, const std::string& split, bool required) {
  const DataSource source{c.trainer, c.dataset_name, c.skip_bad_rows, "text", row_bytes_limit(c.max_length)};
  const auto read = read_split(data::Task::preference, source, split, required);
  if (!read) return {};
  const data::Shaped& shaped = *read;
  const bool conversational = is_conversational(shaped, tmpl, c.trainer, false);
  const auto eos = tok.eos_token_id();
  if (!eos) fail_input("{}: the tokenizer has no eos_token to end completions with", c.trainer);
  const auto bos = tok.bos_token() ? tok.token_to_id(*tok.bos_token()) : std::nullopt;
  SidedSplit out;
  out.files = shaped.files;
  size_t cut = 0;
  EmptyCompletions empty(c.skip_bad_rows, "every pair needs a non-empty chosen and rejected answer");
  // Tokenized on dataset_num_proc threads; the rows are then taken in order,
  // so the pairs, counts and errors are those of one thread.
  using Answers = std::pair<std::pair<std::vector<int64_t>, size_t>, std::pair<std::vector<int64_t>, size_t>>;
  text::RowResults<Answers> tokenized(shaped.rows.size(), static_cast<int>(c.dataset_num_proc.value_or(1)), [&](size_t i) {
    const auto& row = shaped.rows[i].value;
    std::string prompt, chosen, rejected;
    if (conversational) {
      // Rendered to text first; the prompt is the shared start of the
      // rendered prompt and prompt+chosen.
      const auto inputs = template_inputs(row);
      prompt = render_prompt(tok, *tmpl, row["prompt"], inputs);
      const std::string full_c =
                            render_conversation(tok, *tmpl, prompt_then(row["prompt"], row["chosen"]), false, inputs),
                        full_r =
                            render_conversation(tok, *tmpl, prompt_then(row["prompt"], row["rejected"]), false, inputs);
      size_t n = 0;
      while (n < prompt.size() && n < full_c.size() && prompt[n] == full_c[n]) ++n;
      prompt.resize(n);
      chosen = full_c.substr(n);
      rejected = full_r.size() >= n ? full_r.substr(n) : "";
    } else {
      prompt = row["prompt"].get<std::string>();
      chosen = row["chosen"].get<std::string>();
      rejected = row["rejected"].get<std::string>();
    }
    return Answers{tokenize_answer(tok, prompt, chosen), tokenize_answer(tok, prompt, rejected)};
  });
  for (size_t i = 0; i < shaped.rows.size(); ++i) {
    const std::string where = shaped.rows[i].where();
    if (empty.drop(shaped.rows[i], {"chosen", "rejected"})) continue;
    auto& [chosen_answer, rejected_answer] = tokenized.get(i, shaped.rows[i].where());
    auto& [cids, cstart] = chosen_answer;
    auto& [rids, rstart] = rejected_answer;
    SidedPair p;
    p.source_row = i;
    p.where = where;
    for (int side = 0; side < 2; ++side) {
      auto& ids = side == 0 ? cids : rids;
      size_t start = side == 0 ? cstart : rstart;
      std::vector<int64_t> seq(ids.begin(), ids.begin() + static_cast<long>(start));
      if (bos && (seq.empty() || seq.front() != *bos)) seq.insert(seq.begin(), *bos);
      const size_t plen = seq.size();
      std::vector<int64_t> answer(ids.begin() + static_cast<long>(start), ids.end());
      if (answer.empty() || answer.back() != *eos) answer.push_back(*eos);
      if (c.max_length && static_cast<int64_t>(plen + answer.size()) > *c.max_length) {
        answer.resize(static_cast<size_t>(std::max<int64_t>(0, *c.max_length - static_cast<int64_t>(plen))));
        ++cut;
      }
      seq.insert(seq.end(), answer.begin(), answer.end());
      (side == 0 ? p.chosen : p.rejected) = std::move(seq);
      (side == 0 ? p.chosen_prompt_len : p.rejected_prompt_len) = plen;
    }
    out.pairs.push_back(std::move(p));
  }
  empty.report(split);
  if (cut) log::info("{} split: {} completion(s) cut to fit max_length {} (prompts are kept whole)", split, cut, *c.max_length);
  return out;
}

engine::TensorMap collate_sided_pairs(const std::vector<SidedPair>& pairs, const std::vector<size_t>& indices,
                                      int64_t pad_id) {
  const size_t b = indices.size();
  size_t width = 1;
  for (size_t i : indices) width = std::max({width, pairs[i].chosen.size(), pairs[i].rejected.size()});
  const int64_t rows = static_cast<int64_t>(2 * b), t = static_cast<int64_t>(width);
  auto ids = torch::full({rows, t}, pad_id, torch::kInt64);
  auto attn = torch::zeros({rows, t}, torch::kInt64);
  auto comp = torch::zeros({rows, t}, torch::kInt64);
  auto* pi = ids.data_ptr<int64_t>();
  auto* pa = attn.data_ptr<int64_t>();
  auto* pc = comp.data_ptr<int64_t>();
  for (size_t r = 0; r < 2 * b; ++r) {
    const auto& p = pairs[indices[r % b]];
    const auto& s = r < b ? p.chosen : p.rejected;
    const size_t plen = r < b ? p.chosen_prompt_len : p.rejected_prompt_len;
    for (size_t j = 0; j < s.size(); ++j) {
      const auto at = static_cast<int64_t>(r) * t + static_cast<int64_t>(j);
      pi[at] = s[j];
      pa[at] = 1;
      pc[at] = j >= plen ? 1 : 0;
    }
  }
  return {{"input_ids", ids}, {"attention_mask", attn}, {"completion_mask", comp}};
}

ReferenceFreeTrainer::ReferenceFreeTrainer(Kind kind, const CPOConfig* cpo, const ORPOConfig* orpo,
                                           std::map<std::string, std::vector<SidedPair>> splits, int64_t pad_id)
    : kind_(kind), splits_(std::move(splits)), pad_id_(pad_id) {
  if (cpo) cpo_ = *cpo;
  if (orpo) orpo_ = *orpo;
}

size_t ReferenceFreeTrainer::num_examples(const std::string& split) const {
  auto it = splits_.find(split);
  return it == splits_.end() ? 0 : it->second.size();
}

engine::TensorMap ReferenceFreeTrainer::collate(const std::string& split, const std::vector<size_t>& indices) const {
  auto out = collate_sided_pairs(splits_.at(split), indices, pad_id_);
  // Each pair's prompt once. TRL's logits metrics average over padding too,
  // so the padding slots are laid out as well.
  engine::ShareOptions share;
  share.keep_padding = true;
  for (auto& [k, v] : engine::share_prefixes(out.at("input_ids"), out.at("attention_mask"),
                                             engine::pair_groups(static_cast<int64_t>(indices.size())), pad_id_, share))
    out[k] = v;
  if (!out.count("shared_input_ids")) {
    // Rows as they are, each one document with its padding (see loss()):
    // their positions, and that no row branches, known here on the host,
    // so that the forward reads nothing back from the device.
    const auto& ids = out.at("input_ids");
    out["row_positions"] = torch::arange(ids.size(1), torch::kInt64).unsqueeze(0).expand(ids.sizes()).contiguous();
    out["row_branch_reach"] = model::branch_reach(out.at("row_positions"), torch::zeros_like(ids),
                                                  out.at("attention_mask"));
  }
  return out;
}

double ReferenceFreeTrainer::num_items(const engine::TensorMap& batch) const {
  return static_cast<double>(batch.at("input_ids").size(0) / 2);
}

engine::LossOutput ReferenceFreeTrainer::loss(engine::Engine& engine, const engine::TensorMap& batch) {
  const auto& ids = batch.at("input_ids");
  const auto& attn = batch.at("attention_mask");
  const int64_t t = ids.size(1), b = ids.size(0) / 2;
  auto targets = ids.slice(1, 1);
  auto comp = batch.at("completion_mask").slice(1, 1).to(torch::kFloat32);
  // ORPO's NLL covers every attended token of the chosen rows, so its
  // log-probs are needed there too; CPO needs completion tokens only.
  auto lp_mask = kind_ == Kind::ORPO ? attn.slice(1, 1) : batch.at("completion_mask").slice(1, 1);
  // TRL's logits metrics average over padding too. Right padding: real
  // tokens sit at positions 0..n-1 either way; explicit positions also give
  // the padding its index (as transformers does without position_ids), and
  // one document per row masks padding as keys (padding queries then see just
  // their row's tokens, as transformers' padding mask gives them). The packed
  // rows lay padding out the same way.
  torch::Tensor hidden;
  if (batch.count("shared_input_ids")) {
    hidden = engine::forward_rows(engine, engine::Role::Policy, batch);
  } else {
    // (Without the host's facts, a batch made elsewhere: positions here, and
    // the model finds that no row branches.)
    const bool known = batch.count("row_positions");
    model::Batch rows{ids, attn,
                      known ? batch.at("row_positions")
                            : torch::arange(t, ids.options()).unsqueeze(0).expand({ids.size(0), t}),
                      torch::zeros_like(ids)};
    if (known) rows.branch_reach = batch.at("row_branch_reach");
    hidden = engine.forward(engine::Role::Policy, rows);
  }
  auto lp = engine.logprobs(engine::Role::Policy, hidden.slice(1, 0, t - 1), targets, lp_mask);
  auto per_token = lp.logps * comp;
  auto sums = per_token.sum(1);
  auto counts = comp.sum(1);
  auto halves_c = comp.chunk(2, 0);

  engine::LossOutput result;
  auto& m = result.metrics;
  torch::Tensor chosen_logps, rejected_logps, chosen_rewards, rejected_rewards;
  if (kind_ == Kind::CPO) {
    losses::CpoLossOptions o;
    o.beta = cpo_.beta;
    o.loss_type = cpo_.loss_type;
    o.label_smoothing = cpo_.label_smoothing;
    o.cpo_alpha = cpo_.cpo_alpha;
    o.simpo_gamma = cpo_.simpo_gamma;
    o.alpha = cpo_.alpha;
    auto logps = losses::cpo_uses_average_logps(o) ? sums / counts : sums;
    auto h = logps.chunk(2, 0);
    losses::CpoInputs in;
    in.chosen_logps = h[0];
    in.rejected_logps = h[1];
    if (losses::cpo_effective_alpha(o) != 0) in.nll_loss = -(per_token.chunk(2, 0)[0].sum() / halves_c[0].sum());
    auto out = losses::cpo_loss(in, o);
    result.loss_sum = out.loss * static_cast<double>(b);
    chosen_logps = h[0].detach();
    rejected_logps = h[1].detach();
    chosen_rewards = out.chosen_rewards;
    rejected_rewards = out.rejected_rewards;
    if (out.nll_loss.defined()) m.add("nll_loss", out.nll_loss.detach(), 1.0);
    else m.add("nll_loss", 0.0, 1);
  } else {
    auto h = (sums / counts).chunk(2, 0);
    auto attn_t = attn.slice(1, 1).to(torch::kFloat32).chunk(2, 0)[0];
    losses::OrpoInputs in;
    in.chosen_logps = h[0];
    in.rejected_logps = h[1];
    in.nll_loss = -(lp.logps.chunk(2, 0)[0] * attn_t).sum() / attn_t.sum();
    auto out = losses::orpo_loss(in, {.beta = orpo_.beta});
    result.loss_sum = out.loss * static_cast<double>(b);
    chosen_logps = h[0].detach();
    rejected_logps = h[1].detach();
    chosen_rewards = out.chosen_rewards;
    rejected_rewards = out.rejected_rewards;
    m.add("nll_loss", out.nll_loss.detach(), 1.0);
    m.add("log_odds_ratio", out.log_odds_ratio.detach(), 1.0);
    m.add("log_odds_chosen", out.log_odds_chosen.detach(), 1.0);
  }
  torch::NoGradGuard ng;
  add_preference_metrics(m, chosen_rewards, rejected_rewards, chosen_logps, rejected_logps);
  // TRL logs the mean logit over the positions of the padded rows (and the
  // whole vocabulary): the hidden states times the head's mean row. Its
  // CPOTrainer takes every position, its ORPOTrainer all but each row's last.
  const auto logit_positions = kind_ == Kind::ORPO ? hidden.slice(1, 0, hidden.size(1) - 1) : hidden;
  auto mean_logits = engine.mean_logits(engine::Role::Policy, logit_positions).chunk(2, 0);
  // Each rank's mean, averaged over ranks (and micro-batches), as TRL
  // gathers the per-process means.
  m.add("logits/chosen", mean_logits[0].mean(), 1.0);
  m.add("logits/rejected", mean_logits[1].mean(), 1.0);
  last_metrics_ = m;
  return result;
}

PreferenceDataOptions reference_free_data_options(const config::TrainingConfig& c, const std::string& trainer) {
  PreferenceDataOptions o;
  o.trainer = trainer;
  o.dataset_name = c.dataset_name;
  o.skip_bad_rows = c.skip_bad_rows;
  o.max_length = c.max_length;
  o.dataset_num_proc = c.dataset_num_proc;
  return o;
}

namespace {

template <class C>
int run_reference_free(const C& c, ReferenceFreeTrainer::Kind kind, const std::string& name) {
  auto [tok, tmpl] = load_text_inputs(c, name);
  const PreferenceDataOptions o = reference_free_data_options(c, name);
  std::map<std::string, std::vector<SidedPair>> splits;
  splits["train"] = prepare_sided_preference_split(o, tok, tmpl ? &*tmpl : nullptr, c.dataset_train_split, true).pairs;
  if (c.eval_strategy != "no")
    splits["test"] = prepare_sided_preference_split(o, tok, tmpl ? &*tmpl : nullptr, c.dataset_test_split, true).pairs;
  std::optional<int64_t> pad;
  if constexpr (std::is_same_v<C, ORPOConfig>) pad = c.padding_value;
  if (!pad) pad = resolve_pad_id(tok, name);
  engine::Engine engine(c, engine::load_policy(c, model::HeadKind::CausalLM), name);
  const CPOConfig* cpo = nullptr;
  const ORPOConfig* orpo = nullptr;
  if constexpr (std::is_same_v<C, CPOConfig>) cpo = &c;
  else orpo = &c;
  ReferenceFreeTrainer trainer(kind, cpo, orpo, std::move(splits), *pad);
  return train_to_exit_code(engine, trainer);
}

}  // namespace

int run_cpo(const CPOConfig& config) { return run_reference_free(config, ReferenceFreeTrainer::Kind::CPO, "cpo"); }

int run_orpo(const ORPOConfig& config) { return run_reference_free(config, ReferenceFreeTrainer::Kind::ORPO, "orpo"); }

}  // namespace trlx::trainers
