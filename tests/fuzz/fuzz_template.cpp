// libFuzzer target for the chat-template parser and renderer.
//
// Input: template source, optionally followed by a NUL byte and a JSON object
// used as the context (otherwise a fixed chat with tools is used). Any input
// must either render or fail with trlx::InputError: no crash, no sanitizer
// report, no other exception, and bounded time and memory.
#include <cstddef>
#include <cstdint>
#include <string>

#include <nlohmann/json.hpp>

#include "core/error.hpp"
#include "text/template/chat_template.hpp"

namespace {
const nlohmann::ordered_json& default_messages() {
  static const auto m = nlohmann::ordered_json::parse(R"([
    {"role": "system", "content": "sys"},
    {"role": "user", "content": "héllo <think>x</think> 😀", "n": 3, "f": 0.5},
    {"role": "assistant", "content": "", "tool_calls": [{"type": "function",
      "function": {"name": "f", "arguments": {"a": [1, 2.5, null, true]}}}]},
    {"role": "tool", "content": "{\"r\": 1}"},
    {"role": "assistant", "content": "done", "reasoning_content": "because"}])");
  return m;
}
const nlohmann::ordered_json& default_tools() {
  static const auto t = nlohmann::ordered_json::parse(
      R"([{"type": "function", "function": {"name": "f", "parameters": {"type": "object"}}}])");
  return t;
}
}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  std::string input(reinterpret_cast<const char*>(data), size);
  size_t nul = input.find('\0');
  std::string source = input.substr(0, nul);
  nlohmann::ordered_json context;
  bool have_context = false;
  if (nul != std::string::npos) {
    context = nlohmann::ordered_json::parse(input.substr(nul + 1), nullptr, false);
    have_context = context.is_object();
  }
  try {
    trlx::text::ChatTemplate tmpl(source, "fuzz");
    tmpl.set_limits({/*max_steps=*/200'000, /*max_output=*/size_t{1} << 20});
    trlx::text::RenderedChat out;
    if (have_context) {
      out = tmpl.render(context);
    } else {
      trlx::text::ChatOptions opt;
      opt.add_generation_prompt = size % 2 == 0;
      opt.tools = &default_tools();
      opt.bos_token = "<s>";
      opt.eos_token = "</s>";
      out = trlx::text::apply_chat_template(tmpl, default_messages(), opt);
    }
    for (const auto& [b, e] : out.generation_spans)
      if (b > e) __builtin_trap();
  } catch (const trlx::InputError&) {
  }
  return 0;
}

#ifdef TRLX_TEMPLATE_RENDER_MAIN
// Differential-check driver (scripts/fuzz/run.sh template-diff): renders each file
// given as template [\0 context JSON] and prints one JSON line per file, for
// scripts/fixtures/template_fixtures.py to compare with jinja2.
#include <fstream>
#include <iostream>
#include <sstream>

int main(int argc, char** argv) {
  for (int i = 1; i < argc; ++i) {
    std::ifstream in(argv[i], std::ios::binary);
    std::stringstream ss;
    ss << in.rdbuf();
    std::string input = ss.str();
    size_t nul = input.find('\0');
    nlohmann::ordered_json ctx = nlohmann::ordered_json::object();
    if (nul != std::string::npos) {
      auto c = nlohmann::ordered_json::parse(input.substr(nul + 1), nullptr, false);
      if (c.is_object()) ctx = c;
    }
    nlohmann::ordered_json rec;
    rec["file"] = argv[i];
    try {
      trlx::text::ChatTemplate t(input.substr(0, nul), "diff");
      t.set_limits({/*max_steps=*/2'000'000, /*max_output=*/size_t{1} << 22});
      auto out = t.render(ctx);
      rec["text"] = out.text;
      rec["spans"] = out.generation_spans;
    } catch (const trlx::InputError& e) {
      rec["error"] = e.what();
    }
    std::cout << rec.dump(-1, ' ', false, nlohmann::ordered_json::error_handler_t::replace) << "\n";
  }
  return 0;
}
#endif
