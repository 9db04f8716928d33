// Training variants of known chat templates (text/template/training_template):
// the real Qwen3 template gets {% generation %} around each assistant turn and
// keeps every turn's thinking block, so that a conversation renders as a
// prefix of its continuation with a tool result; what it renders otherwise is
// the stock template's. TRL's own training variant, token for token, is held
// by the chat_tools golden test (tests/unit/tokenizer/chat_tools_test.cpp).
#include <catch2/catch.hpp>

#include <fstream>

#include <nlohmann/json.hpp>

#include "support.hpp"
#include "text/template/chat_template.hpp"
#include "text/template/training_template.hpp"

using nlohmann::ordered_json;
using namespace trlx;

namespace {

std::string shared_template(const std::filesystem::path& shared, const std::string& family) {
  std::ifstream in(shared / "fixtures" / "tokenizers" / family / "tokenizer_config.json");
  REQUIRE(in.good());
  return ordered_json::parse(in).at("chat_template").get<std::string>();
}

text::RenderedChat render(const text::ChatTemplate& t, const ordered_json& messages, bool add_generation_prompt) {
  ordered_json ctx = {{"messages", messages}, {"add_generation_prompt", add_generation_prompt}};
  return t.render(ctx);
}

const ordered_json kCall = ordered_json::parse(R"([
  {"role": "user", "content": "What is 2 * 3?"},
  {"role": "assistant", "content": "", "tool_calls": [{"type": "function", "function": {"name": "multiply", "arguments": {"a": 2, "b": 3}}}]}
])");

}  // namespace

TEST_CASE("qwen3's training variant marks the assistant turns and preserves prefixes", "[template][training]") {
  TRLX_NEED_SHARED(shared);
  const std::string stock_text = shared_template(shared, "qwen3");
  const text::ChatTemplate stock(stock_text, "qwen3");
  REQUIRE_FALSE(stock.has_generation_tag());
  const auto variant = text::training_variant(stock_text);
  REQUIRE(variant);
  CHECK(variant->family == "qwen3");
  const text::ChatTemplate train(variant->source, "qwen3 training");
  CHECK(train.has_generation_tag());
  // The variant of a variant: none (it has its blocks).
  CHECK_FALSE(text::training_variant(variant->source));

  // The stock template drops the earlier turn's empty thinking block once a
  // tool result follows, so its render is not a prefix; the variant's is.
  ordered_json with_tool = kCall;
  with_tool.push_back({{"role", "tool"}, {"name", "multiply"}, {"content", "6"}});
  const auto before = render(train, kCall, false).text, after = render(train, with_tool, true).text;
  CHECK(after.rfind(before, 0) == 0);
  CHECK(render(stock, with_tool, true).text.rfind(render(stock, kCall, false).text, 0) != 0);

  // The last turn renders as the stock template renders it; the generation
  // span runs from after the assistant header through <|im_end|>\n.
  ordered_json chat = ordered_json::parse(R"([
    {"role": "system", "content": "Be brief."},
    {"role": "user", "content": "Hi"},
    {"role": "assistant", "content": "Hello!", "reasoning_content": "greet back"}
  ])");
  const auto r = render(train, chat, false);
  CHECK(r.text == render(stock, chat, false).text);
  REQUIRE(r.generation_spans.size() == 1);
  const auto [b, e] = r.generation_spans[0];
  CHECK(r.text.substr(b, e - b) == "<think>\ngreet back\n</think>\n\nHello!<|im_end|>\n");
  CHECK(r.text.substr(0, b).size() >= std::string("<|im_start|>assistant\n").size());
  CHECK(r.text.compare(b - 22, 22, "<|im_start|>assistant\n") == 0);
}

TEST_CASE("templates trlx knows no training variant for get none", "[template][training]") {
  CHECK_FALSE(text::training_variant("{% for m in messages %}{{ m.content }}{% endfor %}"));
  CHECK_FALSE(text::training_variant(""));
  // A template that has generation blocks needs none.
  CHECK_FALSE(text::training_variant("{% for m in messages %}{% generation %}{{ m.content }}{% endgeneration %}{% endfor %}"));
  TRLX_NEED_SHARED(shared);
  CHECK_FALSE(text::training_variant(shared_template(shared, "llama3")));
}
