// Error paths: what the user sees when a template is broken or refuses a chat.
#include <catch2/catch.hpp>

#include <nlohmann/json.hpp>

#include "core/error.hpp"
#include "support.hpp"
#include "text/template/chat_template.hpp"

using nlohmann::ordered_json;
using trlx::text::ChatTemplate;

namespace {
using trlx::test::error_message_of;
const char* kOrigin = "tokenizer_config.json: chat_template";
}  // namespace

TEST_CASE("a syntax error names origin, line, column and what was expected", "[template]") {
  std::string msg = error_message_of([] { ChatTemplate("line one\n{% for x in xs %}\n{{ x + }}\n{% endfor %}", kOrigin); });
  CHECK_THAT(msg, Catch::Contains("tokenizer_config.json: chat_template"));
  CHECK_THAT(msg, Catch::Contains("line 3"));
  CHECK_THAT(msg, Catch::Contains("column"));
  CHECK_THAT(msg, Catch::Contains("unexpected '}}'") || Catch::Contains("end of print statement"));

  msg = error_message_of([] { ChatTemplate("{% if true %}\nno end", kOrigin); });
  CHECK_THAT(msg, Catch::Contains("end of template"));
  CHECK_THAT(msg, Catch::Contains("'if'"));

  msg = error_message_of([] { ChatTemplate("{% frobnicate %}", kOrigin); });
  CHECK_THAT(msg, Catch::Contains("unknown tag 'frobnicate'"));
}

TEST_CASE("an unknown filter or test is named when the template is loaded", "[template]") {
  std::string msg = error_message_of([] { ChatTemplate("\n\n{{ messages | shuffle }}", kOrigin); });
  CHECK_THAT(msg, Catch::Contains("No filter named 'shuffle'"));
  CHECK_THAT(msg, Catch::Contains("line 3"));
  msg = error_message_of([] { ChatTemplate("{% set y = x is prime %}", kOrigin); });
  CHECK_THAT(msg, Catch::Contains("No test named 'prime'"));
  // Inside an if, as in jinja2, the error waits until the branch runs.
  ChatTemplate guarded("{% if false %}{{ x | from_json }}{% endif %}ok", kOrigin);
  CHECK(guarded.render(ordered_json::object()).text == "ok");
  ChatTemplate taken("{% if true %}\n{{ x | from_json }}{% endif %}", kOrigin);
  msg = error_message_of([&] { taken.render(ordered_json::object()); });
  CHECK_THAT(msg, Catch::Contains("No filter named 'from_json'") && Catch::Contains("line 2"));
}

TEST_CASE("raise_exception surfaces the template's message and line", "[template]") {
  ChatTemplate t("{% for m in messages %}\n{% if m.role == 'system' %}\n"
                 "{{ raise_exception('System role not supported') }}\n{% endif %}{% endfor %}",
                 kOrigin);
  ordered_json msgs = ordered_json::parse(R"([{"role":"system","content":"s"}])");
  std::string msg = error_message_of([&] { trlx::text::apply_chat_template(t, msgs, {}); });
  CHECK_THAT(msg, Catch::Contains("System role not supported"));
  CHECK_THAT(msg, Catch::Contains("line 3"));
  CHECK_THAT(msg, Catch::Contains(kOrigin));
}

TEST_CASE("runtime errors name the line and the problem", "[template]") {
  auto render = [](const std::string& src) {
    return error_message_of([&] { ChatTemplate(src, kOrigin).render(ordered_json::object()); });
  };
  CHECK_THAT(render("ok\n{{ nothing() }}"), Catch::Contains("'nothing' is undefined") && Catch::Contains("line 2"));
  CHECK_THAT(render("{{ 'a' + 1 }}"), Catch::Contains("can only concatenate str"));
  CHECK_THAT(render("{{ x.y.z }}"), Catch::Contains("'x' is undefined"));
  CHECK_THAT(render("{% set xs = [] %}{{ xs.append(1) }}"), Catch::Contains("unsafe"));
  CHECK_THAT(render("{{ 1 // 0 }}"), Catch::Contains("division"));
}

TEST_CASE("runaway templates stop with an error instead of crashing", "[template]") {
  auto render = [](const std::string& src) {
    ChatTemplate t(src, kOrigin);
    t.set_limits({/*max_steps=*/1'000'000, /*max_output=*/1 << 20});
    return error_message_of([&] { t.render(ordered_json::object()); });
  };
  CHECK_THAT(render("{% macro f(n) %}{{ f(n + 1) }}{% endmacro %}{{ f(0) }}"), Catch::Contains("nested too deeply"));
  CHECK_THAT(render("{{ 'x' * 100000000 }}"), Catch::Contains("too large"));
  CHECK_THAT(render("{% for a in range(100000) %}{% for b in range(100000) %}{% endfor %}{% endfor %}"),
             Catch::Contains("too many steps"));
  std::string deep = std::string(500, '(') + "1" + std::string(500, ')');
  CHECK_THAT(error_message_of([&] { ChatTemplate("{{ " + deep + " }}", kOrigin); }), Catch::Contains("nested too deeply"));
}
