// Golden renders: every expected text here came from transformers' jinja2
// setup (scripts/fixtures/template_fixtures.py), never from trlx.
#include <catch2/catch.hpp>

#include <atomic>
#include <fstream>
#include <sstream>
#include <thread>

#include <nlohmann/json.hpp>

#include "core/error.hpp"
#include "support.hpp"
#include "text/template/chat_template.hpp"

using nlohmann::ordered_json;
using trlx::text::ChatOptions;
using trlx::text::ChatTemplate;

namespace {

std::string read_file(const std::filesystem::path& p) {
  std::ifstream in(p, std::ios::binary);
  REQUIRE(in.good());
  std::stringstream ss;
  ss << in.rdbuf();
  return ss.str();
}

ordered_json load(const std::string& name) {
  return ordered_json::parse(read_file(trlx::test::data_dir() / "template" / name));
}

// Shows where two renders first differ, so a failure is readable.
std::string first_difference(const std::string& got, const std::string& want) {
  size_t k = 0;
  while (k < got.size() && k < want.size() && got[k] == want[k]) ++k;
  size_t from = k > 40 ? k - 40 : 0;
  return "first difference at byte " + std::to_string(k) + "\n  got:  " +
         ordered_json(got.substr(from, 80)).dump() + "\n  want: " + ordered_json(want.substr(from, 80)).dump();
}

struct Tally {
  int total = 0, identical = 0;
};

void check_chat(const ChatTemplate& tmpl, const ordered_json& rec, Tally& tally) {
  std::string label = rec["template"].get<std::string>() + " / " + rec["conversation"].get<std::string>() +
                      (rec["add_generation_prompt"].get<bool>() ? " +gen" : "");
  INFO(label);
  ChatOptions opt;
  opt.add_generation_prompt = rec["add_generation_prompt"].get<bool>();
  if (!rec["tools"].is_null()) opt.tools = &rec["tools"];
  opt.extra = &rec["extra"];
  const auto& sp = rec["special_tokens"];
  for (auto it = sp.begin(); it != sp.end(); ++it) {
    std::string v = it.value().get<std::string>();
    if (it.key() == "bos_token") opt.bos_token = v;
    else if (it.key() == "eos_token") opt.eos_token = v;
    else if (it.key() == "unk_token") opt.unk_token = v;
    else if (it.key() == "pad_token") opt.pad_token = v;
    else if (it.key() == "sep_token") opt.sep_token = v;
    else if (it.key() == "cls_token") opt.cls_token = v;
    else if (it.key() == "mask_token") opt.mask_token = v;
  }
  ++tally.total;
  if (rec.contains("error")) {
    INFO("reference error: " << rec["error"].get<std::string>());
    CHECK_THROWS_AS(trlx::text::apply_chat_template(tmpl, rec["messages"], opt), trlx::InputError);
    ++tally.identical;
    return;
  }
  trlx::text::RenderedChat out;
  try {
    out = trlx::text::apply_chat_template(tmpl, rec["messages"], opt);
  } catch (const std::exception& e) {
    FAIL_CHECK("render failed: " << e.what());
    return;
  }
  std::string want = rec["expected"].get<std::string>();
  if (out.text != want) {
    FAIL_CHECK(first_difference(out.text, want));
    return;
  }
  std::vector<std::pair<size_t, size_t>> spans;
  for (const auto& s : rec["spans"]) spans.emplace_back(s[0].get<size_t>(), s[1].get<size_t>());
  CHECK(out.generation_spans == spans);
  if (out.generation_spans == spans) ++tally.identical;
}

}  // namespace

TEST_CASE("feature templates render byte-identically to jinja2", "[template]") {
  ordered_json cases = load("features.json");
  REQUIRE(cases.size() > 100);
  Tally tally;
  for (const auto& c : cases) {
    std::string name = c["name"].get<std::string>();
    INFO(name << ": " << c["template"].get<std::string>());
    ++tally.total;
    if (c.contains("error")) {
      INFO("reference error: " << c["error"].get<std::string>());
      CHECK_THROWS_AS(ChatTemplate(c["template"].get<std::string>(), name).render(c["context"]), trlx::InputError);
      ++tally.identical;
      continue;
    }
    try {
      ChatTemplate t(c["template"].get<std::string>(), name);
      auto out = t.render(c["context"]);
      std::string want = c["expected"].get<std::string>();
      bool spans_ok = true;
      if (c.contains("spans")) {
        std::vector<std::pair<size_t, size_t>> spans;
        for (const auto& s : c["spans"]) spans.emplace_back(s[0].get<size_t>(), s[1].get<size_t>());
        spans_ok = out.generation_spans == spans;
        CHECK(out.generation_spans == spans);
      }
      if (out.text == want && spans_ok) ++tally.identical;
      else if (out.text != want) FAIL_CHECK(first_difference(out.text, want));
    } catch (const std::exception& e) {
      FAIL_CHECK("error: " << e.what());
    }
  }
  WARN("feature templates: " << tally.identical << "/" << tally.total << " as the reference");
  CHECK(tally.identical == tally.total);
}

TEST_CASE("repository chat templates render as apply_chat_template", "[template]") {
  ordered_json cases = load("chats.json");
  REQUIRE(cases.size() > 50);
  Tally tally;
  for (const auto& rec : cases) {
    std::string name = rec["template"].get<std::string>();
    ChatTemplate tmpl(read_file(trlx::test::data_dir() / "template" / "templates" / (name + ".jinja")), name);
    check_chat(tmpl, rec, tally);
  }
  WARN("repository chat templates: " << tally.identical << "/" << tally.total << " as the reference");
  CHECK(tally.identical == tally.total);
}

TEST_CASE("Llama-3 and Qwen3 chat templates render as apply_chat_template", "[template][shared]") {
  TRLX_NEED_SHARED(shared);
  ordered_json cases = load("shared_chats.json");
  REQUIRE(cases.size() > 20);
  Tally tally;
  for (const auto& rec : cases) {
    std::string model = rec["template"].get<std::string>();
    auto cfg_path = shared / "fixtures" / "tokenizers" / model / "tokenizer_config.json";
    ordered_json cfg = ordered_json::parse(read_file(cfg_path));
    ChatTemplate tmpl(cfg["chat_template"].get<std::string>(), model + "/tokenizer_config.json: chat_template");
    check_chat(tmpl, rec, tally);
  }
  WARN("Llama-3/Qwen3 chats: " << tally.identical << "/" << tally.total << " as the reference");
  CHECK(tally.identical == tally.total);
}

TEST_CASE("generation spans cover exactly the assistant text", "[template]") {
  ChatTemplate t(
      "{% for m in messages %}<{{ m.role }}>{% if m.role == 'assistant' %}{% generation %}{{ m.content }}"
      "{% endgeneration %}{% else %}{{ m.content }}{% endif %}\n{% endfor %}",
      "test");
  ordered_json msgs = ordered_json::parse(R"([{"role":"user","content":"héllo"},
      {"role":"assistant","content":"wörld 😀"},{"role":"user","content":"x"},{"role":"assistant","content":"y"}])");
  auto out = trlx::text::apply_chat_template(t, msgs, {});
  REQUIRE(out.generation_spans.size() == 2);
  CHECK(out.text.substr(out.generation_spans[0].first, out.generation_spans[0].second - out.generation_spans[0].first) ==
        "wörld 😀");
  CHECK(out.text.substr(out.generation_spans[1].first, out.generation_spans[1].second - out.generation_spans[1].first) ==
        "y");
  CHECK(t.has_generation_tag());
}

TEST_CASE("apply_chat_template's own steps (None keys, reasoning aliases, special tokens, extra variables) as transformers'", "[template]") {
  ordered_json cases = load("api_chats.json");
  REQUIRE(cases.size() >= 2);
  Tally tally;
  for (const auto& rec : cases) {
    ChatTemplate tmpl(rec["template_source"].get<std::string>(), rec["template"].get<std::string>());
    check_chat(tmpl, rec, tally);
  }
  CHECK(tally.identical == tally.total);
}

TEST_CASE("one template renders from several threads at once", "[template]") {
  // Data loaders render with one parsed template from many threads.
  ChatTemplate t(read_file(trlx::test::data_dir() / "template" / "templates" / "chatml_tools.jinja"), "test");
  ordered_json cases = load("chats.json");
  std::vector<const ordered_json*> recs;
  for (const auto& rec : cases)
    if (rec["template"] == "chatml_tools" && rec.contains("expected")) recs.push_back(&rec);
  REQUIRE(recs.size() > 5);
  std::atomic<int> wrong{0};
  std::vector<std::thread> threads;
  for (int k = 0; k < 4; ++k)
    threads.emplace_back([&] {
      for (int round = 0; round < 50; ++round)
        for (const ordered_json* rec : recs) {
          ChatOptions opt;
          opt.add_generation_prompt = (*rec)["add_generation_prompt"].get<bool>();
          if (!(*rec)["tools"].is_null()) opt.tools = &(*rec)["tools"];
          opt.extra = &(*rec)["extra"];
          opt.bos_token = "<s>";
          opt.eos_token = "</s>";
          opt.pad_token = "<pad>";
          if (trlx::text::apply_chat_template(t, (*rec)["messages"], opt).text != (*rec)["expected"]) ++wrong;
        }
    });
  for (auto& th : threads) th.join();
  CHECK(wrong == 0);
}
