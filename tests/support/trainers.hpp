#pragma once
// What the tests that build trainer configs and run the engine share: the
// tiny model, configs built from flags as the command line builds them, and
// a trainer that stops a run at a given step, and one whose gradients overflow. Include Catch first.
#include <filesystem>
#include <map>
#include <memory>
#include <string>
#include <utility>
#include <vector>

#include "config/loader.hpp"
#include "dist/comm/communicator.hpp"
#include "engine/engine.hpp"
#include "model/loading.hpp"
#include "support.hpp"
#include "text/template/chat_template.hpp"
#include "text/tokenizer/tokenizer.hpp"
#include "trainers/sft.hpp"
#include "trainers/sft_config.hpp"

namespace trlx::test {

using Flags = std::vector<std::pair<std::string, std::string>>;

// `a` then `b`: a later flag overrides an earlier one.
inline Flags operator+(Flags a, const Flags& b) {
  a.insert(a.end(), b.begin(), b.end());
  return a;
}

// A trainer's config on the tiny model and `dataset`, fp32 and without
// gradient checkpointing (fast, exact on a CPU), then `flags` in order.
template <class Config>
Config trainer_config(const config::Schema& schema, const std::filesystem::path& dataset, const Flags& flags) {
  config::ConfigLoader loader(schema);
  const Flags base = {{"model_name_or_path", tiny_model().string()},
                      {"dataset_name", dataset.string()},
                      {"bf16", "false"},
                      {"gradient_checkpointing", "false"}};
  for (const auto& [k, v] : base + flags) loader.apply_flag(k, {v});
  Config c;
  loader.resolve(&c);
  return c;
}

// SFT on the 8 rows of tests/data/sft/data (the rows TRL's first-step
// fixtures train on) at max_length 128, then `flags`.
inline trainers::SFTConfig sft_config(const Flags& flags) {
  return trainer_config<trainers::SFTConfig>(trainers::sft_schema(), data_dir() / "sft" / "data",
                                             Flags{{"max_length", "128"}} + flags);
}

// sft_config at lr 1e-3, the ranks comparing their reduced gradients every
// step: the distributed tests' SFT runs.
inline trainers::SFTConfig synced_sft_config(const Flags& flags) {
  return sft_config(Flags{{"learning_rate", "1e-3"}, {"debug_check_grad_sync_steps", "1"}} + flags);
}

// An SFT trainer on the config's train split (the tiny model's tokenizer and
// chat template) and an engine training the tiny model, on `comm` (null: the
// launcher's, one process in the unit tests).
struct SFTRun {
  std::unique_ptr<engine::Engine> engine;
  std::unique_ptr<trainers::SFTTrainer> trainer;
};
// `own_weights`: the weights in memory of their own rather than views of
// the mapped checkpoint file (so an allocator sees them).
inline SFTRun make_sft(const trainers::SFTConfig& c, std::shared_ptr<dist::Communicator> comm = nullptr,
                       bool own_weights = false) {
  auto tok = text::Tokenizer::from_dir(tiny_model());
  text::ChatTemplate tmpl(tok.chat_template(), "tiny-model");
  std::map<std::string, std::vector<trainers::SFTExample>> splits;
  splits["train"] = trainers::prepare_sft_split(c, tok, &tmpl, "train", true);
  auto policy = model::load_language_model(tiny_model(), model::HeadKind::CausalLM);
  if (own_weights) {
    torch::NoGradGuard ng;
    for (auto& p : policy->parameters()) p.set_data(p.detach().clone());
  }
  SFTRun r;
  r.engine = std::make_unique<engine::Engine>(c, policy, "sft", tiny_model(), std::nullopt, std::move(comm));
  r.trainer = std::make_unique<trainers::SFTTrainer>(c, std::move(splits), *tok.pad_token_id());
  return r;
}

// `inner` as it is: the base of the wrappers below, which change its loss
// (an offline trainer's: the online hooks are not forwarded).
struct Wrapped : engine::Trainer {
  engine::Trainer& inner;
  explicit Wrapped(engine::Trainer& i) : inner(i) {}
  std::string name() const override { return inner.name(); }
  size_t num_examples(const std::string& s) const override { return inner.num_examples(s); }
  engine::TensorMap collate(const std::string& s, const std::vector<size_t>& i) const override {
    return inner.collate(s, i);
  }
  double num_items(const engine::TensorMap& b) const override { return inner.num_items(b); }
  engine::LossOutput loss(engine::Engine& e, const engine::TensorMap& b) override { return inner.loss(e, b); }
};

// `inner`, but asks the run to stop during step `at`; the engine honours a
// stop request once the step ends, so the run stops (and saves) after step
// `at`, as after a SIGTERM.
struct StopAt : Wrapped {
  int64_t at;
  StopAt(engine::Trainer& i, int64_t a) : Wrapped(i), at(a) {}
  engine::LossOutput loss(engine::Engine& e, const engine::TensorMap& b) override {
    if (e.global_step() == at - 1) engine::Engine::request_stop();
    return inner.loss(e, b);
  }
};

// `inner`, with its loss multiplied by 1e38 on the steps before `until`:
// times the loss scale that overflows float32, so those steps' gradients are
// infinite, as an fp16 overflow leaves them.
struct OverflowUntil : Wrapped {
  int64_t until;
  OverflowUntil(engine::Trainer& i, int64_t u) : Wrapped(i), until(u) {}
  engine::LossOutput loss(engine::Engine& e, const engine::TensorMap& b) override {
    auto out = inner.loss(e, b);
    if (e.global_step() < until) out.loss_sum = out.loss_sum * 1e38;
    return out;
  }
};

}  // namespace trlx::test
