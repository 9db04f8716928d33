// `trlx sft`: text, prompt-completion and conversation data tokenized with its loss mask, packing.
#include "trainers/sft.hpp"

#include <ATen/CPUGeneratorImpl.h>

#include <nlohmann/json.hpp>

#include "core/error.hpp"
#include "core/log.hpp"
#include "engine/engine.hpp"
#include "engine/shared_prefix.hpp"
#include "model/loading.hpp"
#include "text/data/dataset.hpp"
#include "text/template/chat_template.hpp"
#include "text/template/training_template.hpp"
#include "text/tokenizer/parallel.hpp"
#include "text/tokenizer/tokenizer.hpp"

namespace trlx::trainers {

namespace {

struct Rendered {
  std::vector<int64_t> ids;
  std::vector<uint8_t> assistant;  // empty unless asked
};

// A conversation through the chat template, tokenized without special tokens
// (the template writes them), with the assistant mask from its generation tag.
// With `limit`, its first `limit` tokens only.
Rendered render(const text::Tokenizer& tok, const text::ChatTemplate& tmpl, const nlohmann::ordered_json& messages,
                bool add_generation_prompt, bool want_mask, const TemplateInputs& inputs, std::optional<size_t> limit) {
  auto chat = text::apply_chat_template(tmpl, messages, chat_options(tok, add_generation_prompt, inputs));
  auto enc = limit ? tok.encode_head(chat.text, false, *limit) : tok.encode(chat.text, false);
  Rendered r;
  r.ids.assign(enc.ids.begin(), enc.ids.end());
  if (want_mask) {
    r.assistant.assign(r.ids.size(), 0);
    for (size_t t = 0; t < r.ids.size(); ++t) {
      const auto [b, e] = enc.offsets[t];
      for (const auto& [sb, se] : chat.generation_spans)
        if (b < se && sb < e) r.assistant[t] = 1;
    }
  }
  return r;
}

}  // namespace

std::vector<SFTExample> prepare_sft_split(const SFTConfig& c, const text::Tokenizer& tok,
                                          const text::ChatTemplate* tmpl, const std::string& split, bool required) {
  auto source = data_source(c, "sft");
  source.row_bytes_limit.reset();  // SFT tokenizes only what max_length keeps (encode_head)
  source.text_field = c.dataset_text_field;
  const auto read = read_split(data::Task::sft, source, split, required);
  if (!read) return {};
  const data::Shaped& shaped = *read;
  const bool conversational = is_conversational(shaped, tmpl, "sft", true);
  // assistant_only_loss finds the assistant tokens through the template's
  // {% generation %} blocks: a template without them is replaced by its
  // training variant where trlx knows one (as TRL swaps in its training
  // templates), and refused otherwise.
  std::optional<text::ChatTemplate> training;
  if (conversational && c.assistant_only_loss && !tmpl->has_generation_tag()) {
    auto variant = text::training_variant(tmpl->source());
    if (!variant)
      fail_input("{}: assistant_only_loss needs {{% generation %}} blocks around the assistant replies to find the "
                 "assistant tokens, and this chat template has none; trlx derives a training variant for Qwen3 "
                 "templates only. Give a template with {{% generation %}} ... {{% endgeneration %}} around each "
                 "assistant reply through chat_template_path, or turn assistant_only_loss off",
                 tmpl->origin());
    training.emplace(std::move(variant->source), tmpl->origin() + " (trlx's " + variant->family + " training variant)");
    log::info("sft: assistant_only_loss: the {} chat template lacks {{% generation %}} blocks; using its training "
              "variant ({{% generation %}} around each assistant turn, every turn's thinking block kept)",
              variant->family);
    tmpl = &*training;
  }
  const bool prompt_completion = shaped.sft_layout == data::SftLayout::prompt_completion;
  const bool completion_only = c.completion_only_loss.value_or(prompt_completion);
  const std::string eos = completion_eos(tok, c.eos_token, "sft", true, conversational);
  // Every example is cut to max_length (packing too), so only its first
  // max_length + 1 tokens are made (the one more says it was cut): a 50 MB
  // row costs what 129 tokens cost, not gigabytes.
  const std::optional<size_t> limit =
      c.max_length ? std::optional<size_t>(static_cast<size_t>(*c.max_length) + 1) : std::nullopt;

  // Tokenizing is row by row and independent: on dataset_num_proc threads,
  // each row's result in its place; the counting and dropping below stay in
  // row order, so any thread count gives the same examples.
  struct Tokenized {
    SFTExample ex;
    std::vector<uint8_t> completion_mask, assistant;
  };
  std::vector<Tokenized> tokenized(shaped.rows.size());
  auto prepare = [&](size_t i) {
    const auto& row = shaped.rows[i].value;
    SFTExample& ex = tokenized[i].ex;
    ex.source_row = i;
    std::vector<uint8_t>& completion_mask = tokenized[i].completion_mask;
    std::vector<uint8_t>& assistant = tokenized[i].assistant;
    if (prompt_completion) {
      std::vector<int64_t> prompt_ids, full_ids;
      if (conversational) {
        const auto inputs = template_inputs(row);
        prompt_ids = render(tok, *tmpl, row["prompt"], true, false, inputs, limit).ids;
        auto full = render(tok, *tmpl, prompt_then(row["prompt"], row["completion"]), false, c.assistant_only_loss,
                           inputs, limit);
        full_ids = full.ids;
        assistant = full.assistant;
      } else {
        const std::string prompt = row["prompt"].get<std::string>();
        prompt_ids = encode_text(tok, prompt, true, limit);
        full_ids = encode_text(tok, prompt + with_eos(row["completion"].get<std::string>(), eos), true, limit);
      }
      // The completion starts where prompt and prompt+completion diverge.
      const size_t plen = common_prefix(prompt_ids, full_ids);
      completion_mask.assign(full_ids.size(), 0);
      std::fill(completion_mask.begin() + static_cast<long>(plen), completion_mask.end(), 1);
      ex.ids = std::move(full_ids);
    } else if (conversational) {
      auto r = render(tok, *tmpl, row["messages"], false, c.assistant_only_loss, template_inputs(row), limit);
      ex.ids = std::move(r.ids);
      assistant = std::move(r.assistant);
    } else {
      ex.ids = encode_text(tok, with_eos(row["text"].get<std::string>(), eos), true, limit);
    }
    if (c.assistant_only_loss && std::find(assistant.begin(), assistant.end(), 1) == assistant.end())
      fail_input("{}: assistant_only_loss is set but this example has no assistant tokens: the chat template needs "
                 "{{% generation %}} around assistant replies",
                 shaped.rows[i].where());
  };
  // An error raised by a row (its chat template's raise_exception, ...)
  // names the row.
  text::parallel_for(shaped.rows.size(), static_cast<int>(c.dataset_num_proc.value_or(1)), [&](size_t i) {
    try {
      prepare(i);
    } catch (const InputError&) {
      rethrow_at(shaped.rows[i].where());
    }
  });

  std::vector<SFTExample> out;
  size_t n_truncated = 0, n_dropped = 0;
  std::string first_dropped;
  for (size_t i = 0; i < shaped.rows.size(); ++i) {
    SFTExample ex = std::move(tokenized[i].ex);
    const std::vector<uint8_t>& completion_mask = tokenized[i].completion_mask;
    const std::vector<uint8_t>& assistant = tokenized[i].assistant;
    ex.loss_mask.assign(ex.ids.size(), 1);
    if (completion_only && !completion_mask.empty()) ex.loss_mask = completion_mask;
    if (!assistant.empty())
      for (size_t t = 0; t < ex.loss_mask.size(); ++t) ex.loss_mask[t] = ex.loss_mask[t] && assistant[t];
    if (c.max_length && ex.ids.size() > static_cast<size_t>(*c.max_length)) {
      ex.ids.resize(static_cast<size_t>(*c.max_length));
      ex.loss_mask.resize(ex.ids.size());
      ex.truncated = true;
      ++n_truncated;
    }
    if (std::find(ex.loss_mask.begin() + (ex.loss_mask.empty() ? 0 : 1), ex.loss_mask.end(), 1) == ex.loss_mask.end()) {
      // Nothing left to learn from (the completion was truncated away, or an
      // empty completion): dropped, as TRL drops fully masked examples.
      ++n_dropped;
      if (first_dropped.empty()) first_dropped = shaped.rows[i].where();
      continue;
    }
    out.push_back(std::move(ex));
  }
  if (n_truncated) log::info("{} split: {} of {} examples truncated to max_length {}", split, n_truncated, shaped.rows.size(), *c.max_length);
  if (n_dropped) {
    const std::string why = c.max_length ? fmt::format(" (is max_length {} shorter than the prompts?)", *c.max_length) : "";
    if (out.empty())
      fail_input("{} split: no example has a token to train on after truncation, e.g. {}{}", split, first_dropped, why);
    log::warn("{} split: dropped {} example(s) with no token to train on, e.g. {}{}", split, n_dropped, first_dropped, why);
  }
  // As TRL: shuffled with the seed before packing (so that what is packed
  // together does not follow the file's order) and again after.
  if (c.packing) {
    if (c.packing_strategy != "bfd")
      fail_input("packing_strategy `{}` is not built yet in this version of trlx; use bfd", c.packing_strategy);
    if (c.shuffle_dataset) out = shuffled(std::move(out), c.seed);
    const size_t n = out.size();
    out = pack_bfd(std::move(out), *c.max_length);
    log::info("{} split: packed {} examples into {} sequences of at most {} tokens", split, n, out.size(), *c.max_length);
  }
  if (c.shuffle_dataset) out = shuffled(std::move(out), c.seed);
  return out;
}

std::vector<SFTExample> shuffled(std::vector<SFTExample> examples, int64_t seed) {
  auto gen = at::detail::createCPUGenerator(static_cast<uint64_t>(seed));
  const auto perm = torch::randperm(static_cast<int64_t>(examples.size()), gen, torch::kInt64);
  const auto* p = perm.data_ptr<int64_t>();
  std::vector<SFTExample> out;
  out.reserve(examples.size());
  for (size_t i = 0; i < examples.size(); ++i) out.push_back(std::move(examples[static_cast<size_t>(p[i])]));
  return out;
}

std::vector<SFTExample> pack_bfd(std::vector<SFTExample> examples, int64_t max_length) {
  std::vector<size_t> order(examples.size());
  for (size_t i = 0; i < order.size(); ++i) order[i] = i;
  std::stable_sort(order.begin(), order.end(),
                   [&](size_t a, size_t b) { return examples[a].ids.size() > examples[b].ids.size(); });
  std::vector<std::vector<size_t>> bins;
  std::multimap<int64_t, size_t> by_room;  // remaining room -> bin
  for (size_t i : order) {
    const int64_t len = static_cast<int64_t>(examples[i].ids.size());
    auto it = by_room.lower_bound(len);  // the tightest bin that still fits
    if (it == by_room.end()) {
      bins.push_back({i});
      by_room.emplace(max_length - len, bins.size() - 1);
    } else {
      const size_t bin = it->second;
      const int64_t room = it->first - len;
      by_room.erase(it);
      bins[bin].push_back(i);
      by_room.emplace(room, bin);
    }
  }
  std::vector<SFTExample> out;
  for (const auto& bin : bins) {
    SFTExample p;
    p.source_row = examples[bin.front()].source_row;
    for (size_t d = 0; d < bin.size(); ++d) {
      const auto& e = examples[bin[d]];
      for (size_t t = 0; t < e.ids.size(); ++t) {
        p.ids.push_back(e.ids[t]);
        // The first token of a document is not predicted from the previous one.
        p.loss_mask.push_back(t == 0 ? 0 : e.loss_mask[t]);
        p.positions.push_back(static_cast<int64_t>(t));
        p.documents.push_back(static_cast<int64_t>(d));
      }
      p.truncated = p.truncated || e.truncated;
    }
    out.push_back(std::move(p));
  }
  return out;
}

SFTTrainer::SFTTrainer(const SFTConfig& config, std::map<std::string, std::vector<SFTExample>> splits, int64_t pad_id)
    : config_(config), splits_(std::move(splits)), pad_id_(pad_id) {}

size_t SFTTrainer::num_examples(const std::string& split) const {
  auto it = splits_.find(split);
  return it == splits_.end() ? 0 : it->second.size();
}

engine::TensorMap SFTTrainer::collate(const std::string& split, const std::vector<size_t>& indices) const {
  const auto& ex = splits_.at(split);
  if (config_.padding_free) return collate_padding_free(ex, indices);
  size_t width = 1;
  for (size_t i : indices) width = std::max(width, ex[i].ids.size());
  const int64_t b = static_cast<int64_t>(indices.size()), t = static_cast<int64_t>(width);
  auto ids = torch::full({b, t}, pad_id_, torch::kInt64);
  auto attn = torch::zeros({b, t}, torch::kInt64);
  auto loss_mask = torch::zeros({b, t}, torch::kInt64);
  const bool packed = !ex[indices.front()].positions.empty();
  torch::Tensor positions, documents;
  if (packed) {
    positions = torch::ones({b, t}, torch::kInt64);
    documents = torch::full({b, t}, -1, torch::kInt64);
  }
  auto* pi = ids.data_ptr<int64_t>();
  auto* pa = attn.data_ptr<int64_t>();
  auto* pl = loss_mask.data_ptr<int64_t>();
  for (int64_t r = 0; r < b; ++r) {
    const auto& e = ex[indices[static_cast<size_t>(r)]];
    for (size_t j = 0; j < e.ids.size(); ++j) {
      pi[r * t + static_cast<int64_t>(j)] = e.ids[j];
      pa[r * t + static_cast<int64_t>(j)] = 1;
      pl[r * t + static_cast<int64_t>(j)] = e.loss_mask[j];
    }
    if (packed) {
      positions[r].narrow(0, 0, static_cast<int64_t>(e.ids.size())).copy_(torch::tensor(e.positions, torch::kInt64));
      documents[r].narrow(0, 0, static_cast<int64_t>(e.ids.size())).copy_(torch::tensor(e.documents, torch::kInt64));
    }
  }
  engine::TensorMap out = {{"input_ids", ids}, {"attention_mask", attn}, {"loss_mask", loss_mask}};
  // Final hidden states are needed only from the position that predicts the
  // first target on (a prompt's last token): the model's last layer skips
  // the rest.
  for (auto& [k, v] : engine::rows_outputs_from(engine::first_predicting(loss_mask), t)) out[k] = v;
  if (packed) {
    out["position_ids"] = positions;
    out["document_ids"] = documents;
  }
  return out;
}

engine::TensorMap SFTTrainer::collate_padding_free(const std::vector<SFTExample>& ex, const std::vector<size_t>& indices) {
  // The batch as one row: each example (or each document of a packed one)
  // keeps its own positions and attends only within itself, and its first
  // token is no target, so the loss is that of the padded batch.
  std::vector<int64_t> ids, loss_mask, positions, documents;
  int64_t doc = 0;
  for (size_t i : indices) {
    const auto& e = ex[i];
    const bool packed = !e.positions.empty();
    int64_t prev_doc = packed ? e.documents.front() : 0;
    for (size_t t = 0; t < e.ids.size(); ++t) {
      if (packed && e.documents[t] != prev_doc) {
        ++doc;
        prev_doc = e.documents[t];
      }
      ids.push_back(e.ids[t]);
      const int64_t pos = packed ? e.positions[t] : static_cast<int64_t>(t);
      loss_mask.push_back(pos == 0 ? 0 : e.loss_mask[t]);
      positions.push_back(pos);
      documents.push_back(doc);
    }
    ++doc;
  }
  auto row = [](const std::vector<int64_t>& v) { return torch::tensor(v, torch::kInt64).unsqueeze(0); };
  auto ids_t = row(ids);
  return {{"input_ids", ids_t},
          {"attention_mask", torch::ones_like(ids_t)},
          {"loss_mask", row(loss_mask)},
          {"position_ids", row(positions)},
          {"document_ids", row(documents)}};
}

double SFTTrainer::num_items(const engine::TensorMap& batch) const {
  // Targets are the tokens from position 1 on that carry loss.
  return batch.at("loss_mask").slice(1, 1).sum().item<double>();
}

engine::LossOutput SFTTrainer::loss(engine::Engine& engine, const engine::TensorMap& batch) {
  const auto& ids = batch.at("input_ids");
  // Padding is on the right, so unpacked rows need no position ids; packed
  // rows restart positions at each document and attend within it.
  const bool packed = batch.count("document_ids") != 0;
  model::Batch in{ids, batch.at("attention_mask"), packed ? batch.at("position_ids") : torch::Tensor(),
                  packed ? batch.at("document_ids") : torch::Tensor()};
  // Hidden states from position `from` on (the tokens before predict no target).
  in.outputs_from = engine::host_count(batch, "outputs_from");
  const int64_t from = in.outputs_from;
  auto hidden = engine.forward(engine::Role::Policy, in);
  auto targets = ids.slice(1, from + 1);
  auto mask = batch.at("loss_mask").slice(1, from + 1);
  auto lp = engine.logprobs(engine::Role::Policy, hidden.slice(1, 0, hidden.size(1) - 1), targets, mask,
                            {.entropy = true, .accuracy = true});
  auto per_token = -lp.logps;
  if (config_.loss_type == "dft") per_token = per_token * lp.logps.detach().exp();
  engine::LossOutput out;
  out.loss_sum = per_token.sum();
  // TRL takes each micro-batch's ratio over all ranks' target tokens and
  // averages those ratios over the logging window. Device sums: read at
  // logging, not per micro-batch.
  const auto n = mask.sum();
  out.metrics.add_per_batch("mean_token_accuracy", lp.correct.sum(), n);
  out.metrics.add_per_batch("entropy", lp.entropy.sum(), n);
  return out;
}

int run_sft(const SFTConfig& c) {
  auto [tok, tmpl] = load_text_inputs(c, "sft", c.chat_template_path);
  std::map<std::string, std::vector<SFTExample>> splits;
  splits["train"] = prepare_sft_split(c, tok, tmpl ? &*tmpl : nullptr, c.dataset_train_split, true);
  if (c.eval_strategy != "no")
    splits["test"] = prepare_sft_split(c, tok, tmpl ? &*tmpl : nullptr, c.dataset_test_split, true);
  const int64_t pad = resolve_pad_id(tok, c.pad_token, "sft");
  engine::Engine engine(c, engine::load_policy(c, model::HeadKind::CausalLM), "sft");
  SFTTrainer trainer(c, std::move(splits), pad);
  return train_to_exit_code(engine, trainer);
}

}  // namespace trlx::trainers
