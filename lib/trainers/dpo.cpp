#include "trainers/dpo.hpp"

#include <unistd.h>

#include <algorithm>
#include <fstream>
#include <iostream>

#include <fmt/format.h>
#include <nlohmann/json.hpp>

#include "core/error.hpp"
#include "core/log.hpp"
#include "losses/preference.hpp"
#include "model/loading.hpp"
#include "text/data/dataset.hpp"
#include "text/template/chat_template.hpp"
#include "text/tokenizer/tokenizer.hpp"

namespace trlx::trainers {

namespace fs = std::filesystem;

namespace {

std::vector<int64_t> to64(const std::vector<int32_t>& v) { return {v.begin(), v.end()}; }

size_t common_prefix(const std::vector<int64_t>& a, const std::vector<int64_t>& b) {
  size_t n = 0;
  while (n < a.size() && n < b.size() && a[n] == b[n]) ++n;
  return n;
}

// A conversation through the chat template, tokenized without special tokens
// (the template writes them), as transformers' apply_chat_template(tokenize=True).
std::vector<int64_t> render_ids(const text::Tokenizer& tok, const text::ChatTemplate& tmpl,
                                const nlohmann::ordered_json& messages, bool add_generation_prompt) {
  text::ChatOptions o;
  o.add_generation_prompt = add_generation_prompt;
  o.bos_token = tok.bos_token();
  o.eos_token = tok.eos_token();
  o.pad_token = tok.pad_token();
  o.unk_token = tok.unk_token();
  return to64(tok.encode_ids(text::apply_chat_template(tmpl, messages, o).text, false));
}

bool empty_completion(const data::Value& v) {
  if (v.is_string()) return v.get<std::string>().empty();
  return v.is_array() && v.empty();
}

// FNV-1a, 64 bits: enough to tell a stale cache from a current one.
struct Hasher {
  uint64_t h = 1469598103934665603ULL;
  void bytes(const void* p, size_t n) {
    const auto* c = static_cast<const unsigned char*>(p);
    for (size_t i = 0; i < n; ++i) {
      h ^= c[i];
      h *= 1099511628211ULL;
    }
  }
  void str(const std::string& s) {
    const uint64_t n = s.size();
    bytes(&n, sizeof n);
    bytes(s.data(), s.size());
  }
  void ids(const std::vector<int64_t>& v) {
    const uint64_t n = v.size();
    bytes(&n, sizeof n);
    bytes(v.data(), v.size() * sizeof(int64_t));
  }
  void file(const fs::path& p) {
    std::ifstream in(p, std::ios::binary);
    if (!in) fail_input("{}: cannot be read", p.string());
    str(p.filename().string());
    std::vector<char> buf(1 << 20);
    while (in) {
      in.read(buf.data(), static_cast<std::streamsize>(buf.size()));
      bytes(buf.data(), static_cast<size_t>(in.gcount()));
    }
  }
  std::string hex() const { return fmt::format("{:016x}", h); }
};

// The files a model directory is made of: its configs and weights (adapter
// directories too), sorted by name.
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

// The cached reference log-probs of a split live beside the run's outputs.
fs::path ref_cache_path(const DPOConfig& c, const std::string& split) {
  return fs::path(c.output_dir.value_or("trainer_output")) / fmt::format("ref_logps_{}.json", split);
}

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
torch::Tensor log_sum_sq_probs(const torch::Tensor& hidden, const torch::Tensor& weight, const torch::Tensor& mask) {
  torch::NoGradGuard ng;
  auto out = torch::zeros(mask.sizes(), hidden.options().dtype(torch::kFloat32));
  auto flat_mask = mask.reshape({-1}).to(torch::kBool);
  auto idx = flat_mask.nonzero().squeeze(1);
  auto h = hidden.reshape({-1, hidden.size(-1)}).index_select(0, idx);
  auto w = weight.to(torch::kFloat32);
  std::vector<torch::Tensor> parts;
  for (int64_t i = 0; i < h.size(0); i += 1024) {
    auto logits = torch::matmul(h.narrow(0, i, std::min<int64_t>(1024, h.size(0) - i)).to(torch::kFloat32), w.t());
    parts.push_back(torch::logsumexp(2 * logits, -1) - 2 * torch::logsumexp(logits, -1));
  }
  if (!parts.empty()) out.view({-1}).index_put_({idx}, torch::cat(parts));
  return out;
}

}  // namespace

std::string hash_files(const std::vector<fs::path>& files) {
  Hasher h;
  for (const auto& f : files) h.file(f);
  return h.hex();
}

PreferenceSplit prepare_preference_split(const PreferenceDataOptions& c, const text::Tokenizer& tok,
                                         const text::ChatTemplate* tmpl, const std::string& split, bool required) {
  data::LoadOptions lo;
  lo.split = split;
  lo.skip_bad_rows = c.skip_bad_rows;
  if (!c.dataset_name) fail_input("{}: no dataset: set dataset_name (a JSONL/JSON file or a directory)", c.trainer);
  data::Shaped shaped;
  try {
    shaped = data::load_for(data::Task::preference, *c.dataset_name, lo);
  } catch (const InputError& e) {
    if (!required && std::string(e.what()).find("split") != std::string::npos) return {};
    throw;
  }
  if (shaped.skipped) log::warn("{} split: skipped {} bad row(s) (skip_bad_rows)", split, shaped.skipped);
  if (shaped.prompts_extracted)
    log::info("{} split: {} row(s) had no prompt; took the shared start of chosen and rejected", split, shaped.prompts_extracted);
  const bool conversational = shaped.form == data::Form::conversational;
  if (conversational && !tmpl)
    fail_input("{}: the dataset is conversational but the tokenizer has no chat template", c.trainer);
  const std::string eos = tok.eos_token().value_or("");
  if (!conversational && eos.empty()) fail_input("{}: the tokenizer has no eos_token to end completions with", c.trainer);

  PreferenceSplit out;
  out.files = shaped.files;
  size_t skipped_empty = 0;
  bool warned_prefix = false;
  for (size_t i = 0; i < shaped.rows.size(); ++i) {
    const auto& row = shaped.rows[i].value;
    const std::string where = shaped.rows[i].where();
    const char* empty_side = empty_completion(row["chosen"]) ? "chosen" : empty_completion(row["rejected"]) ? "rejected" : nullptr;
    if (empty_side) {
      if (c.skip_bad_rows) {
        ++skipped_empty;
        continue;
      }
      fail_input("{}: the {} completion is empty; every pair needs a non-empty chosen and rejected answer "
                 "(or set skip_bad_rows: true to drop such rows)",
                 where, empty_side);
    }
    std::vector<int64_t> prompt, pc, pr;
    if (conversational) {
      nlohmann::ordered_json with_c = row["prompt"], with_r = row["prompt"];
      for (const auto& m : row["chosen"]) with_c.push_back(m);
      for (const auto& m : row["rejected"]) with_r.push_back(m);
      prompt = render_ids(tok, *tmpl, row["prompt"], true);
      pc = render_ids(tok, *tmpl, with_c, false);
      pr = render_ids(tok, *tmpl, with_r, false);
    } else {
      auto with_eos = [&](std::string s) {
        if (s.size() < eos.size() || s.compare(s.size() - eos.size(), eos.size(), eos) != 0) s += eos;
        return s;
      };
      const std::string p = row["prompt"].get<std::string>();
      prompt = to64(tok.encode_ids(p, true));
      pc = to64(tok.encode_ids(p + with_eos(row["chosen"].get<std::string>()), true));
      pr = to64(tok.encode_ids(p + with_eos(row["rejected"].get<std::string>()), true));
    }
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
  if (skipped_empty) log::warn("{} split: skipped {} row(s) with an empty completion (skip_bad_rows)", split, skipped_empty);
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

engine::TensorMap collate_shared_prompts(const std::vector<PreferenceExample>& ex, const std::vector<size_t>& indices,
                                         int64_t pad_id, std::optional<int64_t> max_length,
                                         const std::string& truncation_mode, int64_t width) {
  const size_t b = indices.size();
  std::vector<int64_t> prompt(b), chosen(b), rejected(b);
  int64_t len = 1;
  for (size_t r = 0; r < b; ++r) {
    const auto& e = ex[indices[r]];
    const auto p = static_cast<int64_t>(e.prompt_ids.size());
    auto c = static_cast<int64_t>(e.chosen_ids.size()), j = static_cast<int64_t>(e.rejected_ids.size());
    if (max_length) {
      // keep_end cuts prompts (by different amounts for the two sides) and a
      // prompt of max_length or more leaves no completion: no shared prompt.
      if (p >= *max_length || (truncation_mode == "keep_end" && p + std::max(c, j) > *max_length)) return {};
      c = std::min(c, *max_length - p);
      j = std::min(j, *max_length - p);
    }
    prompt[r] = p, chosen[r] = c, rejected[r] = j;
    len = std::max(len, p + c + j);
  }
  // Work of a forward over rows x length: the linear layers per token, plus
  // attention per token growing with the row (a conservative 1/2048 of the
  // linear work per key; real models' ratio is smaller).
  auto cost = [](double rows, double l) { return rows * l * (1.0 + l / 2048.0); };
  if (cost(static_cast<double>(b), static_cast<double>(len)) > 0.9 * cost(2.0 * static_cast<double>(b), static_cast<double>(width)))
    return {};
  const int64_t rows = static_cast<int64_t>(b);
  auto ids = torch::full({rows, len}, pad_id, torch::kInt64);
  auto attn = torch::zeros({rows, len}, torch::kInt64);
  auto pos = torch::zeros({rows, len}, torch::kInt64);
  auto index = torch::empty({2 * rows, width}, torch::kInt64);
  auto* pi = ids.data_ptr<int64_t>();
  auto* pa = attn.data_ptr<int64_t>();
  auto* pp = pos.data_ptr<int64_t>();
  auto* px = index.data_ptr<int64_t>();
  for (int64_t r = 0; r < rows; ++r) {
    const auto& e = ex[indices[static_cast<size_t>(r)]];
    const int64_t p = prompt[static_cast<size_t>(r)], c = chosen[static_cast<size_t>(r)],
                  j = rejected[static_cast<size_t>(r)];
    int64_t* row_ids = pi + r * len;
    std::copy(e.prompt_ids.begin(), e.prompt_ids.end(), row_ids);
    std::copy(e.chosen_ids.begin(), e.chosen_ids.begin() + c, row_ids + p);
    std::copy(e.rejected_ids.begin(), e.rejected_ids.begin() + j, row_ids + p + c);
    std::fill(pa + r * len, pa + r * len + p + c + j, 1);
    for (int64_t s = 0; s < p + c; ++s) pp[r * len + s] = s;
    for (int64_t s = 0; s < j; ++s) pp[r * len + p + c + s] = p + s;
    // Chosen row r reads slots 0..p+c-1, rejected row b+r the prompt's slots
    // then its own; padding reads the row's first slot (masked downstream).
    int64_t* chosen_index = px + r * width;
    int64_t* rejected_index = px + (rows + r) * width;
    for (int64_t s = 0; s < width; ++s) {
      chosen_index[s] = r * len + (s < p + c ? s : 0);
      rejected_index[s] = r * len + (s < p ? s : s < p + j ? s + c : 0);
    }
  }
  return {{"shared_input_ids", ids},
          {"shared_attention_mask", attn},
          {"shared_position_ids", pos},
          {"shared_document_ids", torch::zeros({rows, len}, torch::kInt64)},
          {"shared_index", index.view({-1})}};
}

DPOTrainer::DPOTrainer(const DPOConfig& config, std::map<std::string, std::vector<PreferenceExample>> splits, int64_t pad_id)
    : config_(config), splits_(std::move(splits)), pad_id_(pad_id) {}

size_t DPOTrainer::num_examples(const std::string& split) const {
  auto it = splits_.find(split);
  return it == splits_.end() ? 0 : it->second.size();
}

engine::TensorMap DPOTrainer::collate(const std::string& split, const std::vector<size_t>& indices) const {
  auto out = collate_pairs(splits_.at(split), indices, pad_id_, config_.max_length, config_.truncation_mode);
  for (auto& [k, v] : collate_shared_prompts(splits_.at(split), indices, pad_id_, config_.max_length,
                                             config_.truncation_mode, out.at("input_ids").size(1)))
    out[k] = v;
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

void DPOTrainer::maybe_sync_reference(engine::Engine& engine) {
  // TR-DPO: after every ref_model_sync_steps-th optimizer step the reference
  // moves towards the policy: ref = alpha * policy + (1 - alpha) * ref. Done
  // before the next step's first forward, which is the first time it matters.
  if (!config_.sync_ref_model) return;
  const int64_t step = engine.global_step();
  if (step == 0 || step == last_synced_step_ || step % config_.ref_model_sync_steps != 0) return;
  last_synced_step_ = step;
  engine.sync_reference(config_.ref_model_mixup_alpha);
  log::info("step {}: reference model synced with the policy (ref_model_mixup_alpha {})", step, config_.ref_model_mixup_alpha);
}

engine::LossOutput DPOTrainer::loss(engine::Engine& engine, const engine::TensorMap& batch) {
  if (engine.training()) maybe_sync_reference(engine);
  const auto& ids = batch.at("input_ids");
  const auto& attn = batch.at("attention_mask");
  const int64_t t = ids.size(1);
  const int64_t b = ids.size(0) / 2;
  auto targets = ids.slice(1, 1);
  auto mask = batch.at("completion_mask").slice(1, 1);
  const bool ld = config_.ld_alpha.has_value();

  // Final hidden states in the [2B, T] layout; with shared prompts computed
  // over one row per pair and gathered back.
  auto forward = [&](engine::Role role) {
    if (!batch.count("shared_input_ids")) return engine.forward(role, {ids, attn, torch::Tensor(), torch::Tensor()});
    auto hs = engine.forward(role, {batch.at("shared_input_ids"), batch.at("shared_attention_mask"),
                                    batch.at("shared_position_ids"), batch.at("shared_document_ids")});
    return hs.reshape({-1, hs.size(-1)}).index_select(0, batch.at("shared_index")).view({2 * b, t, hs.size(-1)});
  };
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
    auto lss = log_sum_sq_probs(h.detach(), engine.head_weight(engine::Role::Policy), mask);
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
  auto pm = losses::preference_metric_sums(out.chosen_rewards, out.rejected_rewards, out.chosen_logps, out.rejected_logps)
                .to(torch::kCPU, torch::kFloat64)
                .contiguous();
  const auto* pv = pm.data_ptr<double>();
  const char* names[] = {"rewards/chosen", "rewards/rejected", "rewards/accuracies", "rewards/margins", "logps/chosen",
                         "logps/rejected"};
  for (int i = 0; i < 6; ++i) m.add(names[i], pv[i], pv[6]);
  auto fmask = mask.to(torch::kFloat32);
  const double tokens = fmask.sum().item<double>();
  m.add("entropy", (lp.entropy * fmask).sum().item<double>(), tokens);
  auto mhalves = fmask.chunk(2, 0);
  const double chosen_tokens = mhalves[0].sum().item<double>(), rejected_tokens = mhalves[1].sum().item<double>();
  auto correct = lp.correct.to(torch::kFloat32).chunk(2, 0)[0];
  m.add("mean_token_accuracy", (correct * mhalves[0]).sum().item<double>(), chosen_tokens);
  // The mean over the vocabulary of a token's logits is the hidden state
  // times the mean row of the head: no [tokens x vocab] tensor needed.
  auto ml = (engine.mean_logits(engine::Role::Policy, h) * fmask).chunk(2, 0);
  m.add("logits/chosen", ml[0].sum().item<double>(), chosen_tokens);
  m.add("logits/rejected", ml[1].sum().item<double>(), rejected_tokens);
  last_metrics_ = m;
  return result;
}

RefLogps DPOTrainer::compute_reference(engine::Engine& engine, const std::string& split, engine::Role role) {
  const auto& ex = splits_.at(split);
  const size_t n = ex.size();
  const bool ld = config_.ld_alpha.has_value();
  const size_t bs = static_cast<size_t>(config_.precompute_ref_batch_size.value_or(
      split == "train" ? config_.per_device_train_batch_size : config_.per_device_eval_batch_size));
  // Each rank computes every world_size-th batch; a sum over ranks fills in
  // the rest. Every rank runs the same number of forwards (a sharded model
  // gathers in each): one without a batch in the last round recomputes the
  // first and keeps nothing.
  std::vector<double> flat(4 * n, 0.0);
  torch::NoGradGuard ng;
  const size_t w = static_cast<size_t>(engine.world_size());
  const size_t num_batches = (n + bs - 1) / bs, rounds = (num_batches + w - 1) / w;
  for (size_t round = 0; round < rounds; ++round) {
    const size_t batch_no = round * w + static_cast<size_t>(engine.rank());
    const bool stand_in = batch_no >= num_batches;
    const size_t i = stand_in ? 0 : batch_no * bs;
    std::vector<size_t> idx;
    for (size_t j = i; j < std::min(n, i + bs); ++j) idx.push_back(j);
    auto b = collate_pairs(ex, idx, pad_id_, config_.max_length, config_.truncation_mode);
    const auto& ids = b.at("input_ids");
    const int64_t t = ids.size(1);
    auto mask = b.at("completion_mask").slice(1, 1).to(engine.device());
    auto h = engine.forward(role, {ids, b.at("attention_mask"), torch::Tensor(), torch::Tensor()});
    auto lp = engine.logprobs(role, h.slice(1, 0, t - 1), ids.slice(1, 1), mask);
    auto [s, tl] = sequence_sums(lp.logps, mask, ld);
    auto sc = s.to(torch::kCPU, torch::kFloat64).contiguous();
    auto tc = ld ? tl.to(torch::kCPU, torch::kFloat64).contiguous() : torch::zeros_like(sc);
    const auto* ps = sc.data_ptr<double>();
    const auto* pt = tc.data_ptr<double>();
    for (size_t r = 0; r < idx.size() && !stand_in; ++r) {
      flat[4 * idx[r] + 0] = ps[r];
      flat[4 * idx[r] + 1] = ps[idx.size() + r];
      flat[4 * idx[r] + 2] = pt[r];
      flat[4 * idx[r] + 3] = pt[idx.size() + r];
    }
  }
  engine.sum_across_ranks(flat);
  RefLogps out;
  for (size_t i = 0; i < n; ++i) {
    out.chosen.push_back(flat[4 * i]);
    out.rejected.push_back(flat[4 * i + 1]);
    out.chosen_tail.push_back(flat[4 * i + 2]);
    out.rejected_tail.push_back(flat[4 * i + 3]);
  }
  return out;
}

void DPOTrainer::precompute_reference(engine::Engine& engine, const std::string& split,
                                      const std::vector<std::string>& data_files, const std::string& reference_key,
                                      engine::Role role) {
  if (!splits_.count(split)) return;
  Hasher h;
  h.str("trlx dpo reference log-probs v1");
  for (const auto& f : data_files) h.file(f);
  for (const auto& e : splits_.at(split)) {
    h.ids(e.prompt_ids);
    h.ids(e.chosen_ids);
    h.ids(e.rejected_ids);
  }
  h.str(reference_key);
  h.str(fmt::format("{}|{}|{}|{}", config_.max_length.value_or(-1), config_.truncation_mode,
                    config_.ld_alpha ? fmt::format("{}", *config_.ld_alpha) : "none", config_.use_bf16()));
  const std::string key = h.hex();
  const fs::path path = ref_cache_path(config_, split);
  const size_t n = splits_.at(split).size();
  if (fs::exists(path)) {
    try {
      std::ifstream in(path);
      auto j = nlohmann::json::parse(in);
      if (j.value("key", "") == key && j["chosen"].size() == n) {
        RefLogps r;
        r.chosen = j["chosen"].get<std::vector<double>>();
        r.rejected = j["rejected"].get<std::vector<double>>();
        r.chosen_tail = j["chosen_tail"].get<std::vector<double>>();
        r.rejected_tail = j["rejected_tail"].get<std::vector<double>>();
        ref_[split] = std::move(r);
        log::info("{} split: reference log-probs read from {} (cache key {})", split, path.string(), key);
        return;
      }
      log::info("{} split: {} was made for other data or another reference model; recomputing", split, path.string());
    } catch (const std::exception& e) {
      log::warn("{}: unreadable reference log-prob cache ({}); recomputing", path.string(), e.what());
    }
  }
  log::info("{} split: computing reference log-probs of {} pairs", split, n);
  auto r = compute_reference(engine, split, role);
  if (engine.rank() == 0) {
    fs::create_directories(path.parent_path());
    nlohmann::json j = {{"key", key}, {"chosen", r.chosen}, {"rejected", r.rejected}, {"chosen_tail", r.chosen_tail},
                        {"rejected_tail", r.rejected_tail}};
    const fs::path tmp = path.string() + ".tmp";
    {
      std::ofstream out(tmp);
      out << j.dump();
      if (!out) fail_input("{}: cannot be written", tmp.string());
    }
    fs::rename(tmp, path);
    log::info("{} split: reference log-probs cached in {}", split, path.string());
  }
  ref_[split] = std::move(r);
}

namespace {

PreferenceDataOptions data_options(const DPOConfig& c) {
  PreferenceDataOptions o;
  o.trainer = "dpo";
  o.dataset_name = c.dataset_name;
  o.skip_bad_rows = c.skip_bad_rows;
  o.max_length = c.max_length;
  o.truncation_mode = c.truncation_mode;
  return o;
}

std::pair<text::Tokenizer, std::optional<text::ChatTemplate>> load_tokenizer(const DPOConfig& c) {
  if (!c.model_name_or_path) fail_input("dpo: set model_name_or_path (a Hugging Face model directory)");
  fs::path dir = *c.model_name_or_path;
  if (!fs::exists(dir / "tokenizer.json") && fs::exists(dir / "adapter_config.json")) {
    std::ifstream in(dir / "adapter_config.json");
    try {
      const auto base = nlohmann::json::parse(in).value("base_model_name_or_path", "");
      if (!base.empty()) dir = base;
    } catch (const nlohmann::json::exception&) {
    }
  }
  auto tok = text::Tokenizer::from_dir(dir);
  std::optional<text::ChatTemplate> tmpl;
  if (!tok.chat_template().empty())
    tmpl.emplace(tok.chat_template(), (dir / "tokenizer_config.json").string() + ": chat_template");
  return {std::move(tok), std::move(tmpl)};
}

int64_t pad_id_of(const DPOConfig& c, const text::Tokenizer& tok) {
  std::optional<int32_t> pad = c.pad_token ? tok.token_to_id(*c.pad_token) : tok.pad_token_id();
  if (c.pad_token && !pad) fail_input("pad_token `{}` is not in the tokenizer's vocabulary", *c.pad_token);
  if (!pad) pad = tok.eos_token_id();
  if (!pad) fail_input("dpo: the tokenizer has neither a pad nor an eos token; set pad_token");
  return *pad;
}

}  // namespace

int preview_dpo(const RunRequest& request, size_t num_examples, bool json) {
  const auto& c = *static_cast<const DPOConfig*>(request.config);
  auto [tok, tmpl] = load_tokenizer(c);
  auto split = prepare_preference_split(data_options(c), tok, tmpl ? &*tmpl : nullptr, c.dataset_train_split, true);
  const auto& ex = split.examples;
  const bool tty = !json && isatty(STDOUT_FILENO);
  const auto eos = tok.eos_token_id();
  auto dec = [&](const std::vector<int64_t>& v, size_t lo, size_t hi) {
    return tok.decode(std::vector<int32_t>(v.begin() + static_cast<long>(lo), v.begin() + static_cast<long>(hi)), false);
  };
  for (size_t i = 0; i < std::min(num_examples, ex.size()); ++i) {
    const auto& e = ex[i];
    std::vector<std::string> warnings;
    nlohmann::ordered_json j = {{"row", e.source_row}, {"where", e.where}, {"prompt", dec(e.prompt_ids, 0, e.prompt_ids.size())},
                                {"prompt_tokens", e.prompt_ids.size()}};
    std::string text_out = fmt::format("=== pair {} ({}): prompt {} tokens\n", i, e.where, e.prompt_ids.size());
    text_out += dec(e.prompt_ids, 0, e.prompt_ids.size()) + "\n";
    for (int side = 0; side < 2; ++side) {
      const auto& comp = side == 0 ? e.chosen_ids : e.rejected_ids;
      const char* name = side == 0 ? "chosen" : "rejected";
      // The sequence as the collator cuts it.
      std::vector<int64_t> seq = e.prompt_ids;
      seq.insert(seq.end(), comp.begin(), comp.end());
      std::vector<uint8_t> loss(e.prompt_ids.size(), 0);
      loss.resize(seq.size(), 1);
      bool truncated = false;
      if (c.max_length && static_cast<int64_t>(seq.size()) > *c.max_length) {
        truncated = true;
        const auto keep = static_cast<size_t>(*c.max_length);
        if (c.truncation_mode == "keep_end") {
          const size_t cut = seq.size() - keep;
          if (cut >= e.prompt_ids.size()) warnings.push_back(fmt::format("{}: keep_end truncation removed the whole prompt", name));
          else warnings.push_back(fmt::format("{}: keep_end truncation removed {} prompt token(s)", name, cut));
          seq.erase(seq.begin(), seq.begin() + static_cast<long>(cut));
          loss.erase(loss.begin(), loss.begin() + static_cast<long>(cut));
        } else {
          seq.resize(keep);
          loss.resize(keep);
          warnings.push_back(fmt::format("{}: truncated to max_length {}; {} completion token(s) left", name, keep,
                                         keep - e.prompt_ids.size()));
        }
      }
      size_t targets = 0;
      for (size_t t = 1; t < seq.size(); ++t) targets += loss[t];
      if (targets == 0) warnings.push_back(fmt::format("{}: loss on zero tokens", name));
      if (!truncated && eos && std::find(comp.begin(), comp.end(), *eos) == comp.end())
        warnings.push_back(fmt::format("{}: no EOS in the completion: the model will not learn to stop", name));
      const size_t start = seq.size() - static_cast<size_t>(std::count(loss.begin(), loss.end(), uint8_t{1}));
      if (json) {
        nlohmann::ordered_json toks = nlohmann::ordered_json::array();
        for (size_t t = 0; t < seq.size(); ++t)
          toks.push_back({{"id", seq[t]}, {"token", tok.id_to_token(static_cast<int32_t>(seq[t]))}, {"loss", t > 0 && loss[t]}});
        j[name] = {{"text", dec(seq, start, seq.size())}, {"num_tokens", seq.size()}, {"num_loss_tokens", targets},
                   {"truncated", truncated}, {"tokens", toks}};
      } else {
        const std::string comp_text = dec(seq, start, seq.size());
        text_out += fmt::format("--- {}: {} tokens, {} with loss{}\n", name, seq.size(), targets, truncated ? ", truncated" : "");
        // The prompt was printed above; only a prompt cut by keep_end is shown again.
        const std::string prefix = start == e.prompt_ids.size() && seq.size() - start == comp.size() ? "" : dec(seq, 0, start);
        text_out += prefix + (tty ? "\033[42;30m" + comp_text + "\033[0m" : "[" + comp_text + "]") + "\n";
      }
    }
    if (json) {
      j["warnings"] = warnings;
      std::cout << j.dump() << "\n";
    } else {
      std::cout << text_out;
      for (const auto& w : warnings) std::cout << "  warning: " << w << "\n";
    }
  }
  if (!json)
    std::cout << fmt::format("{} of {} training pairs shown{}; {}\n", std::min(num_examples, ex.size()), ex.size(),
                             split.dropped_long_prompts
                                 ? fmt::format(" ({} dropped: prompt reaches max_length)", split.dropped_long_prompts)
                                 : "",
                             tty ? "tokens with loss are highlighted" : "tokens with loss are in [brackets]");
  return 0;
}

int run_dpo(const RunRequest& request) {
  const auto& c = *static_cast<const DPOConfig*>(request.config);
  auto [tok, tmpl] = load_tokenizer(c);
  std::map<std::string, std::vector<PreferenceExample>> splits;
  std::map<std::string, std::vector<std::string>> files;
  auto train = prepare_preference_split(data_options(c), tok, tmpl ? &*tmpl : nullptr, c.dataset_train_split, true);
  splits["train"] = std::move(train.examples);
  files["train"] = train.files;
  if (c.eval_strategy != "no") {
    auto test = prepare_preference_split(data_options(c), tok, tmpl ? &*tmpl : nullptr, c.dataset_test_split, true);
    splits["test"] = std::move(test.examples);
    files["test"] = test.files;
  }
  const int64_t pad = pad_id_of(c, tok);

  auto loaded = engine::load_policy(c, model::HeadKind::CausalLM);
  const bool adapter_dir = loaded.lora.has_value();
  const int64_t vocab = loaded.model->config().vocab_size;
  // Where the reference comes from, and what its log-probs depend on.
  std::vector<fs::path> ref_files;
  model::LanguageModel reference{nullptr};
  bool reference_is_start_policy = false;
  if (c.ref_model) {
    reference = model::load_language_model(*c.ref_model, model::HeadKind::CausalLM, c.dtype);
    if (reference->config().vocab_size != vocab)
      fail_input("ref_model {} has a vocabulary of {} tokens but the policy {} has {}; the reference must share the "
                 "policy's tokenizer",
                 *c.ref_model, reference->config().vocab_size, *c.model_name_or_path, vocab);
    ref_files = model_files(*c.ref_model);
  } else if (adapter_dir) {
    // Continuing from an adapter: the reference is that adapter as it starts.
    ref_files = model_files(*c.model_name_or_path);
    for (const auto& f : model_files(loaded.base_dir)) ref_files.push_back(f);
    if (!c.precompute_ref_log_probs) reference = engine::load_policy(c, model::HeadKind::CausalLM).model;
    else reference_is_start_policy = true;
  } else {
    ref_files = model_files(loaded.base_dir);
    if (!c.use_peft) {
      // A second copy of the starting model, as TRL loads; with precomputed
      // log-probs the policy before its first step serves instead.
      if (!c.precompute_ref_log_probs) reference = model::load_language_model(loaded.base_dir, model::HeadKind::CausalLM, c.dtype);
      else reference_is_start_policy = true;
    }
  }

  engine::Engine engine(c, std::move(loaded), "dpo");
  if (reference) engine.set_reference(reference);
  DPOTrainer trainer(c, std::move(splits), pad);
  if (c.sync_ref_model && !reference)
    fail_input("sync_ref_model needs a separate reference model to update; with use_peft set ref_model");
  if (c.precompute_ref_log_probs) {
    const std::string key = hash_files(ref_files);
    // With no separate reference, the policy before its first step is the
    // reference: its forward (no graph, eval mode) gives the same numbers
    // without a second copy in memory.
    const auto role = reference_is_start_policy ? engine::Role::Policy : engine::Role::Reference;
    engine.set_training(false);
    for (const auto& [split, f] : files) trainer.precompute_reference(engine, split, f, key, role);
    engine.set_training(true);
  }
  auto summary = engine.train(trainer);
  if (summary.interrupted) {
    log::error("training stopped at step {} on request; resume with resume_from_checkpoint: latest", summary.steps);
    return 1;
  }
  return 0;
}

}  // namespace trlx::trainers
