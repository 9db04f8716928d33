// save_strategy, logging_strategy and eval_strategy `epoch` with
// transformers' meaning: at the end of every epoch (the last one included,
// even when max_steps cuts it short), log the loss averaged over the steps
// since the last log, evaluate, then save checkpoint-<step>.
#include "catch_torch.hpp"

#include <fstream>
#include <nlohmann/json.hpp>

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

// SFT on the 8 rows of tests/data/sft/data, batch 2: 4 steps per epoch.
// The train split doubles as the evaluation split.
std::vector<nlohmann::json> run(const fs::path& out, const std::vector<std::pair<std::string, std::string>>& flags) {
  config::ConfigLoader loader(trainers::sft_schema());
  for (const auto& [k, v] : std::vector<std::pair<std::string, std::string>>{
           {"model_name_or_path", tiny_model().string()},
           {"dataset_name", (test::data_dir() / "sft" / "data").string()},
           {"dataset_test_split", "train"},
           {"bf16", "false"},
           {"gradient_checkpointing", "false"},
           {"max_length", "128"},
           {"per_device_train_batch_size", "2"},
           {"num_train_epochs", "2"},
           {"learning_rate", "1e-3"},
           {"output_dir", out.string()}})
    loader.apply_flag(k, {v});
  for (const auto& [k, v] : flags) loader.apply_flag(k, {v});
  trainers::SFTConfig c;
  loader.resolve(&c);
  auto tok = text::Tokenizer::from_dir(tiny_model());
  text::ChatTemplate tmpl(tok.chat_template(), "tiny-model");
  std::map<std::string, std::vector<trainers::SFTExample>> splits;
  splits["train"] = trainers::prepare_sft_split(c, tok, &tmpl, "train", true);
  if (c.eval_strategy != "no") splits["test"] = splits["train"];
  engine::Engine engine(c, model::load_language_model(tiny_model(), model::HeadKind::CausalLM), "sft", tiny_model());
  trainers::SFTTrainer trainer(c, std::move(splits), *tok.pad_token_id());
  engine.train(trainer);
  std::vector<nlohmann::json> lines;
  std::ifstream in(out / "metrics.jsonl");
  for (std::string line; std::getline(in, line);) lines.push_back(nlohmann::json::parse(line));
  return lines;
}

std::vector<std::string> checkpoints(const fs::path& out) {
  std::vector<std::string> names;
  for (const auto& e : fs::directory_iterator(out))
    if (e.path().filename().string().rfind("checkpoint-", 0) == 0) names.push_back(e.path().filename().string());
  std::sort(names.begin(), names.end());
  return names;
}

std::vector<nlohmann::json> with_key(const std::vector<nlohmann::json>& lines, const std::string& key) {
  std::vector<nlohmann::json> out;
  for (const auto& l : lines)
    if (l.contains(key)) out.push_back(l);
  return out;
}

}  // namespace

TEST_CASE("epoch strategies: a 2-epoch run logs, evaluates and saves at each epoch's end", "[engine][sft][strategy]") {
  const fs::path root = fs::temp_directory_path() / "trlx_strategy_epoch_test";
  fs::remove_all(root);
  const auto by_epoch = run(root / "epoch", {{"save_strategy", "epoch"}, {"logging_strategy", "epoch"}, {"eval_strategy", "epoch"}});
  CHECK(checkpoints(root / "epoch") == std::vector<std::string>{"checkpoint-4", "checkpoint-8"});
  const auto logs = with_key(by_epoch, "loss");
  REQUIRE(logs.size() == 2);
  CHECK(logs[0]["step"] == 4);
  CHECK(logs[1]["step"] == 8);
  CHECK(logs[0]["epoch"].get<double>() == Approx(1.0));
  CHECK(logs[1]["epoch"].get<double>() == Approx(2.0));
  const auto evals = with_key(by_epoch, "eval_loss");
  REQUIRE(evals.size() == 2);
  CHECK(evals[0]["step"] == 4);
  CHECK(evals[1]["step"] == 8);

  // The same run logging every step: each epoch line is the mean of its 4
  // steps' losses, and no checkpoint is written with save_strategy no.
  const auto by_step = run(root / "step", {{"save_strategy", "no"}, {"logging_strategy", "steps"}, {"logging_steps", "1"}});
  CHECK(checkpoints(root / "step").empty());
  const auto steps = with_key(by_step, "loss");
  REQUIRE(steps.size() == 8);
  for (size_t e = 0; e < 2; ++e) {
    double sum = 0;
    for (size_t s = 0; s < 4; ++s) sum += steps[e * 4 + s]["loss"].get<double>();
    CHECK(logs[e]["loss"].get<double>() == Approx(sum / 4).epsilon(1e-6));
  }

  // max_steps ending inside an epoch: that partial epoch still ends with a log and a save.
  const auto cut = run(root / "cut", {{"save_strategy", "epoch"}, {"logging_strategy", "epoch"}, {"max_steps", "6"}});
  CHECK(checkpoints(root / "cut") == std::vector<std::string>{"checkpoint-4", "checkpoint-6"});
  const auto cut_logs = with_key(cut, "loss");
  REQUIRE(cut_logs.size() == 2);
  CHECK(cut_logs[1]["step"] == 6);
  fs::remove_all(root);
}
