// Tool-calling and thinking-switch data through every trainer's preparation:
// conversations with tool calls, tool results and reasoning, rows with a
// `tools` column (a list of schemas or its JSON text) and per-row
// `chat_template_kwargs` (enable_thinking), on the real Qwen3 tokenizer and
// on Llama-3's with the Llama 3.1 template. The token ids and loss masks
// equal those TRL 1.16's own preparation gives (tests/data/chat_tools, from
// scripts/fixtures/chat_tools_fixtures.py). Where TRL's trainer leaves a
// row's tools or chat_template_kwargs out of the template (CPO and ORPO drop
// the tools; GRPO, RLOO and online DPO both; every trainer fails on a row
// whose chat_template_kwargs is null), trlx renders them, and the fixture's
// `expected_with_row_inputs` holds what TRL's own rendering gives with them.
#include <filesystem>
#include <fstream>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "catch_torch.hpp"
#include "config/loader.hpp"
#include "support.hpp"
#include "text/template/chat_template.hpp"
#include "text/tokenizer/tokenizer.hpp"
#include "trainers/cpo.hpp"
#include "trainers/cpo_config.hpp"
#include "trainers/dpo.hpp"
#include "trainers/grpo.hpp"
#include "trainers/grpo_config.hpp"
#include "trainers/kto.hpp"
#include "trainers/kto_config.hpp"
#include "trainers/online.hpp"
#include "trainers/online_dpo.hpp"
#include "trainers/online_dpo_config.hpp"
#include "trainers/orpo_config.hpp"
#include "trainers/reward.hpp"
#include "trainers/reward_config.hpp"
#include "trainers/rloo.hpp"
#include "trainers/rloo_config.hpp"
#include "trainers/sft.hpp"
#include "trainers/sft_config.hpp"

namespace fs = std::filesystem;
using nlohmann::ordered_json;
using namespace trlx;

namespace {

ordered_json load(const std::string& trainer) {
  std::ifstream in(test::source_dir() / "tests" / "data" / "chat_tools" / (trainer + ".json"));
  REQUIRE(in.good());
  return ordered_json::parse(in);
}

// A case's tokenizer and template: the shared tokenizer, with the case's
// template text where it gives one.
struct Text {
  text::Tokenizer tok;
  text::ChatTemplate tmpl;
};
Text text_for(const fs::path& shared, const ordered_json& c) {
  auto tok = text::Tokenizer::from_dir(shared / "fixtures" / "tokenizers" / c.at("tokenizer").get<std::string>());
  const std::string t = c.at("chat_template").is_string() ? c.at("chat_template").get<std::string>() : tok.chat_template();
  text::ChatTemplate tmpl(t, c.at("name").get<std::string>());
  return {std::move(tok), std::move(tmpl)};
}

// The case's rows as a JSON Lines file; `dataset_name` and the case's config
// through the trainer's schema, as a config file would give them.
template <class C>
C case_config(const config::Schema& schema, const ordered_json& c, const fs::path& data,
              const std::vector<std::pair<std::string, std::string>>& needed = {}) {
  config::ConfigLoader loader(schema);
  loader.apply_flag("dataset_name", {data.string()});
  for (const auto& [k, v] : needed) loader.apply_flag(k, {v});
  for (const auto& [k, v] : c.at("config").items()) {
    if (k == "tools") continue;  // the trainer's own tools (agent rollouts), not data preparation
    loader.apply_flag(k, {v.is_string() ? v.template get<std::string>() : v.dump()});
  }
  C out;
  loader.resolve(&out);
  return out;
}

fs::path write_rows(const test::TempDir& dir, const ordered_json& c) {
  std::string text;
  for (const auto& r : c.at("rows")) text += r.dump() + "\n";
  return dir.write("train.jsonl", text);
}

// What TRL gives for the case as trlx prepares it: the values with the row's
// inputs where TRL's trainer leaves them out, else its own.
// Null where the case is not data preparation (the trainer's own tools:
// agent rollouts).
const ordered_json* expected(const ordered_json& c) {
  if (c.contains("expected_with_row_inputs"))
    return c.at("expected_with_row_inputs").is_null() ? nullptr : &c.at("expected_with_row_inputs");
  if (c.contains("expected") && !c.at("expected").is_null() && c.value("error", ordered_json()).is_null())
    return &c.at("expected");
  return nullptr;
}

std::vector<int64_t> ids(const ordered_json& j) { return j.get<std::vector<int64_t>>(); }

size_t masked_prefix(const ordered_json& labels) {
  size_t n = 0;
  while (n < labels.size() && labels[n].get<int64_t>() == -100) ++n;
  return n;
}

template <class F>
void each_case(const std::string& trainer, F&& check) {
  TRLX_NEED_SHARED(shared);
  const auto j = load(trainer);
  size_t checked = 0;
  for (const auto& c : j.at("cases")) {
    const std::string what = c.at("name").get<std::string>() + " / " + c.at("tokenizer").get<std::string>() +
                             (c.at("chat_template").is_string() ? " (fixture template)" : "");
    INFO(trainer << ": " << what);
    const ordered_json* want = expected(c);
    if (!want) continue;  // TRL refuses it and trlx has no other golden value: covered below
    test::TempDir dir("trlx_chat_tools");
    const auto data = write_rows(dir, c);
    auto t = text_for(shared, c);
    check(c, *want, data, t);
    ++checked;
  }
  CHECK(checked >= 4);
}

}  // namespace

TEST_CASE("sft: tool calls, tools columns and thinking switches tokenize and mask as TRL's", "[chat_tools][sft]") {
  each_case("sft", [](const ordered_json& c, const ordered_json& want, const fs::path& data, Text& t) {
    const auto cfg = case_config<trainers::SFTConfig>(trainers::sft_schema(), c, data);
    const auto got = trainers::prepare_sft_split(cfg, t.tok, &t.tmpl, "train", true);
    REQUIRE(got.size() == want.size());
    for (size_t i = 0; i < got.size(); ++i) {
      INFO("row " << i);
      CHECK(got[i].ids == ids(want[i].at("input_ids")));
      const auto& mask = want[i].at("completion_mask");
      REQUIRE(got[i].loss_mask.size() == mask.size());
      // The first token is never predicted: TRL's label there is not used.
      for (size_t k = 1; k < mask.size(); ++k) CHECK(int(got[i].loss_mask[k]) == mask[k].get<int>());
    }
  });
}

TEST_CASE("dpo: tool-calling preference rows tokenize as TRL's", "[chat_tools][dpo]") {
  each_case("dpo", [](const ordered_json&, const ordered_json& want, const fs::path& data, Text& t) {
    trainers::PreferenceDataOptions o;
    o.dataset_name = data.string();
    const auto got = trainers::prepare_preference_split(o, t.tok, &t.tmpl, "train", true);
    REQUIRE(got.examples.size() == want.size());
    for (size_t i = 0; i < want.size(); ++i) {
      INFO("row " << i);
      CHECK(got.examples[i].prompt_ids == ids(want[i].at("prompt_ids")));
      CHECK(got.examples[i].chosen_ids == ids(want[i].at("chosen_ids")));
      CHECK(got.examples[i].rejected_ids == ids(want[i].at("rejected_ids")));
    }
  });
}

TEST_CASE("kto: tool-calling rows tokenize as TRL's", "[chat_tools][kto]") {
  each_case("kto", [](const ordered_json& c, const ordered_json& want, const fs::path& data, Text& t) {
    const auto cfg = case_config<trainers::KTOConfig>(trainers::kto_schema(), c, data);
    const auto got = trainers::prepare_kto_split(cfg, t.tok, &t.tmpl, "train", true);
    REQUIRE(got.examples.size() == want.size());
    for (size_t i = 0; i < want.size(); ++i) {
      INFO("row " << i);
      CHECK(got.examples[i].prompt_ids == ids(want[i].at("prompt_ids")));
      CHECK(got.examples[i].completion_ids == ids(want[i].at("completion_ids")));
      CHECK(got.examples[i].label == want[i].at("label").get<bool>());
    }
  });
}

TEST_CASE("reward: tool-calling pairs tokenize as TRL's", "[chat_tools][reward]") {
  each_case("reward", [](const ordered_json& c, const ordered_json& want, const fs::path& data, Text& t) {
    const auto cfg = case_config<trainers::RewardConfig>(trainers::reward_schema(), c, data);
    const auto got = trainers::prepare_reward_split(cfg, t.tok, &t.tmpl, "train", true);
    REQUIRE(got.examples.size() == want.size());
    for (size_t i = 0; i < want.size(); ++i) {
      INFO("row " << i);
      CHECK(got.examples[i].chosen_ids == ids(want[i].at("chosen_ids")));
      CHECK(got.examples[i].rejected_ids == ids(want[i].at("rejected_ids")));
    }
  });
}

TEST_CASE("cpo and orpo: tool-calling pairs tokenize as TRL's, the row's tools rendered", "[chat_tools][cpo]") {
  for (const std::string trainer : {"cpo", "orpo"}) {
    each_case(trainer, [&](const ordered_json&, const ordered_json& want, const fs::path& data, Text& t) {
      trainers::PreferenceDataOptions o;
      o.trainer = trainer;
      o.dataset_name = data.string();
      const auto got = trainers::prepare_sided_preference_split(o, t.tok, &t.tmpl, "train", true);
      REQUIRE(got.pairs.size() == want.size());
      for (size_t i = 0; i < want.size(); ++i) {
        INFO("row " << i);
        CHECK(got.pairs[i].chosen == ids(want[i].at("chosen_input_ids")));
        CHECK(got.pairs[i].rejected == ids(want[i].at("rejected_input_ids")));
        CHECK(got.pairs[i].chosen_prompt_len == masked_prefix(want[i].at("chosen_labels")));
        CHECK(got.pairs[i].rejected_prompt_len == masked_prefix(want[i].at("rejected_labels")));
      }
    });
  }
}

namespace {

// `needed`: what the trainer's config must have besides the case's (a reward).
template <class C, class T>
void check_prompts(const config::Schema& schema, const std::string& trainer, const std::string& fixture,
                   const std::vector<std::pair<std::string, std::string>>& needed = {}) {
  each_case(fixture, [&](const ordered_json& c, const ordered_json& want, const fs::path& data, Text& t) {
    const auto cfg = case_config<C>(schema, c, data, needed);
    const auto got = trainers::prepare_prompts(cfg, trainer, t.tok, &t.tmpl, "train", T::setup());
    REQUIRE(got.examples.size() == want.size());
    for (size_t i = 0; i < want.size(); ++i) {
      const auto& mine = got.examples[i].prompt_ids;
      INFO("row " << i << ": TRL's prompt text\n"
                  << want[i].at("prompt_text").get<std::string>() << "\ntrlx's\n"
                  << t.tok.decode(std::vector<int32_t>(mine.begin(), mine.end()), false));
      CHECK(mine == ids(want[i].at("prompt_ids")));
    }
  });
}

}  // namespace

TEST_CASE("grpo, rloo and online dpo: prompts with tools and thinking switches render as TRL's",
          "[chat_tools][online]") {
  check_prompts<trainers::GRPOConfig, trainers::GRPOTrainer>(trainers::grpo_schema(), "grpo", "grpo");
  check_prompts<trainers::RLOOConfig, trainers::RLOOTrainer>(trainers::rloo_schema(), "rloo", "rloo");
  check_prompts<trainers::OnlineDPOConfig, trainers::OnlineDPOTrainer>(
      trainers::online_dpo_schema(), "online-dpo", "online_dpo", {{"reward_funcs", "think_format_reward"}});
}
