// `trlx kto` against TRL 1.16's KTOTrainer (fixtures from
// scripts/fixtures/kto_reward_fixtures.py): the first optimizer steps' loss,
// grad norm and every logged metric; data preparation and bad input.
#include "catch_torch.hpp"

#include <fstream>
#include <regex>

#include "config/loader.hpp"
#include "core/error.hpp"
#include "support.hpp"
#include "trainer_fixture.hpp"
#include "text/tokenizer/tokenizer.hpp"
#include "trainers/kto.hpp"

using namespace trlx;
using Catch::Matchers::Contains;
namespace fs = std::filesystem;

namespace {

using test::tiny_model;
fs::path kto_data() { return test::data_dir() / "kto"; }

trainers::KTOConfig kto_config(const test::Flags& flags) {
  return test::trainer_config<trainers::KTOConfig>(trainers::kto_schema(), kto_data() / "train.jsonl", flags);
}

fs::path write_kto_rows(const std::string& name, const std::string& text) {
  return test::write_temp("trlx_kto_test_" + name + ".jsonl", text);
}

}  // namespace

TEST_CASE("kto: first 3 steps equal TRL's KTOTrainer (loss, grad norm, every metric)", "[trainers][kto][golden]") {
  test::Comparison cmp;
  const auto want = test::read_json(kto_data() / "parity.json");
  test::compare_steps(test::kto_steps(want, {}), want["steps"], "kto", cmp);
  CHECK(cmp.checked > 0);
}

TEST_CASE("kto: paired data is unpaired into a desirable and an undesirable row per pair", "[trainers][kto]") {
  auto tok = text::Tokenizer::from_dir(tiny_model());
  auto paired = write_kto_rows("paired", "{\"prompt\": \"Hi\", \"chosen\": \" yes\", \"rejected\": \" no\"}\n"
                                     "{\"prompt\": \"Ho\", \"chosen\": \" a\", \"rejected\": \" b\"}\n");
  auto split = trainers::prepare_kto_split(kto_config({{"dataset_name", paired.string()}}), tok, nullptr, "train", true);
  REQUIRE(split.examples.size() == 4);
  CHECK(split.examples[0].label);
  CHECK(split.examples[1].label);
  CHECK_FALSE(split.examples[2].label);
  CHECK(split.examples[0].completion_ids.back() == *tok.eos_token_id());
  fs::remove(paired);
}

TEST_CASE("kto: class imbalance advice as TRL's KTOTrainer gives it", "[trainers][kto][golden]") {
  // The weight ranges in the advice, as numbers: [lo, hi] after `key in [`.
  auto range_after = [](const std::string& advice, const std::string& key) {
    const std::regex re("(^|[^n])" + key + " in \\[([^,\\]]+), ([^\\]]+)\\]");
    std::smatch m;
    INFO(advice);
    REQUIRE(std::regex_search(advice, m, re));
    return std::vector<double>{std::stod(m[2].str()), std::stod(m[3].str())};
  };
  const auto want = test::read_json(kto_data() / "class_imbalance.json");
  REQUIRE(want["cases"].size() >= 5);
  size_t advised = 0;
  for (const auto& c : want["cases"]) {
    const auto advice = trainers::kto_class_imbalance_advice(c["desirable"].get<size_t>(), c["undesirable"].get<size_t>(),
                                                             c["desirable_weight"].get<double>(),
                                                             c["undesirable_weight"].get<double>());
    INFO(c.dump() << "\ntrlx: " << advice);
    if (c["warning"].is_null()) {
      CHECK(advice.empty());
      continue;
    }
    ++advised;
    REQUIRE_FALSE(advice.empty());
    CHECK(range_after(advice, "desirable_weight") == c["desirable_range"].get<std::vector<double>>());
    CHECK(range_after(advice, "undesirable_weight") == c["undesirable_range"].get<std::vector<double>>());
  }
  CHECK(advised >= 3);
}

TEST_CASE("kto: KL sequences pair each prompt with the previous row's completion", "[trainers][kto]") {
  auto c = kto_config({});
  auto tok = text::Tokenizer::from_dir(tiny_model());
  std::map<std::string, std::vector<trainers::KTOExample>> splits;
  splits["train"] = trainers::prepare_kto_split(c, tok, nullptr, "train", true).examples;
  const auto ex = splits["train"];
  trainers::KTOTrainer trainer(c, std::move(splits), 0);
  auto b = trainer.collate("train", {0, 1, 2});
  auto row = [&](const torch::Tensor& t, int64_t r) {
    std::vector<int64_t> v;
    for (int64_t j = 0; j < t.size(1); ++j)
      if (b.at("KL_attention_mask")[r][j].item<int64_t>()) v.push_back(t[r][j].item<int64_t>());
    return v;
  };
  auto expect = ex[1].prompt_ids;
  expect.insert(expect.end(), ex[0].completion_ids.begin(), ex[0].completion_ids.end());
  CHECK(row(b.at("KL_input_ids"), 1) == expect);
  expect = ex[0].prompt_ids;
  expect.insert(expect.end(), ex[2].completion_ids.begin(), ex[2].completion_ids.end());
  CHECK(row(b.at("KL_input_ids"), 0) == expect);
  CHECK(b.at("label").sum().item<int64_t>() == 2);
}

TEST_CASE("kto: bad input is a clear error, and prompts reaching max_length are dropped and counted", "[trainers][kto]") {
  auto tok = text::Tokenizer::from_dir(tiny_model());
  auto nolabel = write_kto_rows("nolabel", "{\"prompt\": \"a\", \"completion\": \"b\"}\n");
  auto msg = test::input_error_of([&] {
    trainers::prepare_kto_split(kto_config({{"dataset_name", nolabel.string()}}), tok, nullptr, "train", true);
  });
  CHECK_THAT(msg, Contains("label"));
  auto empty = write_kto_rows("empty", "{\"prompt\": \"a\", \"completion\": \"\", \"label\": true}\n");
  msg = test::input_error_of([&] {
    trainers::prepare_kto_split(kto_config({{"dataset_name", empty.string()}}), tok, nullptr, "train", true);
  });
  CHECK_THAT(msg, Contains("empty"));
  auto split = trainers::prepare_kto_split(kto_config({{"max_length", "10"}}), tok, nullptr, "train", true);
  CHECK(split.dropped_long_prompts > 0);
  CHECK(split.examples.size() + split.dropped_long_prompts == 12);
  msg = test::input_error_of([&] {
    trainers::prepare_kto_split(kto_config({{"max_length", "2"}}), tok, nullptr, "train", true);
  });
  CHECK_THAT(msg, Contains("max_length"));
  msg = test::input_error_of([&] { kto_config({{"per_device_train_batch_size", "1"}}); });
  CHECK_THAT(msg, Contains("per_device_train_batch_size"));
  fs::remove(nolabel);
  fs::remove(empty);
}
