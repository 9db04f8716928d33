// dataset_num_proc: every trainer's dataset preparation gives, on several
// threads, the examples one thread gives (same order, same tokens, same
// counts), on the quickstart data (plain text) and on a conversational copy
// of it (through the chat template).
#include <sys/resource.h>
#include <unistd.h>

#include <filesystem>
#include <fstream>
#include <nlohmann/json.hpp>
#include <string>
#include <vector>

#include "catch_torch.hpp"
#include "config/loader.hpp"
#include "support.hpp"
#include "text/template/chat_template.hpp"
#include "text/tokenizer/tokenizer.hpp"
#include "trainers/cpo.hpp"
#include "trainers/dpo.hpp"
#include "trainers/grpo.hpp"
#include "trainers/grpo_config.hpp"
#include "trainers/kto.hpp"
#include "trainers/kto_config.hpp"
#include "trainers/online.hpp"
#include "trainers/reward.hpp"
#include "trainers/reward_config.hpp"
#include "trainers/sft.hpp"
#include "trainers/sft_config.hpp"

namespace fs = std::filesystem;
using namespace trlx;

namespace {

fs::path examples_dir() { return test::source_dir() / "examples"; }

template <class C>
C config_for(const config::Schema& schema, const std::string& dataset, int threads) {
  config::ConfigLoader loader(schema);
  loader.apply_flag("dataset_name", {dataset});
  loader.apply_flag("dataset_num_proc", {std::to_string(threads)});
  C c;
  loader.resolve(&c);
  REQUIRE(c.dataset_num_proc == threads);
  return c;
}

// The rows of `src` as conversations: prompt/completion (and chosen,
// rejected) become user and assistant messages.
fs::path conversational_copy(const fs::path& src, const fs::path& dir) {
  fs::create_directories(dir);
  const fs::path out = dir / "train.jsonl";
  std::ifstream in(src);
  std::ofstream o(out);
  std::string line;
  while (std::getline(in, line)) {
    auto row = nlohmann::ordered_json::parse(line);
    nlohmann::ordered_json conv = nlohmann::ordered_json::object();
    for (auto& [k, v] : row.items()) {
      if (k == "prompt")
        conv[k] = nlohmann::ordered_json::array({{{"role", "user"}, {"content", v}}});
      else if (v.is_string())
        conv[k] = nlohmann::ordered_json::array({{{"role", "assistant"}, {"content", v}}});
      else
        conv[k] = v;
    }
    o << conv.dump() << "\n";
  }
  return out;
}

struct Inputs {
  text::Tokenizer tok = text::Tokenizer::from_dir(examples_dir() / "tiny-model");
  text::ChatTemplate tmpl{tok.chat_template(), "tiny-model"};
};

}  // namespace

TEST_CASE("dataset_num_proc threads prepare the examples one thread prepares",
          "[tokenizer][parallel][trainers]") {
  Inputs in;
  const fs::path tmp = fs::temp_directory_path() / ("trlx_num_proc_" + std::to_string(::getpid()));
  const fs::path data = examples_dir() / "data";
  for (const bool conversational : {false, true}) {
    auto file = [&](const std::string& task) {
      const fs::path src = data / task / "train.jsonl";
      return (conversational ? conversational_copy(src, tmp / task) : src).string();
    };
    INFO((conversational ? "conversational" : "plain text"));
    for (const int threads : {2, 3}) {
      INFO(threads << " threads");
      {
        const auto one = trainers::prepare_sft_split(
            config_for<trainers::SFTConfig>(trainers::sft_schema(), file("sft"), 1), in.tok,
            &in.tmpl, "train", true);
        const auto many = trainers::prepare_sft_split(
            config_for<trainers::SFTConfig>(trainers::sft_schema(), file("sft"), threads), in.tok,
            &in.tmpl, "train", true);
        REQUIRE(one.size() == many.size());
        REQUIRE(one.size() > 1000);
        for (size_t i = 0; i < one.size(); ++i) {
          CHECK(one[i].ids == many[i].ids);
          CHECK(one[i].loss_mask == many[i].loss_mask);
          CHECK(one[i].source_row == many[i].source_row);
        }
      }
      {
        trainers::PreferenceDataOptions o;
        o.dataset_name = file("dpo");
        const auto one = trainers::prepare_preference_split(o, in.tok, &in.tmpl, "train", true);
        o.dataset_num_proc = threads;
        const auto many = trainers::prepare_preference_split(o, in.tok, &in.tmpl, "train", true);
        REQUIRE(one.examples.size() == many.examples.size());
        REQUIRE(one.examples.size() > 500);
        for (size_t i = 0; i < one.examples.size(); ++i) {
          CHECK(one.examples[i].prompt_ids == many.examples[i].prompt_ids);
          CHECK(one.examples[i].chosen_ids == many.examples[i].chosen_ids);
          CHECK(one.examples[i].rejected_ids == many.examples[i].rejected_ids);
          CHECK(one.examples[i].where == many.examples[i].where);
        }
        o.dataset_num_proc = std::nullopt;
        o.trainer = "cpo";
        const auto sided_one =
            trainers::prepare_sided_preference_split(o, in.tok, &in.tmpl, "train", true);
        o.dataset_num_proc = threads;
        const auto sided_many =
            trainers::prepare_sided_preference_split(o, in.tok, &in.tmpl, "train", true);
        REQUIRE(sided_one.pairs.size() == sided_many.pairs.size());
        for (size_t i = 0; i < sided_one.pairs.size(); ++i) {
          CHECK(sided_one.pairs[i].chosen == sided_many.pairs[i].chosen);
          CHECK(sided_one.pairs[i].rejected == sided_many.pairs[i].rejected);
          CHECK(sided_one.pairs[i].chosen_prompt_len == sided_many.pairs[i].chosen_prompt_len);
        }
      }
      {
        const auto one = trainers::prepare_kto_split(
            config_for<trainers::KTOConfig>(trainers::kto_schema(), file("kto"), 1), in.tok,
            &in.tmpl, "train", true);
        const auto many = trainers::prepare_kto_split(
            config_for<trainers::KTOConfig>(trainers::kto_schema(), file("kto"), threads), in.tok,
            &in.tmpl, "train", true);
        REQUIRE(one.examples.size() == many.examples.size());
        REQUIRE(one.examples.size() > 500);
        for (size_t i = 0; i < one.examples.size(); ++i) {
          CHECK(one.examples[i].prompt_ids == many.examples[i].prompt_ids);
          CHECK(one.examples[i].completion_ids == many.examples[i].completion_ids);
          CHECK(one.examples[i].label == many.examples[i].label);
        }
      }
      {
        const auto one = trainers::prepare_reward_split(
            config_for<trainers::RewardConfig>(trainers::reward_schema(), file("reward"), 1),
            in.tok, &in.tmpl, "train", true);
        const auto many = trainers::prepare_reward_split(
            config_for<trainers::RewardConfig>(trainers::reward_schema(), file("reward"), threads),
            in.tok, &in.tmpl, "train", true);
        REQUIRE(one.examples.size() == many.examples.size());
        REQUIRE(one.examples.size() > 500);
        for (size_t i = 0; i < one.examples.size(); ++i) {
          CHECK(one.examples[i].chosen_ids == many.examples[i].chosen_ids);
          CHECK(one.examples[i].rejected_ids == many.examples[i].rejected_ids);
        }
      }
      {
        const auto one = trainers::prepare_prompts(
            config_for<trainers::GRPOConfig>(trainers::grpo_schema(), file("grpo"), 1), "grpo",
            in.tok, &in.tmpl, "train", trainers::GRPOTrainer::setup());
        const auto many = trainers::prepare_prompts(
            config_for<trainers::GRPOConfig>(trainers::grpo_schema(), file("grpo"), threads),
            "grpo", in.tok, &in.tmpl, "train", trainers::GRPOTrainer::setup());
        REQUIRE(one.examples.size() == many.examples.size());
        REQUIRE(one.examples.size() > 1000);
        for (size_t i = 0; i < one.examples.size(); ++i)
          CHECK(one.examples[i].prompt_ids == many.examples[i].prompt_ids);
      }
    }
  }
  fs::remove_all(tmp);
}

// A row far longer than max_length costs what max_length tokens cost: the
// examples equal those of the same data with the long row cut to its first
// 20 KB (tokenized whole), and resident memory hardly grows.
TEST_CASE("sft: a 20 MB row is tokenized only as far as max_length", "[tokenizer][trainers][memory]") {
  Inputs in;
  const fs::path dir = fs::temp_directory_path() / ("trlx_long_row_" + std::to_string(::getpid()));
  std::string body;
  while (body.size() < 20'000'000) body += "the quick brown fox jumps over 12 lazy dogs. ";
  const auto write = [&](const std::string& name, const std::string& long_text) {
    fs::create_directories(dir / name);
    std::ofstream o(dir / name / "train.jsonl");
    o << nlohmann::json({{"messages", {{{"role", "user"}, {"content", "2+2?"}}, {{"role", "assistant"}, {"content", "4"}}}}}).dump() << "\n";
    o << nlohmann::json({{"messages", {{{"role", "user"}, {"content", long_text}}, {{"role", "assistant"}, {"content", "x"}}}}}).dump() << "\n";
    o << nlohmann::json({{"messages", {{{"role", "user"}, {"content", "hi"}}, {{"role", "assistant"}, {"content", long_text}}}}}).dump() << "\n";
    return (dir / name).string();
  };
  const std::string whole = write("whole", body), cut = write("cut", body.substr(0, 20000));
  body.clear();
  body.shrink_to_fit();
  auto c = config_for<trainers::SFTConfig>(trainers::sft_schema(), cut, 1);
  c.max_length = 64;
  const auto expected = trainers::prepare_sft_split(c, in.tok, &in.tmpl, "train", true);
  c.dataset_name = whole;
  rusage u{};
  ::getrusage(RUSAGE_SELF, &u);
  const long before = u.ru_maxrss;
  const auto got = trainers::prepare_sft_split(c, in.tok, &in.tmpl, "train", true);
  ::getrusage(RUSAGE_SELF, &u);
  const long grown_mb = (u.ru_maxrss - before) / 1024;
  fs::remove_all(dir);
  REQUIRE(got.size() == expected.size());
  REQUIRE(got.size() == 3);
  for (size_t i = 0; i < got.size(); ++i) {
    CHECK(got[i].ids == expected[i].ids);
    CHECK(got[i].loss_mask == expected[i].loss_mask);
    CHECK(got[i].truncated == expected[i].truncated);
  }
  CHECK(got[1].truncated);
  CHECK(got[2].truncated);
  CHECK(got[1].ids.size() == 64);
  INFO("peak resident memory grew by " << grown_mb << " MB for two 20 MB rows");
  // The rows themselves are read (about 5 times their size in JSON values
  // and copies); tokenizing them whole took about 8 GB.
  CHECK(grown_mb < 400);
}
