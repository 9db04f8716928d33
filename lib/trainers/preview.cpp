// `trlx preview`: each trainer's prepared training data, as the trainer's own
// preparation makes it, shown with the tokens that carry loss marked.
#include "trainers/preview.hpp"

#include <unistd.h>

#include <algorithm>
#include <iostream>

#include <fmt/format.h>
#include <nlohmann/json.hpp>

#include "core/log.hpp"
#include "trainers/cpo.hpp"
#include "trainers/dpo.hpp"
#include "trainers/kto.hpp"
#include "trainers/reward.hpp"
#include "trainers/sft.hpp"

namespace trlx::trainers {

namespace {

// One side of a pair: `ids` with [from, to) marked (the tokens the loss
// reads), as a JSON object or a text line ([brackets], or highlighted on a
// terminal).
struct Side {
  const char* name;
  const std::vector<int64_t>& ids;
  size_t from, to;
};

void show_pair(const text::Tokenizer& tok, size_t i, const std::string& where, const std::vector<Side>& sides,
               const std::vector<std::string>& warnings, const nlohmann::ordered_json& extra, bool json, bool tty) {
  auto dec = [&](const std::vector<int64_t>& v, size_t lo, size_t hi) {
    return tok.decode(std::vector<int32_t>(v.begin() + static_cast<long>(lo), v.begin() + static_cast<long>(hi)),
                      false);
  };
  nlohmann::ordered_json j = {{"row", i}, {"where", where}};
  for (const auto& [k, v] : extra.items()) j[k] = v;
  std::string out = fmt::format("=== pair {} ({}){}\n", i, where, extra.contains("margin") && !extra["margin"].is_null()
                                                                       ? fmt::format(": margin {}", extra["margin"].dump())
                                                                       : std::string());
  for (const Side& s : sides) {
    if (json) {
      nlohmann::ordered_json toks = nlohmann::ordered_json::array();
      for (size_t t = 0; t < s.ids.size(); ++t)
        toks.push_back({{"id", s.ids[t]},
                        {"token", tok.id_to_token(static_cast<int32_t>(s.ids[t]))},
                        {"loss", t >= s.from && t < s.to}});
      j[s.name] = {{"text", dec(s.ids, 0, s.ids.size())}, {"num_tokens", s.ids.size()},
                   {"num_loss_tokens", s.to - s.from}, {"tokens", toks}};
      continue;
    }
    const std::string marked = dec(s.ids, s.from, s.to);
    out += fmt::format("--- {}: {} tokens, {} with loss\n", s.name, s.ids.size(), s.to - s.from);
    out += dec(s.ids, 0, s.from) + (tty ? "\033[42;30m" + marked + "\033[0m" : "[" + marked + "]") +
           dec(s.ids, s.to, s.ids.size()) + "\n";
  }
  if (json) {
    j["warnings"] = warnings;
    std::cout << j.dump() << "\n";
    return;
  }
  std::cout << out;
  for (const auto& w : warnings) std::cout << "  warning: " << w << "\n";
}

template <class C>
int preview_reference_free(const C& c, const std::string& name, size_t num_examples, bool json) {
  auto [tok, tmpl] = load_text_inputs(c, name);
  const auto split = prepare_sided_preference_split(reference_free_data_options(c, name), tok,
                                                    tmpl ? &*tmpl : nullptr, c.dataset_train_split, true);
  const bool tty = !json && isatty(STDOUT_FILENO);
  const auto eos = tok.eos_token_id();
  const size_t shown = std::min(num_examples, split.pairs.size());
  for (size_t i = 0; i < shown; ++i) {
    const SidedPair& p = split.pairs[i];
    std::vector<std::string> warnings;
    for (const auto& [side, ids, plen] : {std::tuple{"chosen", &p.chosen, p.chosen_prompt_len},
                                          std::tuple{"rejected", &p.rejected, p.rejected_prompt_len}}) {
      if (ids->size() <= plen) warnings.push_back(fmt::format("{}: loss on zero tokens", side));
      else if (eos && ids->back() != *eos)
        warnings.push_back(fmt::format("{}: no EOS at the end (cut to max_length, or the data lacks it)", side));
    }
    show_pair(tok, p.source_row, p.where,
              {{"chosen", p.chosen, p.chosen_prompt_len, p.chosen.size()},
               {"rejected", p.rejected, p.rejected_prompt_len, p.rejected.size()}},
              warnings, nlohmann::ordered_json::object(), json, tty);
  }
  if (!json)
    std::cout << fmt::format("{} of {} training pairs shown; {}\n", shown, split.pairs.size(),
                             tty ? "tokens with loss are highlighted" : "tokens with loss are in [brackets]");
  return 0;
}

}  // namespace

int preview_cpo(const CPOConfig& c, size_t num_examples, bool json) {
  return preview_reference_free(c, "cpo", num_examples, json);
}

int preview_orpo(const ORPOConfig& c, size_t num_examples, bool json) {
  return preview_reference_free(c, "orpo", num_examples, json);
}

int preview_reward(const RewardConfig& c, size_t num_examples, bool json) {
  auto [tok, tmpl] = load_text_inputs(c, "reward", c.chat_template_path);
  const auto split = prepare_reward_split(c, tok, tmpl ? &*tmpl : nullptr, c.dataset_train_split, true);
  const bool tty = !json && isatty(STDOUT_FILENO);
  const auto eos = tok.eos_token_id();
  const size_t shown = std::min(num_examples, split.examples.size());
  for (size_t i = 0; i < shown; ++i) {
    const RewardExample& e = split.examples[i];
    std::vector<std::string> warnings;
    for (const auto& [side, ids] : {std::pair{"chosen", &e.chosen_ids}, std::pair{"rejected", &e.rejected_ids}})
      if (eos && !ids->empty() && ids->back() != *eos)
        warnings.push_back(fmt::format("{}: the score is read at a token that is not EOS", side));
    if (e.chosen_ids == e.rejected_ids) warnings.push_back("chosen and rejected are the same tokens");
    nlohmann::ordered_json extra = {{"margin", e.margin ? nlohmann::ordered_json(*e.margin) : nlohmann::ordered_json()}};
    // The loss reads each side's score at its last token.
    show_pair(tok, e.source_row, fmt::format("row {}", e.source_row),
              {{"chosen", e.chosen_ids, e.chosen_ids.empty() ? 0 : e.chosen_ids.size() - 1, e.chosen_ids.size()},
               {"rejected", e.rejected_ids, e.rejected_ids.empty() ? 0 : e.rejected_ids.size() - 1,
                e.rejected_ids.size()}},
              warnings, extra, json, tty);
  }
  if (!json)
    std::cout << fmt::format("{} of {} training pairs shown{}; {}\n", shown, split.examples.size(),
                             split.dropped_long ? fmt::format(" ({} dropped: longer than max_length)", split.dropped_long)
                                                : std::string(),
                             tty ? "the token each score is read at is highlighted"
                                 : "the token each score is read at is in [brackets]");
  return 0;
}

int preview_sft(const SFTConfig& c, size_t num_examples, bool json) {
  auto [tok, tmpl] = load_text_inputs(c, "sft", c.chat_template_path);
  auto examples = prepare_sft_split(c, tok, tmpl ? &*tmpl : nullptr, c.dataset_train_split, true);
  const bool tty = !json && isatty(STDOUT_FILENO);
  const auto eos = tok.eos_token_id();
  size_t warned_no_eos = 0;
  if (tmpl) {
    // A template that ignores add_generation_prompt renders prompts without
    // the assistant header the model must learn to answer after.
    text::ChatOptions with, without;
    with.add_generation_prompt = true;
    const nlohmann::ordered_json probe = nlohmann::ordered_json::array({{{"role", "user"}, {"content", "hi"}}});
    if (text::apply_chat_template(*tmpl, probe, with).text == text::apply_chat_template(*tmpl, probe, without).text)
      log::warn("{}: the chat template writes nothing for add_generation_prompt; prompts will lack the assistant "
                "header at inference",
                tmpl->origin());
  }
  for (size_t i = 0; i < std::min(num_examples, examples.size()); ++i) {
    const auto& e = examples[i];
    std::vector<std::string> warnings;
    size_t targets = 0, first_target = e.ids.size();
    for (size_t t = 1; t < e.ids.size(); ++t)
      if (e.loss_mask[t]) {
        ++targets;
        first_target = std::min(first_target, t);
      }
    if (targets == 0) warnings.push_back("loss on zero tokens");
    if (!e.truncated && eos && e.positions.empty() && (e.ids.empty() || e.ids.back() != *eos)) {
      warnings.push_back("no EOS at the end: the model will not learn to stop");
      ++warned_no_eos;
    }
    if (e.truncated && first_target >= e.ids.size()) warnings.push_back("truncation removed the whole completion");
    if (e.truncated) warnings.push_back(fmt::format("truncated to max_length {}", *c.max_length));
    if (json) {
      nlohmann::ordered_json j = {{"row", e.source_row}, {"num_tokens", e.ids.size()}, {"num_loss_tokens", targets},
                                  {"truncated", e.truncated}};
      j["text"] = tok.decode(std::vector<int32_t>(e.ids.begin(), e.ids.end()), false);
      nlohmann::ordered_json toks = nlohmann::ordered_json::array();
      for (size_t t = 0; t < e.ids.size(); ++t)
        toks.push_back({{"id", e.ids[t]}, {"token", tok.id_to_token(static_cast<int32_t>(e.ids[t]))}, {"loss", t > 0 && e.loss_mask[t]}});
      j["tokens"] = toks;
      j["warnings"] = warnings;
      std::cout << j.dump() << "\n";
      continue;
    }
    std::cout << fmt::format("=== example {} (row {}): {} tokens, {} with loss{}\n", i, e.source_row, e.ids.size(), targets,
                             e.truncated ? ", truncated" : "");
    // Runs of tokens with and without loss, decoded; loss runs marked.
    std::string out;
    size_t t = 0;
    while (t < e.ids.size()) {
      const bool loss = t > 0 && e.loss_mask[t];
      size_t u = t;
      std::vector<int32_t> run;
      while (u < e.ids.size() && (u > 0 && e.loss_mask[u]) == loss) run.push_back(static_cast<int32_t>(e.ids[u++]));
      const std::string text = tok.decode(run, false);
      if (loss) out += tty ? "\033[42;30m" + text + "\033[0m" : "[" + text + "]";
      else out += text;
      t = u;
    }
    std::cout << out << "\n";
    for (const auto& w : warnings) std::cout << "  warning: " << w << "\n";
  }
  if (!json)
    std::cout << fmt::format("{} of {} training examples shown; {}\n", std::min(num_examples, examples.size()), examples.size(),
                             tty ? "tokens with loss are highlighted" : "tokens with loss are in [brackets]");
  return 0;
}

int preview_dpo(const DPOConfig& c, size_t num_examples, bool json) {
  const auto text = load_text_inputs(c, "dpo");
  const auto& tok = text.tokenizer;
  auto split = prepare_dpo_split(c, text, c.dataset_train_split);
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

int preview_kto(const KTOConfig& c, size_t num_examples, bool json) {
  const auto text = load_text_inputs(c, "kto");
  const auto& tok = text.tokenizer;
  auto split = prepare_kto_train_split(c, text);
  const bool tty = !json && isatty(STDOUT_FILENO);
  const auto eos = tok.eos_token_id();
  const size_t cap = c.max_length ? static_cast<size_t>(*c.max_length) : SIZE_MAX;
  auto decode = [&](const std::vector<int64_t>& ids) { return tok.decode(std::vector<int32_t>(ids.begin(), ids.end()), false); };
  const size_t shown = std::min(num_examples, split.examples.size());
  for (size_t i = 0; i < shown; ++i) {
    const auto& e = split.examples[i];
    std::vector<int64_t> completion = e.completion_ids;
    const bool truncated = e.prompt_ids.size() + completion.size() > cap;
    if (truncated) completion.resize(cap - e.prompt_ids.size());
    std::vector<std::string> warnings;
    if (!truncated && eos && (completion.empty() || completion.back() != *eos))
      warnings.push_back("no EOS at the end of the completion");
    if (truncated) warnings.push_back(fmt::format("truncated to max_length {}", *c.max_length));
    const char* label = e.label ? "desirable" : "undesirable";
    if (json) {
      nlohmann::ordered_json j = {{"row", e.source_row},
                                  {"label", e.label},
                                  {"num_tokens", e.prompt_ids.size() + completion.size()},
                                  {"num_loss_tokens", completion.size()},
                                  {"truncated", truncated},
                                  {"prompt", decode(e.prompt_ids)},
                                  {"completion", decode(completion)}};
      nlohmann::ordered_json toks = nlohmann::ordered_json::array();
      for (size_t t = 0; t < e.prompt_ids.size() + completion.size(); ++t) {
        const bool in_completion = t >= e.prompt_ids.size();
        const int64_t id = in_completion ? completion[t - e.prompt_ids.size()] : e.prompt_ids[t];
        toks.push_back({{"id", id}, {"token", tok.id_to_token(static_cast<int32_t>(id))}, {"loss", in_completion}});
      }
      j["tokens"] = toks;
      j["warnings"] = warnings;
      std::cout << j.dump() << "\n";
      continue;
    }
    std::cout << fmt::format("=== example {} (row {}): label {} ({}), {} tokens, {} with loss{}\n", i, e.source_row,
                             e.label ? "true" : "false", label, e.prompt_ids.size() + completion.size(), completion.size(),
                             truncated ? ", truncated" : "");
    const std::string ctext = decode(completion);
    std::cout << decode(e.prompt_ids) << (tty ? (e.label ? "\033[42;30m" : "\033[41;30m") + ctext + "\033[0m" : "[" + ctext + "]")
              << "\n";
    for (const auto& w : warnings) std::cout << "  warning: " << w << "\n";
  }
  if (!json)
    std::cout << fmt::format("{} of {} training examples shown; {}\n", shown, split.examples.size(),
                             tty ? "completions (the tokens with loss) are highlighted, green desirable, red undesirable"
                                 : "completions (the tokens with loss) are in [brackets]");
  return 0;
}

}  // namespace trlx::trainers
