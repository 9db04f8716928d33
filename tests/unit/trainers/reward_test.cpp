// `trlx reward` against TRL 1.16's RewardTrainer (fixtures from
// scripts/fixtures/kto_reward_fixtures.py): the first optimizer steps' loss,
// grad norm and logged metrics; a saved model scored by transformers; bad input.
#include "catch_torch.hpp"

#include <fstream>
#include <nlohmann/json.hpp>

#include "config/loader.hpp"
#include "core/error.hpp"
#include "model/loading.hpp"
#include "support.hpp"
#include "trainer_fixture.hpp"
#include "trainers/reward.hpp"

using namespace trlx;
using Catch::Matchers::Contains;
namespace fs = std::filesystem;

namespace {

using test::read_json;
using test::tiny_model;
fs::path reward_data() { return test::data_dir() / "reward"; }

trainers::RewardConfig reward_config(const test::Flags& flags) {
  return test::trainer_config<trainers::RewardConfig>(trainers::reward_schema(), reward_data() / "train.jsonl", flags);
}

fs::path write_reward_rows(const std::string& name, const std::string& text) {
  return test::write_temp("trlx_reward_test_" + name + ".jsonl", text);
}

}  // namespace

TEST_CASE("reward: first 3 steps equal TRL's RewardTrainer (loss, grad norm, every metric)", "[trainers][reward][golden]") {
  test::Comparison cmp;
  const auto want = read_json(reward_data() / "parity.json");
  test::compare_steps(test::reward_steps(want, {}), want["steps"], "reward", cmp);
  CHECK(cmp.checked > 0);
}

TEST_CASE("reward: a model saved by trlx loads in transformers as AutoModelForSequenceClassification with the same scores",
          "[trainers][reward][golden]") {
  const auto want = read_json(reward_data() / "saved_scores.json");
  const fs::path out = fs::temp_directory_path() / "trlx_reward_saved_test";
  fs::remove_all(out);
  // The run scripts/fixtures/kto_reward_fixtures.py made with the trlx binary.
  auto c = reward_config({{"output_dir", out.string()}, {"max_steps", "2"}, {"per_device_train_batch_size", "4"},
                          {"learning_rate", "1e-2"}, {"save_strategy", "no"}, {"logging_steps", "1"}, {"seed", "42"}});
  REQUIRE(trainers::run_reward(c) == 0);
  auto cfg = read_json(out / "config.json");
  CHECK(cfg.at("architectures") == want.at("architectures"));
  auto m = model::load_language_model(out, model::HeadKind::SequenceClassification);
  m->eval();
  torch::NoGradGuard ng;
  const auto ids = want.at("input_ids").get<std::vector<std::vector<int64_t>>>();
  for (size_t i = 0; i < ids.size(); ++i) {
    auto t = torch::tensor(ids[i], torch::kInt64).unsqueeze(0);
    auto scores = m->forward({t, (t != want.at("pad_token_id").get<int64_t>()).to(torch::kInt64), {}, {}});
    auto s = model::pool_last_non_pad(scores, t, want.at("pad_token_id").get<int64_t>()).item<double>();
    CHECK(s == Approx(want.at("scores")[i].get<double>()).margin(1e-4));
  }
  fs::remove_all(out);
}

TEST_CASE("reward: bad input is a clear error, and pairs longer than max_length are dropped and counted", "[trainers][reward]") {
  auto tok = text::Tokenizer::from_dir(tiny_model());
  auto missing = write_reward_rows("missing", "{\"chosen\": \"a\"}\n");
  auto msg = test::input_error_of([&] {
    trainers::prepare_reward_split(reward_config({{"dataset_name", missing.string()}}), tok, nullptr, "train", true);
  });
  CHECK_THAT(msg, Contains("rejected"));
  auto empty = write_reward_rows("empty", "{\"chosen\": \"a\", \"rejected\": \"\"}\n");
  msg = test::input_error_of([&] {
    trainers::prepare_reward_split(reward_config({{"dataset_name", empty.string()}}), tok, nullptr, "train", true);
  });
  CHECK_THAT(msg, Contains("empty"));
  CHECK_THAT(msg, Contains(":1"));
  auto skipped = trainers::prepare_reward_split(
      reward_config({{"dataset_name", empty.string()}, {"skip_bad_rows", "true"}}), tok, nullptr, "train", false);
  CHECK(skipped.examples.empty());
  auto split = trainers::prepare_reward_split(reward_config({{"max_length", "21"}}), tok, nullptr, "train", true);
  CHECK(split.dropped_long > 0);
  CHECK(split.examples.size() + split.dropped_long == 12);
  msg = test::input_error_of([&] {
    trainers::prepare_reward_split(reward_config({{"max_length", "3"}}), tok, nullptr, "train", true);
  });
  CHECK_THAT(msg, Contains("max_length"));
  fs::remove(missing);
  fs::remove(empty);
}
