// SFT's padding_free and shuffle_dataset, and disable_dropout, each against
// the run without them.
#include "support/engine_probe.hpp"
#include "catch_torch.hpp"

#include <numeric>

#include "config/loader.hpp"
#include "engine/engine.hpp"
#include "model/loading.hpp"
#include "support.hpp"
#include "text/template/chat_template.hpp"
#include "text/tokenizer/tokenizer.hpp"
#include "trainers/sft.hpp"

using namespace trlx;
namespace fs = std::filesystem;

namespace {

using test::tiny_model;

trainers::SFTConfig sft_config(const std::vector<std::pair<std::string, std::string>>& flags) {
  config::ConfigLoader loader(trainers::sft_schema());
  loader.apply_flag("model_name_or_path", {tiny_model().string()});
  loader.apply_flag("dataset_name", {(test::data_dir() / "sft" / "data").string()});
  loader.apply_flag("bf16", {"false"});
  loader.apply_flag("gradient_checkpointing", {"false"});
  loader.apply_flag("max_length", {"64"});
  loader.apply_flag("max_steps", {"1"});
  for (const auto& [k, v] : flags) loader.apply_flag(k, {v});
  trainers::SFTConfig c;
  loader.resolve(&c);
  return c;
}

struct Setup {
  std::unique_ptr<engine::Engine> engine;
  std::unique_ptr<trainers::SFTTrainer> trainer;
  std::vector<trainers::SFTExample> examples;
};

Setup make(const trainers::SFTConfig& c) {
  auto tok = text::Tokenizer::from_dir(tiny_model());
  text::ChatTemplate tmpl(tok.chat_template(), "tiny-model");
  Setup s;
  s.examples = trainers::prepare_sft_split(c, tok, &tmpl, "train", true);
  s.engine = std::make_unique<engine::Engine>(c, model::load_language_model(tiny_model(), model::HeadKind::CausalLM),
                                              "sft", tiny_model());
  s.trainer = std::make_unique<trainers::SFTTrainer>(c, std::map<std::string, std::vector<trainers::SFTExample>>{
                                                            {"train", s.examples}},
                                                     *tok.pad_token_id());
  return s;
}

double max_param_diff(model::LanguageModelImpl& a, model::LanguageModelImpl& b) {
  auto pb = b.named_parameters(true);
  double worst = 0;
  for (const auto& p : a.named_parameters(true))
    worst = std::max(worst, (p.value() - pb[p.key()]).abs().max().item<double>());
  return worst;
}

}  // namespace

TEST_CASE("SFT padding_free: one row, positions restarting per example, the padded loss and update",
          "[engine][sft][padding_free]") {
  for (const bool packing : {false, true}) {
    INFO("packing " << packing);
    const std::string p = packing ? "true" : "false";
    auto padded = make(sft_config({{"packing", p}, {"per_device_train_batch_size", "8"}}));
    auto flat = make(sft_config({{"packing", p}, {"padding_free", "true"}, {"per_device_train_batch_size", "8"}}));
    std::vector<size_t> all(padded.examples.size());
    std::iota(all.begin(), all.end(), 0);
    auto bp = padded.trainer->collate("train", all);
    auto bf = flat.trainer->collate("train", all);
    size_t tokens = 0;
    for (const auto& e : flat.examples) tokens += e.ids.size();
    CHECK(bf.at("input_ids").sizes() == torch::IntArrayRef({1, static_cast<int64_t>(tokens)}));
    CHECK(bp.at("attention_mask").sum().item<int64_t>() == static_cast<int64_t>(tokens));
    // Positions restart at each example (each document when packed) and
    // documents are numbered along the row.
    const auto pos = bf.at("position_ids")[0], doc = bf.at("document_ids")[0];
    const int64_t starts = (pos == 0).sum().item<int64_t>();
    CHECK(starts == doc.max().item<int64_t>() + 1);
    CHECK(torch::equal(doc.index({pos == 0}), torch::arange(starts)));
    if (!packing) CHECK(starts == static_cast<int64_t>(flat.examples.size()));
    CHECK(padded.trainer->num_items(bp) == flat.trainer->num_items(bf));
    auto [l1, g1] = trlx::engine::EngineProbe::step_on(*padded.engine, *padded.trainer, {all});
    auto [l2, g2] = trlx::engine::EngineProbe::step_on(*flat.engine, *flat.trainer, {all});
    CHECK(l2 == Approx(l1).epsilon(1e-5));
    CHECK(g2 == Approx(g1).epsilon(1e-4));
    CHECK(max_param_diff(trlx::engine::EngineProbe::policy(*padded.engine), trlx::engine::EngineProbe::policy(*flat.engine)) < 1e-5);
  }
}

TEST_CASE("SFT shuffle_dataset: a seeded permutation of the examples, before packing too", "[engine][sft][shuffle]") {
  const auto plain = make(sft_config({})).examples;
  const auto a = make(sft_config({{"shuffle_dataset", "true"}})).examples;
  const auto b = make(sft_config({{"shuffle_dataset", "true"}})).examples;
  const auto other_seed = make(sft_config({{"shuffle_dataset", "true"}, {"seed", "7"}})).examples;
  auto rows = [](const std::vector<trainers::SFTExample>& v) {
    std::vector<size_t> r;
    for (const auto& e : v) r.push_back(e.source_row);
    return r;
  };
  CHECK(rows(a) == rows(b));
  CHECK(rows(a) != rows(plain));
  CHECK(rows(a) != rows(other_seed));
  auto sorted = rows(a);
  std::sort(sorted.begin(), sorted.end());
  CHECK(sorted == rows(plain));
  // Packing sorts by length, but examples of equal length keep their order,
  // and the packed sequences are shuffled afterwards.
  const auto packed = make(sft_config({{"packing", "true"}})).examples;
  const auto packed_shuffled = make(sft_config({{"packing", "true"}, {"shuffle_dataset", "true"}})).examples;
  CHECK(packed.size() == packed_shuffled.size());
  size_t tokens_a = 0, tokens_b = 0;
  for (const auto& e : packed) tokens_a += e.ids.size();
  for (const auto& e : packed_shuffled) tokens_b += e.ids.size();
  CHECK(tokens_a == tokens_b);
}

TEST_CASE("disable_dropout turns LoRA dropout off: two training-mode forwards then agree", "[engine][lora][dropout]") {
  for (const bool disable : {true, false}) {
    INFO("disable_dropout " << disable);
    auto s = make(sft_config({{"use_peft", "true"},
                              {"lora_dropout", "0.5"},
                              {"lora_target_modules", "all-linear"},
                              {"disable_dropout", disable ? "true" : "false"}}));
    // Fresh adapters have B = 0 and add nothing; give them weight so that
    // dropout on their input shows in the output.
    {
      torch::NoGradGuard no_grad;
      for (const auto& p : trlx::engine::EngineProbe::policy(*s.engine).named_parameters(true))
        if (p.key().find("lora_B") != std::string::npos) p.value().normal_(0, 0.5);
    }
    s.engine->set_training(true);
    auto batch = s.trainer->collate("train", {0, 1});
    model::Batch b;
    b.input_ids = batch.at("input_ids");
    b.attention_mask = batch.at("attention_mask");
    torch::NoGradGuard no_grad;
    auto h1 = s.engine->forward(engine::Role::Policy, b);
    auto h2 = s.engine->forward(engine::Role::Policy, b);
    CHECK(torch::equal(h1, h2) == disable);
  }
}

TEST_CASE("SFT collation cuts the forward at the position that predicts the first completion token",
          "[engine][sft][outputs_from]") {
  auto c = sft_config({});
  auto ex = [](std::vector<int64_t> mask) {
    trainers::SFTExample e;
    e.ids.assign(mask.size(), 5);
    e.loss_mask.assign(mask.begin(), mask.end());
    return e;
  };
  // Completions start at 4 and 3: the shortest prompt's last token is 2.
  trainers::SFTTrainer t(c, {{"train", {ex({0, 0, 0, 0, 1, 1}), ex({0, 0, 0, 1}), ex({1, 1, 1, 1, 1})}}}, 0);
  auto batch = t.collate("train", {0, 1});
  CHECK(engine::host_count(batch, "outputs_from") == 2);
  // A row that learns from its first token on leaves nothing to cut.
  CHECK_FALSE(t.collate("train", {0, 2}).count("outputs_from"));
}
