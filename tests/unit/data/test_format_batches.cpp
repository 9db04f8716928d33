// The same dataset as JSON Lines, Parquet and Arrow (save_to_disk) gives the
// same training batches: SFT prompt-completion, SFT conversations and DPO
// preference pairs, tokenized with the tiny model's tokenizer and chat
// template (tests/data/formats/, scripts/fixtures/data_formats_fixtures.py).
#include <catch2/catch.hpp>

#include "support/trainers.hpp"
#include "text/data/columnar.hpp"
#include "trainers/dpo.hpp"
#include "trainers/sft.hpp"

using namespace trlx;
namespace fs = std::filesystem;

namespace {

fs::path formats() { return test::data_dir() / "formats"; }

const std::vector<std::string>& variants(const std::string& name) {
  static std::map<std::string, std::vector<std::string>> cache;
  auto& v = cache[name];
  if (v.empty()) v = {name + ".jsonl", name + ".parquet", name + "_arrow"};
  return v;
}

void check_same_batch(const engine::TensorMap& got, const engine::TensorMap& want,
                      const std::string& what) {
  INFO(what);
  REQUIRE(got.size() == want.size());
  for (const auto& [key, tensor] : want) {
    INFO(key);
    REQUIRE(got.count(key) == 1);
    CHECK(got.at(key).sizes() == tensor.sizes());
    CHECK(got.at(key).dtype() == tensor.dtype());
    CHECK(torch::equal(got.at(key), tensor));
  }
}

std::vector<size_t> all_rows(size_t n) {
  std::vector<size_t> idx(n);
  for (size_t i = 0; i < n; ++i) idx[i] = i;
  return idx;
}

// Every SFT example and batches of 4 of a dataset, for each file format.
void check_sft_formats(const std::string& name, size_t rows) {
  auto tok = text::Tokenizer::from_dir(test::tiny_model());
  text::ChatTemplate tmpl(tok.chat_template(), "tiny-model");
  std::vector<std::vector<trainers::SFTExample>> examples;
  std::vector<engine::TensorMap> batches;
  for (const auto& file : variants(name)) {
    const auto c = test::trainer_config<trainers::SFTConfig>(
        trainers::sft_schema(), formats() / file, {{"max_length", "64"}});
    auto ex = trainers::prepare_sft_split(c, tok, &tmpl, "train", true);
    // Every row makes an example, but SFT's own drops (the same for all formats).
    REQUIRE(ex.size() >= rows - 1);
    REQUIRE(ex.size() == (examples.empty() ? ex.size() : examples[0].size()));
    std::map<std::string, std::vector<trainers::SFTExample>> splits{{"train", ex}};
    trainers::SFTTrainer trainer(c, std::move(splits), *tok.pad_token_id());
    batches.push_back(trainer.collate("train", all_rows(ex.size())));
    examples.push_back(std::move(ex));
  }
  for (size_t v = 1; v < examples.size(); ++v) {
    const std::string what = variants(name)[v] + " against " + variants(name)[0];
    for (size_t i = 0; i < examples[0].size(); ++i) {
      INFO(what << " example " << i);
      CHECK(examples[v][i].ids == examples[0][i].ids);
      CHECK(examples[v][i].loss_mask == examples[0][i].loss_mask);
      CHECK(examples[v][i].source_row == examples[0][i].source_row);
    }
    check_same_batch(batches[v], batches[0], what);
  }
}

}  // namespace

TEST_CASE("format batches: SFT prompt-completion is the same from JSONL, Parquet and Arrow",
          "[data][formats]") {
  if (!data::detail::columnar_built())
    TRLX_SKIP("this build has no Apache Arrow (no pyarrow found)");
  check_sft_formats("prompt_completion", 10);
}

TEST_CASE("format batches: SFT conversations are the same from JSONL, Parquet and Arrow",
          "[data][formats]") {
  if (!data::detail::columnar_built())
    TRLX_SKIP("this build has no Apache Arrow (no pyarrow found)");
  check_sft_formats("conversational", 6);
}

TEST_CASE("format batches: DPO preference pairs are the same from JSONL, Parquet and Arrow",
          "[data][formats]") {
  if (!data::detail::columnar_built())
    TRLX_SKIP("this build has no Apache Arrow (no pyarrow found)");
  auto tok = text::Tokenizer::from_dir(test::tiny_model());
  text::ChatTemplate tmpl(tok.chat_template(), "tiny-model");
  const int64_t pad = *tok.pad_token_id();
  std::vector<trainers::PreferenceSplit> splits;
  std::vector<engine::TensorMap> batches;
  for (const auto& file : variants("preference")) {
    trainers::PreferenceDataOptions o;
    o.dataset_name = (formats() / file).string();
    o.max_length = 64;
    auto split = trainers::prepare_preference_split(o, tok, &tmpl, "train", true);
    REQUIRE(split.examples.size() == 6);
    batches.push_back(
        trainers::collate_pairs(split.examples, all_rows(6), pad, o.max_length, "keep_start"));
    splits.push_back(std::move(split));
  }
  for (size_t v = 1; v < splits.size(); ++v) {
    const std::string what = variants("preference")[v] + " against preference.jsonl";
    for (size_t i = 0; i < 6; ++i) {
      INFO(what << " pair " << i);
      CHECK(splits[v].examples[i].prompt_ids == splits[0].examples[i].prompt_ids);
      CHECK(splits[v].examples[i].chosen_ids == splits[0].examples[i].chosen_ids);
      CHECK(splits[v].examples[i].rejected_ids == splits[0].examples[i].rejected_ids);
    }
    check_same_batch(batches[v], batches[0], what);
  }
}
