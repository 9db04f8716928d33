// `trlx kto`: unpaired preference data, the KL estimate from mismatched pairs, and the loss call.
#include "trainers/kto.hpp"

#include <cmath>
#include <limits>

#include <nlohmann/json.hpp>

#include "core/error.hpp"
#include "core/log.hpp"
#include "engine/engine.hpp"
#include "engine/shared_prefix.hpp"
#include "losses/preference.hpp"
#include "model/loading.hpp"
#include "text/data/dataset.hpp"
#include "text/tokenizer/parallel.hpp"

namespace trlx::trainers {

namespace {

double round2(double x) { return std::round(x * 100.0) / 100.0; }

}  // namespace

std::string kto_class_imbalance_advice(size_t n_desirable, size_t n_undesirable, double dw, double uw) {
  // Counted as TRL counts them: at least one of each.
  const double d = static_cast<double>(std::max<size_t>(n_desirable, 1));
  const double u = std::max(1.0, static_cast<double>(n_desirable + n_undesirable) - d);
  if (d == u) return "";
  const double d_lo = round2(u * uw / d), d_hi = round2(u * uw / d * 1.33);
  const double u_lo = round2(d * dw / u / 1.33), u_hi = round2(d * dw / u);
  const bool d_ok = d_lo <= dw && dw <= d_hi, u_ok = u_lo <= uw && uw <= u_hi;
  if (d_ok || u_ok) return "";
  return fmt::format(
      "the training data has {} desirable and {} undesirable examples, and desirable_weight {} x {} against "
      "undesirable_weight {} x {} leaves them unbalanced; the KTO paper suggests weighted counts within 1:1 to 4:3, so "
      "set EITHER desirable_weight in [{}, {}] OR undesirable_weight in [{}, {}] (not both)",
      static_cast<size_t>(d), static_cast<size_t>(u), dw, static_cast<size_t>(d), uw, static_cast<size_t>(u), d_lo, d_hi,
      u_lo, u_hi);
}

KTOSplit prepare_kto_split(const KTOConfig& c, const text::Tokenizer& tok, const text::ChatTemplate* tmpl,
                           const std::string& split, bool required) {
  const auto read = read_split(data::Task::unpaired_preference, data_source(c, "kto"), split, required);
  if (!read) return {};
  const data::Shaped& shaped = *read;
  const bool conversational = is_conversational(shaped, tmpl, "kto", false);
  const std::string eos = completion_eos(tok, std::nullopt, "kto", false, conversational);

  KTOSplit out;
  out.unpaired_from = shaped.unpaired_from;
  if (shaped.unpaired_from)
    log::info("{} split: {} prompt/chosen/rejected pair(s) unpaired into desirable and undesirable examples", split,
              shaped.unpaired_from);
  EmptyCompletions empty(c.skip_bad_rows, "there is nothing to label desirable or not");
  size_t prompt_not_prefix = 0;
  std::string first_long;
  // Tokenized on dataset_num_proc threads; the rows are then taken in order,
  // so the examples, counts and errors are those of one thread.
  using PromptFull = std::pair<std::vector<int64_t>, std::vector<int64_t>>;
  text::RowResults<PromptFull> tokenized(shaped.rows.size(), static_cast<int>(c.dataset_num_proc.value_or(1)), [&](size_t i) {
    const auto& row = shaped.rows[i].value;
    if (conversational) {
      const auto inputs = template_inputs(row);
      return PromptFull{render_conversation_ids(tok, *tmpl, row["prompt"], true, inputs),
                        render_conversation_ids(tok, *tmpl, prompt_then(row["prompt"], row["completion"]), false,
                                                inputs)};
    }
    const std::string prompt = row["prompt"].get<std::string>();
    return PromptFull{encode_text(tok, prompt, true),
                      encode_text(tok, prompt + with_eos(row["completion"].get<std::string>(), eos), true)};
  });
  for (size_t i = 0; i < shaped.rows.size(); ++i) {
    const auto& row = shaped.rows[i].value;
    if (empty.drop(shaped.rows[i], {"completion"})) continue;
    KTOExample ex;
    ex.source_row = i;
    ex.label = row["label"].get<bool>();
    const auto& [prompt_ids, full_ids] = tokenized.get(i, shaped.rows[i].where());
    // Tokens merging across the boundary belong to the completion.
    const size_t plen = common_prefix(prompt_ids, full_ids);
    if (plen < prompt_ids.size()) ++prompt_not_prefix;
    ex.prompt_ids.assign(full_ids.begin(), full_ids.begin() + static_cast<long>(plen));
    ex.completion_ids.assign(full_ids.begin() + static_cast<long>(plen), full_ids.end());
    if (c.max_length && ex.prompt_ids.size() >= static_cast<size_t>(*c.max_length)) {
      // Nothing of the completion would survive truncation.
      ++out.dropped_long_prompts;
      if (first_long.empty()) first_long = shaped.rows[i].where();
      continue;
    }
    out.examples.push_back(std::move(ex));
  }
  empty.report(split);
  if (prompt_not_prefix)
    log::warn("{} split: in {} example(s) the tokenized prompt is not a prefix of the tokenized prompt+completion "
              "(tokens merge across the boundary, or the chat template renders the prompt differently); the "
              "completion starts where they diverge",
              split, prompt_not_prefix);
  if (out.dropped_long_prompts) {
    if (out.examples.empty())
      fail_input("{} split: every prompt is at least max_length {} tokens long (e.g. {}); raise max_length", split,
                 *c.max_length, first_long);
    log::warn("{} split: dropped {} of {} example(s) whose prompt alone reaches max_length {}, e.g. {}", split,
              out.dropped_long_prompts, shaped.rows.size(), *c.max_length, first_long);
  }
  if (required && out.examples.empty()) fail_input("{} split: no examples to train on", split);
  return out;
}

KTOTrainer::KTOTrainer(const KTOConfig& config, std::map<std::string, std::vector<KTOExample>> splits, int64_t pad_id)
    : config_(config), splits_(std::move(splits)), pad_id_(pad_id) {
  if (config_.loss_type != "kto") return;  // no KL rows
  const double cap = config_.max_length ? static_cast<double>(*config_.max_length) : 1e18;
  for (const auto& [name, ex] : splits_) {
    if (ex.empty()) continue;
    double prompt = 0, completion = 0;
    for (const auto& e : ex) {
      prompt += static_cast<double>(e.prompt_ids.size());
      completion += static_cast<double>(e.completion_ids.size());
    }
    const double n = static_cast<double>(ex.size());
    const double p = std::min(prompt / n, cap), row = std::min((prompt + completion) / n, cap);
    // A main row and a KL row against the prompt once and both completions;
    // a backward costs about two forwards.
    const double separate = engine::forward_cost(1, row), joint = engine::forward_cost(1, p + 2 * (row - p));
    Sharing s;
    s.reference = joint <= 0.9 * 2 * separate;
    s.policy = s.reference && 3 * joint <= 0.9 * 4 * separate;
    sharing_[name] = s;
  }
}

size_t KTOTrainer::num_examples(const std::string& split) const {
  auto it = splits_.find(split);
  return it == splits_.end() ? 0 : it->second.size();
}

engine::TensorMap KTOTrainer::collate(const std::string& split, const std::vector<size_t>& indices) const {
  const auto& ex = splits_.at(split);
  const size_t n = indices.size();
  const size_t cap = config_.max_length ? static_cast<size_t>(*config_.max_length) : SIZE_MAX;
  engine::TensorMap out;
  auto build = [&](const std::string& prefix, bool mismatched) {
    std::vector<std::vector<int64_t>> seqs(n), masks(n);
    size_t width = 1;
    for (size_t r = 0; r < n; ++r) {
      const auto& prompt = ex[indices[r]].prompt_ids;
      const auto& completion = ex[indices[mismatched ? (r + n - 1) % n : r]].completion_ids;
      seqs[r] = prompt;
      seqs[r].insert(seqs[r].end(), completion.begin(), completion.end());
      masks[r].assign(prompt.size(), 0);
      masks[r].resize(seqs[r].size(), 1);
      if (seqs[r].size() > cap) {
        seqs[r].resize(cap);
        masks[r].resize(cap);
      }
      width = std::max(width, seqs[r].size());
    }
    const int64_t b = static_cast<int64_t>(n), t = static_cast<int64_t>(width);
    auto ids = torch::full({b, t}, pad_id_, torch::kInt64);
    auto attn = torch::zeros({b, t}, torch::kInt64);
    auto cm = torch::zeros({b, t}, torch::kInt64);
    auto *pi = ids.data_ptr<int64_t>(), *pa = attn.data_ptr<int64_t>(), *pc = cm.data_ptr<int64_t>();
    for (int64_t r = 0; r < b; ++r)
      for (size_t j = 0; j < seqs[static_cast<size_t>(r)].size(); ++j) {
        pi[r * t + static_cast<int64_t>(j)] = seqs[static_cast<size_t>(r)][j];
        pa[r * t + static_cast<int64_t>(j)] = 1;
        pc[r * t + static_cast<int64_t>(j)] = masks[static_cast<size_t>(r)][j];
      }
    out[prefix + "input_ids"] = ids;
    out[prefix + "attention_mask"] = attn;
    out[prefix + "completion_mask"] = cm;
    // Run as they are, the rows' hidden states are read from the position
    // before their completions on.
    for (auto& [k, v] : engine::rows_outputs_from(engine::first_predicting(cm), t, prefix)) out[k] = v;
  };
  build("", false);
  if (config_.loss_type == "kto") {
    build("KL_", true);
    // Row i and its KL row share prompt i: one packed row runs it once
    // (keys joint_*, over the rows of both, main rows first, at the wider width).
    auto it = sharing_.find(split);
    if (it != sharing_.end() && it->second.reference) {
      const int64_t t = std::max(out.at("input_ids").size(1), out.at("KL_input_ids").size(1));
      auto widen = [&](const torch::Tensor& x, int64_t fill) {
        return torch::constant_pad_nd(x, {0, t - x.size(1)}, fill);
      };
      auto ids = torch::cat({widen(out.at("input_ids"), pad_id_), widen(out.at("KL_input_ids"), pad_id_)});
      auto attn = torch::cat({widen(out.at("attention_mask"), 0), widen(out.at("KL_attention_mask"), 0)});
      // Packed whatever this batch's lengths (see Sharing).
      engine::ShareOptions share;
      share.max_cost = std::numeric_limits<double>::infinity();
      share.key_prefix = "joint_";
      share.wanted_from = engine::first_predicting(
          torch::cat({widen(out.at("completion_mask"), 0), widen(out.at("KL_completion_mask"), 0)}));
      for (auto& [k, v] : engine::share_prefixes(ids, attn, engine::pair_groups(static_cast<int64_t>(n)), pad_id_, share))
        out[k] = v;
      if (it->second.policy) out["joint_policy"] = torch::empty({0});
    }
  }
  std::vector<uint8_t> labels;
  for (size_t i : indices) labels.push_back(ex[i].label ? 1 : 0);
  out["label"] = torch::tensor(std::vector<int64_t>(labels.begin(), labels.end()), torch::kInt64).to(torch::kBool);
  // The rows of each kind, known here: the loss splits by them without a
  // read of the device.
  std::vector<int64_t> desirable, undesirable;
  for (size_t i = 0; i < labels.size(); ++i) (labels[i] ? desirable : undesirable).push_back(static_cast<int64_t>(i));
  out["desirable_rows"] = torch::tensor(desirable, torch::kInt64);
  out["undesirable_rows"] = torch::tensor(undesirable, torch::kInt64);
  return out;
}

double KTOTrainer::num_items(const engine::TensorMap& batch) const {
  return static_cast<double>(batch.at("input_ids").size(0));
}

namespace {

struct SequenceLogps {
  torch::Tensor sums;       // [B] completion log-prob sums
  torch::Tensor entropy;    // [B, T-1] (policy, main sequences only)
  torch::Tensor hidden;     // [B, T-1, H] predicting positions, detached (policy, main only)
  torch::Tensor mask;       // [B, T-1]
};

SequenceLogps completion_logps(engine::Engine& engine, engine::Role role, const engine::TensorMap& batch,
                               const std::string& prefix, const torch::Tensor& hidden, bool want_extras) {
  const auto& ids = batch.at(prefix + "input_ids");
  auto h = hidden.slice(1, 0, ids.size(1) - 1);
  auto mask = batch.at(prefix + "completion_mask").slice(1, 1);
  auto lp = engine.logprobs(role, h, ids.slice(1, 1), mask, {.entropy = want_extras});
  SequenceLogps out;
  out.sums = lp.logps.sum(-1);
  if (want_extras) {
    out.entropy = lp.entropy.detach();
    out.hidden = h.detach();
    out.mask = mask.to(h.device());
  }
  return out;
}

// Hidden states of the main rows and the KL rows (undefined without KL rows):
// through the joint packed rows when the batch has them and `joint` holds,
// else a forward over each (the KL rows without gradients).
std::pair<torch::Tensor, torch::Tensor> main_and_kl_hidden(engine::Engine& engine, engine::Role role,
                                                           const engine::TensorMap& batch, bool kl, bool joint) {
  const int64_t n = batch.at("input_ids").size(0), t = batch.at("input_ids").size(1);
  if (kl && joint && batch.count("joint_shared_input_ids")) {
    const int64_t t_kl = batch.at("KL_input_ids").size(1);
    auto h = engine::forward_shared(engine, role, batch, "joint_", 2 * n, std::max(t, t_kl));
    return {h.slice(0, 0, n).slice(1, 0, t), h.slice(0, n).slice(1, 0, t_kl).detach()};
  }
  auto main = engine::forward_rows(engine, role, batch);
  if (!kl) return {main, {}};
  torch::NoGradGuard no_grad;
  return {main, engine::forward_rows(engine, role, batch, "KL_")};
}

}  // namespace

engine::LossOutput KTOTrainer::loss(engine::Engine& engine, const engine::TensorMap& batch) {
  const bool kto = config_.loss_type == "kto";
  // The policy's KL rows need no gradients: packed with the main rows they
  // go through the backward too (see Sharing).
  auto [policy_h, policy_kl_h] =
      main_and_kl_hidden(engine, engine::Role::Policy, batch, kto, batch.count("joint_policy") != 0);
  auto policy = completion_logps(engine, engine::Role::Policy, batch, "", policy_h, true);
  // (The reference runs without gradients: packing its KL rows costs nothing.)
  auto [ref_h, ref_kl_h] = main_and_kl_hidden(engine, engine::Role::Reference, batch, kto, true);
  auto ref = completion_logps(engine, engine::Role::Reference, batch, "", ref_h, false);
  const auto dev = policy.sums.device();
  auto labels = batch.at("label").to(dev);
  torch::Tensor kl;
  if (kto) {
    torch::Tensor kl_policy;
    {
      torch::NoGradGuard no_grad;
      kl_policy = completion_logps(engine, engine::Role::Policy, batch, "KL_", policy_kl_h, false).sums;
    }
    auto kl_ref = completion_logps(engine, engine::Role::Reference, batch, "KL_", ref_kl_h, false).sums;
    // TRL gathers each rank's batch mean and averages them (a stand-in
    // rank adds nothing); the sum stays on the device, with no host read.
    const double own = engine.standing_in() ? 0.0 : 1.0;
    auto local = losses::kto_local_kl(kl_policy, kl_ref).detach().to(torch::kFloat64).reshape({1}) * own;
    auto v = engine.sum_across_ranks(torch::cat({local, torch::full({1}, own, local.options())}));
    kl = (v[0] / v[1]).to(torch::kFloat32);
  }
  losses::KtoInputs in;
  in.logps = policy.sums;
  in.ref_logps = ref.sums;
  in.labels = labels;
  if (batch.count("desirable_rows")) {
    in.desirable_rows = batch.at("desirable_rows");
    in.undesirable_rows = batch.at("undesirable_rows");
  }
  in.kl = kl;
  losses::KtoLossOptions o;
  o.beta = config_.beta;
  o.loss_type = config_.loss_type;
  o.desirable_weight = config_.desirable_weight;
  o.undesirable_weight = config_.undesirable_weight;
  auto out = losses::kto_loss(in, o);

  engine::LossOutput lo;
  // kto_loss is the micro-batch mean; the engine wants the sum over examples.
  lo.loss_sum = out.loss * static_cast<double>(labels.size(0));

  // Metrics as TRL logs them: each micro-batch's value over all ranks, then
  // the mean of those values over the logging window (a ratio only where the
  // micro-batch has rows of its kind). They stay device sums until a logging
  // step, where the engine sums them over ranks per micro-batch.
  auto& m = lo.metrics;
  const auto sums = losses::kto_metric_sums(out);  // see kto_metric_sums
  m.add("kl", out.kl.defined() ? out.kl.detach().to(torch::kFloat64) : torch::zeros({}, sums.options()), 1.0);
  m.add_per_batch_nonempty("rewards/chosen", sums[0], sums[2]);
  m.add_per_batch_nonempty("logps/chosen", sums[1], sums[2]);
  m.add_per_batch_nonempty("rewards/rejected", sums[3], sums[5]);
  m.add_per_batch_nonempty("logps/rejected", sums[4], sums[5]);
  m.add_difference("rewards/margins", "rewards/chosen", "rewards/rejected");
  const auto mask = policy.mask.to(torch::kFloat32);
  const auto ml = engine.mean_logits(engine::Role::Policy, policy.hidden) * mask;
  const auto lab = labels.to(torch::kFloat32).unsqueeze(1);
  const auto f64 = [](const torch::Tensor& t) { return t.sum().to(torch::kFloat64); };
  m.add_per_batch("entropy", f64(policy.entropy.to(torch::kFloat32) * mask), f64(mask));
  m.add_per_batch_nonempty("logits/chosen", f64(ml * lab), f64(mask * lab));
  m.add_per_batch_nonempty("logits/rejected", f64(ml * (1 - lab)), f64(mask * (1 - lab)));
  return lo;
}

KTOSplit prepare_kto_train_split(const KTOConfig& c, const TextInputs& text) {
  auto split = prepare_kto_split(c, text.tokenizer, text.chat_template_or_null(), c.dataset_train_split, true);
  size_t desirable = 0;
  for (const auto& e : split.examples) desirable += e.label ? 1 : 0;
  const auto advice = kto_class_imbalance_advice(desirable, split.examples.size() - desirable, c.desirable_weight,
                                                 c.undesirable_weight);
  if (!advice.empty()) log::warn("{}", advice);
  return split;
}

int run_kto(const KTOConfig& c) {
  if (c.precompute_ref_log_probs) fail_input("kto: precompute_ref_log_probs is not built for kto yet; set it to false");
  if (c.sync_ref_model) fail_input("kto: sync_ref_model is not built for kto yet; set it to false");
  const auto text = load_text_inputs(c, "kto");
  const int64_t pad = resolve_pad_id(text.tokenizer, "kto");
  std::map<std::string, std::vector<KTOExample>> splits;
  splits["train"] = prepare_kto_train_split(c, text).examples;
  if (c.eval_strategy != "no")
    splits["test"] = prepare_kto_split(c, text.tokenizer, text.chat_template_or_null(), c.dataset_test_split, true).examples;
  auto policy = engine::load_policy(c, model::HeadKind::CausalLM);
  auto reference = load_reference(c, policy, c.ref_model, false, model::HeadKind::CausalLM);
  engine::Engine engine(c, std::move(policy), "kto");
  if (reference.separate) engine.set_reference(reference.separate);
  KTOTrainer trainer(c, std::move(splits), pad);
  return train_to_exit_code(engine, trainer);
}

}  // namespace trlx::trainers
