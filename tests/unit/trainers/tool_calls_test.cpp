// Agent rollouts, the parts without the engine, against TRL 1.16
// (scripts/fixtures/agent_fixtures.py): completions read back as assistant
// messages with tool calls, the tool suffix between turns, and tool results
// as the model sees them (through the shipped Python adapter).
#include <catch2/catch.hpp>

#include "support.hpp"
#include "trainer_fixture.hpp"
#include "text/template/chat_template.hpp"
#include "text/template/training_template.hpp"
#include "text/tokenizer/tokenizer.hpp"
#include "trainers/common.hpp"
#include "trainers/online_config.hpp"
#include "trainers/tool_calls.hpp"
#include "trainers/tool_rollout.hpp"

namespace {

using Json = nlohmann::ordered_json;

std::filesystem::path agent_model() { return trlx::test::data_dir() / "agents" / "model"; }

std::vector<int64_t> ids_of(const Json& j) { return j.get<std::vector<int64_t>>(); }

// The trainer's template under tools: the tokenizer's (TRL's qwen3.jinja),
// not prefix-preserving, so its training variant.
trlx::text::ChatTemplate agent_template(const trlx::text::ChatTemplate& stock) {
  auto variant = trlx::text::training_variant(stock.source());
  REQUIRE(variant);
  return trlx::text::ChatTemplate(variant->source, "training variant");
}

}  // namespace

TEST_CASE("completions read back as TRL's GRPO reads them, tool calls included", "[tools]") {
  auto text = trlx::trainers::load_tokenizer_and_template(agent_model(), std::nullopt);
  REQUIRE(text.chat_template);
  const auto format = trlx::trainers::tool_call_format(text.tokenizer, text.chat_template->source());
  REQUIRE(format);
  const auto cases = trlx::test::read_json(trlx::test::data_dir() / "agents" / "parse.json");
  REQUIRE(cases.size() >= 40);
  for (const auto& c : cases) {
    INFO(c["name"].get<std::string>() << ": " << c["text"].get<std::string>());
    // An empty turn (cut to nothing by the budget) is never read: the
    // rollout adds no message for it.
    if (c["ids"].empty()) {
      CHECK(c["result"].empty());
      continue;
    }
    const Json got = trlx::trainers::parse_assistant_turn(text.tokenizer, *format, ids_of(c["prefix_ids"]),
                                                          ids_of(c["ids"]), Json(c["tools"]));
    INFO("trlx: " << got.dump());
    INFO("TRL:  " << c["result"].dump());
    // Key order aside (JSON objects compare unordered).
    CHECK(nlohmann::json::parse(got.dump()) == c["result"]);
  }
}

TEST_CASE("the tool suffix between turns is TRL's, with and without thinking", "[tools]") {
  auto text = trlx::trainers::load_tokenizer_and_template(agent_model(), std::nullopt);
  CHECK_FALSE(trlx::trainers::prefix_preserving(text.tokenizer, *text.chat_template));
  const auto tmpl = agent_template(*text.chat_template);
  CHECK(trlx::trainers::prefix_preserving(text.tokenizer, tmpl));
  const auto eos = *text.tokenizer.eos_token_id();
  const auto s = trlx::test::read_json(trlx::test::data_dir() / "agents" / "suffix.json");
  for (const auto& c : s["suffixes"]) {
    INFO(c["name"].get<std::string>());
    const Json messages(c["tool_messages"]);
    CHECK(trlx::trainers::tool_suffix_ids(text.tokenizer, tmpl, messages, Json::object(), eos) ==
          ids_of(c["suffix_ids"]));
    CHECK(trlx::trainers::tool_suffix_ids(text.tokenizer, tmpl, messages, Json{{"enable_thinking", false}}, eos) ==
          ids_of(c["suffix_ids_enable_thinking_false"]));
  }
}

TEST_CASE("tool results reach the model as TRL writes them", "[tools]") {
  trlx::trainers::OnlineConfig c;
  c.tools = {Json{{"command", "python3 '" + (trlx::test::source_dir() / "examples" / "tools" / "python_tools.py").string() +
                                  "' '" + (trlx::test::data_dir() / "agents" / "tools.py").string() + "'"},
                  {"timeout_seconds", 60}}
                 .dump()};
  auto text = trlx::trainers::load_tokenizer_and_template(agent_model(), std::nullopt);
  auto box = trlx::trainers::start_tools(c, "grpo", text);
  REQUIRE(box);
  CHECK(box->chat_template->origin().find("training variant") != std::string::npos);
  const auto s = trlx::test::read_json(trlx::test::data_dir() / "agents" / "suffix.json");
  for (const auto& t : s["tool_contents"]) {
    INFO(t["name"].get<std::string>());
    const Json message = {{"role", "assistant"}, {"content", ""}, {"tool_calls", Json(t["tool_calls"])}};
    const auto turn = trlx::trainers::run_tool_calls(*box, message);
    CHECK(nlohmann::json::parse(turn.messages.dump()) == t["tool_messages"]);
    CHECK(turn.calls == static_cast<int64_t>(t["tool_calls"].size()));
  }
}
