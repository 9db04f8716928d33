// The batched generator against transformers' generate(): the processed
// sampling distributions step by step, greedy continuations under every
// batch layout (all rows at once, continuous batching through fewer slots,
// samples sharing a prefill), stopping, and refused options.
#include "catch_torch.hpp"

#include <fstream>
#include <nlohmann/json.hpp>

#include "core/error.hpp"
#include "io/safetensors.hpp"
#include "model/generate.hpp"
#include "model/loading.hpp"
#include "helpers.hpp"
#include "support.hpp"

using namespace trlx;
using Catch::Matchers::Contains;

namespace {

std::filesystem::path fixtures() { return test::data_dir() / "generation"; }
using model_test::models;

using model_test::read_json;

std::vector<std::vector<int64_t>> rows_of(const nlohmann::json& j) { return j.get<std::vector<std::vector<int64_t>>>(); }

}  // namespace

TEST_CASE("each processed sampling distribution equals transformers' for the same logits", "[generate][golden]") {
  // scripts/fixtures/generation_fixtures.py: the raw logits generate() saw,
  // the scores it sampled from, and the tokens the penalty looked at.
  auto tensors = io::Checkpoint::open(fixtures() / "processors.safetensors");
  for (const auto& s : read_json(fixtures() / "processors.json")) {
    const std::string name = s["name"];
    INFO(name);
    model::GenerationOptions o;
    o.do_sample = s.value("do_sample", true);
    o.temperature = s.value("temperature", 1.0);
    o.top_k = s.value("top_k", 0);
    o.top_p = s.value("top_p", 1.0);
    if (s.contains("min_p")) o.min_p = s["min_p"].get<double>();
    o.repetition_penalty = s.value("repetition_penalty", 1.0);
    o.no_repeat_ngram_size = s.value("no_repeat_ngram_size", 0);
    if (s.contains("bad_words_ids")) o.bad_words_ids = s["bad_words_ids"].get<std::vector<std::vector<int64_t>>>();
    if (s.contains("suppress_tokens")) o.suppress_tokens = s["suppress_tokens"].get<std::vector<int64_t>>();
    auto logits = tensors.get(name + ".logits", true);
    auto scores = tensors.get(name + ".scores", true);
    auto sequences = tensors.get(name + ".sequences", true);
    const int64_t prompt = s["prompt_length"];
    for (int64_t step = 0; step < s["steps"].get<int64_t>(); ++step) {
      INFO("step " << step);
      auto seen = sequences.narrow(1, 0, prompt + step);
      std::vector<std::vector<int64_t>> banned;
      if (model::bans_by_sequence(o))
        for (int64_t r = 0; r < seen.size(0); ++r) {
          auto row = seen[r].contiguous();
          banned.push_back(model::banned_after({row.data_ptr<int64_t>(), row.data_ptr<int64_t>() + row.numel()}, o));
        }
      auto mine = model::process_logits(logits[step].clone(), seen, o, banned);
      auto ref = scores[step];
      // The same tokens removed, and the same distribution over the rest.
      const auto kept = torch::isfinite(ref);
      CHECK(torch::equal(torch::isfinite(mine), kept));
      if (o.do_sample) {
        CHECK((mine.softmax(-1) - ref.softmax(-1)).abs().max().item<double>() < 1e-6);
      } else {
        CHECK((mine.masked_select(kept) - ref.masked_select(kept)).abs().max().item<double>() < 1e-6);
      }
    }
  }
}

TEST_CASE("greedy continuations equal transformers' generate under every batch layout", "[generate][golden]") {
  const auto j = read_json(fixtures() / "greedy.json");
  const auto prompts = rows_of(j["prompts"]);
  for (const auto& [name, expected_json] : j["models"].items()) {
    const auto expected = rows_of(expected_json);
    auto model = model::load_language_model(models() / name, model::HeadKind::CausalLM);
    model->eval();
    model::GenerationOptions o;
    o.max_new_tokens = j["max_new_tokens"];
    o.eos_token_ids = {j["eos_token_id"].get<int64_t>()};
    for (int64_t slots : {0, 1, 2, 3}) {
      // 0: every row at once; fewer slots: rows wait and take a finished
      // row's slot (continuous batching).
      INFO(name << ", " << slots << " slot(s)");
      o.max_batch = slots;
      for (bool fixed : {false, true}) {
        // Fixed shapes (every decode step reads the whole cache, no slot
        // compaction: what a captured CUDA graph replays) give the same tokens.
        INFO("fixed_shapes " << fixed);
        o.fixed_shapes = fixed;
        auto g = model::generate(*model, prompts, o);
        CHECK(g.completions == expected);
        for (size_t r = 0; r < prompts.size(); ++r) {
          const bool eos = !expected[r].empty() && expected[r].back() == 2;
          CHECK(g.finish[r] == (eos ? model::FinishReason::Eos : model::FinishReason::Length));
        }
      }
      o.fixed_shapes = false;
    }
    // Three samples per prompt share its prefill: every greedy sample is the
    // prompt's greedy continuation, and each prompt runs through the model once.
    INFO(name << ", 3 samples per prompt");
    o.max_batch = 0;
    o.num_return_sequences = 3;
    auto g = model::generate(*model, prompts, o);
    REQUIRE(g.completions.size() == prompts.size() * 3);
    int64_t prompt_tokens = 0;
    for (size_t p = 0; p < prompts.size(); ++p) {
      prompt_tokens += static_cast<int64_t>(prompts[p].size());
      for (size_t k = 0; k < 3; ++k) CHECK(g.completions[p * 3 + k] == expected[p]);
    }
    CHECK(g.prefill_tokens == prompt_tokens);
    o.max_batch = 4;  // rounded up to 6 slots: two prompts at a time
    CHECK(model::generate(*model, prompts, o).completions == g.completions);
  }
}

TEST_CASE("no_repeat_ngram_size, bad_words_ids and suppress_tokens in generate() equal transformers' greedy",
          "[generate][golden]") {
  const auto j = read_json(fixtures() / "greedy.json")["rules"];
  auto model = model::load_language_model(models() / j["model"].get<std::string>(), model::HeadKind::CausalLM);
  model->eval();
  const auto prompts = rows_of(j["prompts"]);
  const auto expected = rows_of(j["completions"]);
  model::GenerationOptions o;
  o.max_new_tokens = 20;
  o.eos_token_ids = {j["eos_token_id"].get<int64_t>()};
  o.no_repeat_ngram_size = j["options"]["no_repeat_ngram_size"];
  o.bad_words_ids = j["options"]["bad_words_ids"].get<std::vector<std::vector<int64_t>>>();
  o.suppress_tokens = j["options"]["suppress_tokens"].get<std::vector<int64_t>>();
  for (int64_t slots : {0, 1, 3})
    for (bool fixed : {false, true}) {
      // Each slot's rules read its own row's tokens, whichever slot it took.
      INFO(slots << " slot(s), fixed_shapes " << fixed);
      o.max_batch = slots;
      o.fixed_shapes = fixed;
      CHECK(model::generate(*model, prompts, o).completions == expected);
    }
  // Without the rules the continuations differ (the fixture exercises them).
  o.no_repeat_ngram_size = 0;
  o.bad_words_ids.clear();
  o.suppress_tokens.clear();
  CHECK(model::generate(*model, prompts, o).completions != expected);
}

TEST_CASE("a stop string ends a completion once its text appears, however long the completion", "[generate]") {
  // Token ids stand for their decimal text plus a space.
  auto decode = [](const std::vector<int64_t>& ids) {
    std::string s;
    for (auto id : ids) s += std::to_string(id) + " ";
    return s;
  };
  auto stop = model::stop_on_strings({"17 4", "99"}, decode);
  CHECK_FALSE(stop({1, 2, 3}));
  CHECK(stop({1, 2, 17, 4}));
  CHECK(stop({1, 2, 17, 45}));  // the last token overhangs the stop text, as transformers allows
  CHECK(stop({5, 99}));
  std::vector<int64_t> long_one(5000, 3);
  CHECK_FALSE(stop(long_one));
  long_one.push_back(17);
  long_one.push_back(40);
  CHECK(stop(long_one));
}

TEST_CASE("sampling is seeded: the same seed and layout give the same completions", "[generate]") {
  auto model = model::load_language_model(models() / "qwen2", model::HeadKind::CausalLM);
  model->eval();
  model::GenerationOptions o;
  o.do_sample = true;
  o.max_new_tokens = 12;
  o.temperature = 0.9;
  o.top_p = 0.95;
  o.num_return_sequences = 4;
  o.seed = 1234;
  const std::vector<std::vector<int64_t>> prompts = {{5, 6, 7}, {9}, {40, 41, 42, 43}};
  auto a = model::generate(*model, prompts, o);
  CHECK(a.completions == model::generate(*model, prompts, o).completions);
  // The samples of one prompt differ from each other (they share the
  // prefill, not the draws).
  CHECK(a.completions[0] != a.completions[1]);
  o.seed = 99;
  CHECK(a.completions != model::generate(*model, prompts, o).completions);
  o.max_batch = 4;
  o.seed = 1234;
  CHECK(model::generate(*model, prompts, o).completions == model::generate(*model, prompts, o).completions);
  // Fixed shapes draw the same tokens (every row runs to max_new_tokens
  // here, so the dynamic path compacts no slot either).
  for (int64_t slots : {0, 4}) {
    INFO(slots << " slots");
    o.max_batch = slots;
    o.fixed_shapes = false;
    auto dynamic = model::generate(*model, prompts, o);
    o.fixed_shapes = true;
    auto fixed = model::generate(*model, prompts, o);
    CHECK(fixed.completions == dynamic.completions);
    CHECK(fixed.steps == dynamic.steps);
  }
}

TEST_CASE("sampled tokens follow the processed distribution, and tokens it excludes are never drawn",
          "[generate]") {
  // One token after one prompt, drawn many times: each token's share of the
  // draws is its probability under the model's logits at temperature 0.1
  // (within 5 standard errors), and with top_k 3 only the 3 likeliest
  // tokens are ever drawn.
  auto model = model::load_language_model(models() / "qwen2", model::HeadKind::CausalLM);
  model->eval();
  const std::vector<int64_t> prompt = {5, 6, 7};
  torch::Tensor probs;
  {
    torch::NoGradGuard ng;
    const auto ids = torch::tensor(prompt, torch::kInt64).unsqueeze(0);
    const auto logits = model->forward(model::Batch{ids, torch::ones_like(ids), {}, {}});
    probs = (logits[0][-1].to(torch::kFloat64) / 0.1).softmax(-1);
  }
  const int64_t n = 6000;
  model::GenerationOptions o;
  o.do_sample = true;
  o.max_new_tokens = 1;
  o.temperature = 0.1;
  o.num_return_sequences = n;
  o.seed = 7;
  auto counts = torch::zeros_like(probs);
  for (const auto& c : model::generate(*model, {prompt}, o).completions) counts[c.at(0)] += 1;
  const auto share = counts / static_cast<double>(n);
  const auto bound = 5 * (probs * (1 - probs) / static_cast<double>(n)).sqrt() + 1e-3;
  INFO("largest |share - p| over bound " << ((share - probs).abs() / bound).max().item<double>());
  CHECK(((share - probs).abs() <= bound).all().item<bool>());
  CHECK(probs.max().item<double>() > 0.05);  // a distribution far from uniform, so the check tells

  o.top_k = 3;
  const auto top = std::get<1>(probs.topk(3));
  for (const auto& c : model::generate(*model, {prompt}, o).completions)
    CHECK((top == c.at(0)).any().item<bool>());
}

TEST_CASE("rows stop at a stop token, at a stop rule and at max_new_tokens, each with its reason", "[generate]") {
  auto model = model::load_language_model(models() / "qwen2", model::HeadKind::CausalLM);
  model->eval();
  const auto j = read_json(fixtures() / "greedy.json");
  const auto prompts = rows_of(j["prompts"]);
  const auto greedy = rows_of(j["models"]["qwen2"]);
  model::GenerationOptions o;
  o.max_new_tokens = 5;
  auto g = model::generate(*model, {prompts[0]}, o);
  CHECK(g.finish[0] == model::FinishReason::Length);
  CHECK(g.completions[0] == std::vector<int64_t>(greedy[0].begin(), greedy[0].begin() + 5));
  o.stop_token_ids = {greedy[0][1]};
  g = model::generate(*model, {prompts[0]}, o);
  CHECK(g.finish[0] == model::FinishReason::Stop);
  CHECK(g.completions[0] == std::vector<int64_t>(greedy[0].begin(), greedy[0].begin() + 2));
  CHECK(std::string(model::finish_reason_name(g.finish[0])) == "stop");
}

TEST_CASE("bad generation settings are refused naming the field", "[generate][errors]") {
  auto model = model::load_language_model(models() / "qwen2", model::HeadKind::CausalLM);
  const std::vector<std::vector<int64_t>> prompts = {{5, 6, 7}};
  auto error_with = [&](const std::function<void(model::GenerationOptions&)>& set) {
    model::GenerationOptions o;
    set(o);
    return test::input_error_of([&] { model::generate(*model, prompts, o); });
  };
  CHECK_THAT(error_with([](auto& o) { o.max_new_tokens = 0; }), Contains("max_new_tokens"));
  CHECK_THAT(error_with([](auto& o) { o.top_p = 1.5; }), Contains("top_p"));
  CHECK_THAT(error_with([](auto& o) { o.top_p = 0; }), Contains("top_p"));
  CHECK_THAT(error_with([](auto& o) { o.temperature = 0; }), Contains("temperature"));
  CHECK_THAT(error_with([](auto& o) { o.stop_token_ids = {96}; }), Contains("stop_token_ids"));
  CHECK_THAT(error_with([](auto& o) { o.eos_token_ids = {-1}; }), Contains("eos_token_id"));
  CHECK_THAT(error_with([](auto& o) { o.num_return_sequences = 0; }), Contains("num_return_sequences"));
  CHECK_THAT(error_with([](auto& o) { o.suppress_tokens = {3, 96}; }), Contains("suppress_tokens"));
  CHECK_THAT(error_with([](auto& o) { o.bad_words_ids = {{3}, {}}; }), Contains("bad_words_ids"));
  CHECK_THAT(error_with([](auto& o) { o.bad_words_ids = {{3, 500}}; }), Contains("bad_words_ids"));
  CHECK_THAT(error_with([](auto& o) { o.no_repeat_ngram_size = -1; }), Contains("no_repeat_ngram_size"));
  // A prompt whose completion would run past the context.
  CHECK_THAT(error_with([](auto& o) {
               o.max_context = 64;
               o.max_new_tokens = 62;
             }),
             Contains("context of 64"));
  CHECK_THAT(test::input_error_of([&] { model::generate(*model, {{5, 600}}, {}); }), Contains("vocabulary"));
  CHECK_THAT(test::input_error_of([&] { model::generate(*model, {{}}, {}); }), Contains("empty"));
}
