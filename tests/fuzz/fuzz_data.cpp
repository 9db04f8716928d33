// libFuzzer target: the JSON / JSON Lines readers and per-task shaping.
// Byte 0 picks the reader, skip_bad_rows and the task; the rest is the file.
// Bad input must end in trlx::InputError; anything else (another exception,
// a sanitizer report, a broken invariant below) is a bug.
#include <cstdint>
#include <cstdlib>
#include <string>
#include <string_view>

#include "core/error.hpp"
#include "text/data/dataset.hpp"
#include "text/data/internal.hpp"

using namespace trlx::data;

namespace {

void require(bool ok) {
  if (!ok) __builtin_trap();
}

void check_utf8(const Value& v) {
  if (v.is_string()) require(!detail::first_invalid_utf8(v.get_ref<const std::string&>()));
  if (v.is_structured())
    for (const auto& x : v) check_utf8(x);
}

// extract_prompt only cuts: prompt + completion gives back each side.
void check_extract(const Value& chosen, const Value& rejected) {
  PromptSplit p;
  try {
    p = extract_prompt(chosen, rejected);
  } catch (const trlx::InputError&) {
    return;
  }
  if (chosen.is_string()) {
    require(p.prompt.get<std::string>() + p.chosen.get<std::string>() == chosen.get<std::string>());
    require(p.prompt.get<std::string>() + p.rejected.get<std::string>() == rejected.get<std::string>());
    check_utf8(p.prompt);
    check_utf8(p.chosen);
    check_utf8(p.rejected);
  } else {
    require(p.prompt.size() + p.chosen.size() == chosen.size());
    require(p.prompt.size() + p.rejected.size() == rejected.size());
    require(!p.chosen.empty() && !p.rejected.empty());
  }
}

void check_shaped(const Shaped& s) {
  require(!s.rows.empty());
  for (const auto& r : s.rows) {
    const Value& v = r.value;
    require(v.is_object());
    (void)r.where();
    switch (s.task) {
      case Task::preference:
        require(v.contains("prompt") && v.contains("chosen") && v.contains("rejected"));
        require(v["chosen"].is_string() == (s.form == Form::text));
        require(v["prompt"].is_string() == v["chosen"].is_string());
        break;
      case Task::unpaired_preference:
        require(v.contains("prompt") && v.contains("completion") && v.at("label").is_boolean());
        require(v["completion"].is_string() == (s.form == Form::text));
        break;
      case Task::reward:
        require(v.at("chosen").is_string() == (s.form == Form::text));
        require(v.contains("margin") == s.has_margin);
        break;
      case Task::prompt_only:
        require(v.at("prompt").is_string() == (s.form == Form::text));
        break;
      case Task::sft:
        if (s.sft_layout == SftLayout::prompt_completion)
          require(v.contains("prompt") && v.contains("completion"));
        else
          require(v.contains(s.form == Form::text ? "text" : "messages"));
        break;
    }
    check_utf8(v);
  }
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  if (size < 1) return 0;
  const uint8_t mode = data[0];
  const std::string_view text(reinterpret_cast<const char*>(data + 1), size - 1);
  LoadOptions opt;
  opt.skip_bad_rows = mode & 2;
  opt.split = (mode & 0x40) ? "test" : "train";
  const Task task = static_cast<Task>(((mode >> 2) & 7) % 5);

  Dataset ds;
  try {
    if (mode & 1) read_json_text(text, "fuzz.json", opt, ds);
    else read_jsonl_text(text, "fuzz.jsonl", opt, ds);
  } catch (const trlx::InputError&) {
    return 0;
  }
  for (const auto& r : ds.rows) {
    require(r.value.is_object() && r.line >= 1);
    (void)detail::describe_value(r.value);
    auto c = r.value.find("chosen");
    auto j = r.value.find("rejected");
    if (c != r.value.end() && j != r.value.end()) {
      (void)py_equal(*c, *j);
      check_extract(*c, *j);
    }
    (void)is_conversational(r.value);
  }
  try {
    check_shaped(shape_for(task, ds, opt));
  } catch (const trlx::InputError&) {
  }
  return 0;
}
