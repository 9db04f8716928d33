// Per-task validation and normalisation.
#include <catch2/catch.hpp>

#include "helpers.hpp"
#include "text/data/dataset.hpp"

using namespace trlx::data;
using trlx::data::test::input_error;
using Catch::Matchers::Contains;

namespace {

// A dataset from JSON Lines text, named "mem.jsonl" in errors.
Dataset rows(const std::string& jsonl) {
  Dataset ds;
  read_jsonl_text(jsonl, "mem.jsonl", {}, ds);
  return ds;
}

Shaped shape(Task task, const std::string& jsonl, LoadOptions opt = {}) {
  return shape_for(task, rows(jsonl), opt);
}

std::string shape_error(Task task, const std::string& jsonl, LoadOptions opt = {}) {
  return input_error([&] { shape(task, jsonl, opt); });
}

std::vector<std::string> keys(const Value& v) {
  std::vector<std::string> out;
  for (auto it = v.begin(); it != v.end(); ++it) out.push_back(it.key());
  return out;
}

const std::string kUser = R"({"role": "user", "content": "hi"})";
const std::string kAsst = R"({"role": "assistant", "content": "hello"})";

}  // namespace

// --- SFT ----------------------------------------------------------------------

TEST_CASE("sft: text rows", "[data][shape][sft]") {
  const Shaped s = shape(Task::sft, "{\"id\": 1, \"text\": \"a\"}\n{\"text\": \"b\"}\n");
  CHECK(s.form == Form::text);
  CHECK(s.sft_layout == SftLayout::language_modeling);
  REQUIRE(s.rows.size() == 2);
  CHECK(keys(s.rows[0].value) == std::vector<std::string>{"id", "text"});  // file order
}

TEST_CASE("sft: text_field picks the column and becomes \"text\"", "[data][shape][sft]") {
  LoadOptions opt;
  opt.text_field = "content";
  const Shaped s = shape(Task::sft, "{\"content\": \"a\", \"x\": 1}\n", opt);
  CHECK(keys(s.rows[0].value) == std::vector<std::string>{"x", "text"});
  CHECK(s.rows[0].value["text"] == "a");
  CHECK_THAT(shape_error(Task::sft, "{\"text\": \"a\"}\n", opt), Contains("missing column \"content\""));
}

TEST_CASE("sft: messages rows", "[data][shape][sft]") {
  const Shaped s = shape(Task::sft, "{\"messages\": [" + kUser + ", " + kAsst + "]}\n");
  CHECK(s.form == Form::conversational);
  CHECK(s.sft_layout == SftLayout::language_modeling);
}

TEST_CASE("sft: prompt + completion, both forms", "[data][shape][sft]") {
  Shaped s = shape(Task::sft, "{\"completion\": \" c\", \"prompt\": \"p\"}\n");
  CHECK(s.sft_layout == SftLayout::prompt_completion);
  CHECK(s.form == Form::text);
  CHECK(keys(s.rows[0].value) == std::vector<std::string>{"completion", "prompt"});
  s = shape(Task::sft, "{\"prompt\": [" + kUser + "], \"completion\": [" + kAsst + "]}\n");
  CHECK(s.form == Form::conversational);
  const std::string msg = shape_error(Task::sft, "{\"prompt\": [" + kUser + "], \"completion\": \"x\"}\n");
  CHECK_THAT(msg, Contains("mem.jsonl:1:"));
  CHECK_THAT(msg, Contains("\"prompt\" is conversational but \"completion\" is plain text"));
  CHECK_THAT(shape_error(Task::sft, "{\"prompt\": \"p\"}\n"), Contains("missing column \"completion\""));
}

TEST_CASE("sft: ShareGPT conversations become messages", "[data][shape][sft]") {
  const Shaped s = shape(Task::sft,
                         R"({"conversations": [{"from": "human", "value": "hi", "lang": "en"}, {"from": "gpt", "value": "yo"}]})"
                         "\n");
  const Value& row = s.rows.at(0).value;
  CHECK_FALSE(row.contains("conversations"));
  const Value& m = row.at("messages");
  CHECK(keys(m[0]) == std::vector<std::string>{"lang", "role", "content"});
  CHECK(m[0]["role"] == "human");
  CHECK(m[1]["content"] == "yo");
  CHECK(s.form == Form::conversational);
}

TEST_CASE("sft: missing columns say what is needed and spot typos", "[data][shape][sft][errors]") {
  const std::string msg = shape_error(Task::sft, "{\"txt\": \"a\"}\n");
  CHECK_THAT(msg, Contains("mem.jsonl:1: missing column \"text\""));
  CHECK_THAT(msg, Contains("is \"txt\" a misspelling of \"text\"?"));
  CHECK_THAT(msg, Contains("\"messages\""));
  CHECK_THAT(msg, Contains("this row has columns \"txt\""));
  // A column that is there but null is named as null, not taken for absent.
  CHECK_THAT(shape_error(Task::sft, "{\"prompt\": null, \"completion\": \"x\"}\n"),
             Contains("this row has columns \"prompt\" (null), \"completion\""));
}

TEST_CASE("sft: wrong types", "[data][shape][sft][errors]") {
  CHECK_THAT(shape_error(Task::sft, "{\"text\": 5}\n"),
             Contains("mem.jsonl:1: \"text\": expected a string, found a number (5)"));
  CHECK_THAT(shape_error(Task::sft, "{\"text\": [" + kUser + "]}\n"), Contains("belongs in a \"messages\" column"));
  CHECK_THAT(shape_error(Task::sft, "{\"messages\": \"hi\"}\n"),
             Contains("\"messages\": expected a list of messages, found a string \"hi\""));
  CHECK_THAT(shape_error(Task::sft, "{\"messages\": []}\n"), Contains("non-empty list of messages"));
  CHECK_THAT(shape_error(Task::sft, "{\"messages\": [\"hi\"]}\n"),
             Contains("\"messages\"[0]: expected a message object"));
  CHECK_THAT(shape_error(Task::sft, "{\"messages\": [" + kUser + ", {\"content\": \"x\"}]}\n"),
             Contains("\"messages\"[1]: message has no \"role\""));
  CHECK_THAT(shape_error(Task::sft, "{\"messages\": [{\"role\": 1, \"content\": \"x\"}]}\n"),
             Contains("\"messages\"[0].role: expected a string, found a number (1)"));
  CHECK_THAT(shape_error(Task::sft, "{\"messages\": [{\"role\": \"user\", \"content\": 3}]}\n"),
             Contains("\"messages\"[0].content: expected a string, null or a list of content parts, found a number (3)"));
  CHECK_THAT(shape_error(Task::sft, "{\"messages\": [{\"role\": \"user\"}]}\n"), Contains("message has no \"content\""));
  CHECK_THAT(shape_error(Task::sft, "{\"messages\": [{\"role\": \"user\", \"content\": [\"x\"]}]}\n"),
             Contains("\"messages\"[0].content[0]: expected a content part object"));
  CHECK_THAT(shape_error(Task::sft, "{\"messages\": [{\"role\": \"user\", \"content\": [{\"text\": \"x\"}]}]}\n"),
             Contains("needs a string \"type\""));
}

TEST_CASE("sft: valid message variants", "[data][shape][sft]") {
  const Shaped s = shape(Task::sft,
                         R"({"messages": [{"role": "user", "content": [{"type": "text", "text": "hi"}, {"type": "image"}]},)"
                         R"( {"role": "assistant", "tool_calls": [{"type": "function", "function": {"name": "f", "arguments": {}}}]},)"
                         R"( {"role": "tool", "content": null, "name": "f"}]})"
                         "\n");
  CHECK(s.rows.size() == 1);
}

TEST_CASE("sft: layout and form must not change between rows", "[data][shape][sft][errors]") {
  std::string msg = shape_error(Task::sft, "{\"text\": \"a\"}\n{\"prompt\": \"p\", \"completion\": \"c\"}\n");
  CHECK_THAT(msg, Contains("mem.jsonl:2:"));
  CHECK_THAT(msg, Contains("first row (mem.jsonl:1)"));
  msg = shape_error(Task::sft, "{\"text\": \"a\"}\n{\"text\": \"b\"}\n{\"messages\": [" + kUser + "]}\n");
  CHECK_THAT(msg, Contains("mem.jsonl:3: conversational (lists of messages) data, but the dataset's first row "
                           "(mem.jsonl:1) is plain text"));
}

// --- preference ---------------------------------------------------------------

TEST_CASE("preference: explicit prompt kept, implicit extracted", "[data][shape][dpo]") {
  Shaped s = shape(Task::preference, "{\"chosen\": \" b\", \"prompt\": \"p\", \"rejected\": \" c\", \"x\": 0}\n");
  CHECK(keys(s.rows[0].value) == std::vector<std::string>{"chosen", "prompt", "rejected", "x"});
  CHECK(s.prompts_extracted == 0);
  s = shape(Task::preference, "{\"chosen\": \"Sky is blue\", \"rejected\": \"Sky is red\"}\n");
  CHECK(s.prompts_extracted == 1);
  CHECK(s.rows[0].value["prompt"] == "Sky is");
  CHECK(s.rows[0].value["chosen"] == " blue");
  CHECK(keys(s.rows[0].value) == std::vector<std::string>{"chosen", "rejected", "prompt"});
}

TEST_CASE("preference: errors", "[data][shape][dpo][errors]") {
  std::string msg = shape_error(Task::preference, "{\"prompt\": \"p\", \"chosen\": \"c\"}\n");
  CHECK_THAT(msg, Contains("mem.jsonl:1: missing column \"rejected\""));
  msg = shape_error(Task::preference, "{\"chosen\": \"c\", \"rejected\": [" + kAsst + "]}\n");
  CHECK_THAT(msg, Contains("\"chosen\" is plain text but \"rejected\" is conversational"));
  msg = shape_error(Task::preference, "{\"prompt\": [" + kUser + "], \"chosen\": \"c\", \"rejected\": \"r\"}\n");
  CHECK_THAT(msg, Contains("\"prompt\" is a conversation but \"chosen\"/\"rejected\" are plain text"));
  msg = shape_error(Task::preference, "{\"chosen\": \"\", \"rejected\": \"r\"}\n");
  CHECK_THAT(msg, Contains("mem.jsonl:1: cannot extract a prompt: \"chosen\" is empty"));
  // a null prompt is refused (TRL fails on None), as kto, sft and the online trainers refuse it
  msg = shape_error(Task::preference, "{\"prompt\": null, \"chosen\": \"ab\", \"rejected\": \"ac\"}\n");
  CHECK_THAT(msg, Contains("mem.jsonl:1: \"prompt\": expected a string or a list of messages, found null"));
  msg = shape_error(Task::reward, "{\"prompt\": null, \"chosen\": \"ab\", \"rejected\": \"ac\"}\n");
  CHECK_THAT(msg, Contains("found null"));
  msg = shape_error(Task::preference, "{\"chosen\": 1, \"rejected\": \"r\"}\n");
  CHECK_THAT(msg, Contains("\"chosen\": expected a string or a list of messages, found a number (1)"));
  msg = shape_error(Task::preference,
                    "{\"chosen\": \"a\", \"rejected\": \"b\"}\n{\"chosen\": [" + kAsst + "], \"rejected\": [" + kAsst + "]}\n");
  CHECK_THAT(msg, Contains("mem.jsonl:2: conversational"));
}

// --- KTO ----------------------------------------------------------------------

TEST_CASE("kto: unpaired rows", "[data][shape][kto]") {
  const Shaped s = shape(Task::unpaired_preference,
                         "{\"label\": false, \"prompt\": \"p\", \"completion\": \"c\"}\n"
                         "{\"prompt\": \"p\", \"completion\": \"d\", \"label\": true}\n");
  CHECK(s.unpaired_from == 0);
  REQUIRE(s.rows.size() == 2);
  CHECK(keys(s.rows[0].value) == std::vector<std::string>{"label", "prompt", "completion"});
}

TEST_CASE("kto: label must be a bool", "[data][shape][kto][errors]") {
  const std::string msg =
      shape_error(Task::unpaired_preference, "{\"prompt\": \"p\", \"completion\": \"c\", \"label\": 1}\n");
  CHECK_THAT(msg, Contains("mem.jsonl:1: \"label\": expected a bool"));
  CHECK_THAT(msg, Contains("found a number (1)"));
  CHECK_THAT(shape_error(Task::unpaired_preference, "{\"prompt\": \"p\", \"completion\": \"c\", \"label\": \"true\"}\n"),
             Contains("found a string \"true\""));
  CHECK_THAT(shape_error(Task::unpaired_preference, "{\"prompt\": \"p\", \"completion\": \"c\"}\n"),
             Contains("missing column \"label\""));
}

TEST_CASE("kto: paired rows are unpaired, keeping row sources", "[data][shape][kto]") {
  const Shaped s = shape(Task::unpaired_preference,
                         "{\"prompt\": \"p1\", \"chosen\": \"c1\", \"rejected\": \"r1\", \"w\": 1}\n"
                         "{\"prompt\": \"p2\", \"chosen\": \"c2\", \"rejected\": \"r2\", \"w\": 2}\n");
  CHECK(s.unpaired_from == 2);
  REQUIRE(s.rows.size() == 4);
  CHECK(s.rows[0].value == Value::parse(R"({"prompt": "p1", "completion": "c1", "label": true, "w": 1})"));
  CHECK(s.rows[1].value["completion"] == "c2");
  CHECK(s.rows[2].value == Value::parse(R"({"prompt": "p1", "completion": "r1", "label": false, "w": 1})"));
  CHECK(s.rows[3].line == 2);
}

TEST_CASE("kto: paired and unpaired columns do not mix", "[data][shape][kto][errors]") {
  std::string msg = shape_error(Task::unpaired_preference,
                                "{\"prompt\": \"p\", \"chosen\": \"c\", \"rejected\": \"r\", \"label\": true}\n");
  CHECK_THAT(msg, Contains("mem.jsonl:1: has both paired columns"));
  msg = shape_error(Task::unpaired_preference,
                    "{\"prompt\": \"p\", \"completion\": \"c\", \"label\": true}\n"
                    "{\"prompt\": \"p\", \"chosen\": \"c\", \"rejected\": \"r\"}\n");
  CHECK_THAT(msg, Contains("mem.jsonl:2: a paired (chosen/rejected) row, but the dataset's first row (mem.jsonl:1) is unpaired"));
}

// --- reward -------------------------------------------------------------------

TEST_CASE("reward: chosen/rejected, optional prompt and margin", "[data][shape][reward]") {
  Shaped s = shape(Task::reward, "{\"chosen\": \"a\", \"rejected\": \"b\", \"margin\": 0.5}\n"
                                 "{\"chosen\": \"a\", \"rejected\": \"b\", \"margin\": 2, \"prompt\": \"q\"}\n");
  CHECK(s.has_margin);
  CHECK(keys(s.rows[1].value) == std::vector<std::string>{"chosen", "rejected", "margin", "prompt"});
  s = shape(Task::reward, "{\"chosen\": \"a\", \"rejected\": \"b\", \"margin\": null}\n");
  CHECK_FALSE(s.has_margin);
  CHECK(keys(s.rows[0].value) == std::vector<std::string>{"chosen", "rejected"});
}

TEST_CASE("reward: errors", "[data][shape][reward][errors]") {
  CHECK_THAT(shape_error(Task::reward, "{\"chosen\": \"a\", \"rejected\": \"b\", \"margin\": \"big\"}\n"),
             Contains("mem.jsonl:1: \"margin\": expected a number, found a string \"big\""));
  CHECK_THAT(shape_error(Task::reward, "{\"chosen\": \"a\", \"rejected\": \"b\", \"margin\": true}\n"),
             Contains("\"margin\": expected a number, found a bool (true)"));
  // a number past double's range fails already when read
  CHECK_THAT(shape_error(Task::reward, "{\"chosen\": \"a\", \"rejected\": \"b\", \"margin\": 1e999}\n"),
             Contains("mem.jsonl:1: invalid JSON: number overflow"));
  CHECK_THAT(shape_error(Task::reward, "{\"chosen\": \"a\", \"rejected\": \"b\", \"margin\": 1}\n"
                                       "{\"chosen\": \"a\", \"rejected\": \"b\"}\n"),
             Contains("mem.jsonl:2: has no \"margin\", but the dataset's first row (mem.jsonl:1) has one"));
  CHECK_THAT(shape_error(Task::reward, "{\"chosen\": [" + kAsst + "], \"rejected\": [" + kAsst + "], \"prompt\": \"q\"}\n"),
             Contains("\"prompt\" is plain text but \"chosen\" is conversational"));
  CHECK_THAT(shape_error(Task::reward, "{\"chosen\": \"a\"}\n"), Contains("missing column \"rejected\""));
}

// --- prompt-only ----------------------------------------------------------------

TEST_CASE("prompt-only: prompt plus extra columns handed on", "[data][shape][grpo]") {
  const Shaped s = shape(Task::prompt_only, "{\"answer\": 4, \"prompt\": [" + kUser + "]}\n");
  CHECK(s.form == Form::conversational);
  CHECK(keys(s.rows[0].value) == std::vector<std::string>{"answer", "prompt"});
  CHECK(s.rows[0].value["answer"] == 4);
  const std::string msg = shape_error(Task::prompt_only, "{\"prompt\": \"a\"}\n{\"prompt\": \"b\"}\n{\"question\": \"c\"}\n");
  CHECK_THAT(msg, Contains("mem.jsonl:3: missing column \"prompt\""));
  CHECK_THAT(shape_error(Task::prompt_only, "{\"prompt\": \"a\"}\n{\"prompt\": [" + kUser + "]}\n"),
             Contains("mem.jsonl:2: conversational (lists of messages) data, but the dataset's first row (mem.jsonl:1) is plain text"));
}

// --- skipping, empty, names -------------------------------------------------------

TEST_CASE("shape: skip_bad_rows counts rows dropped at load and at shape", "[data][shape]") {
  LoadOptions opt;
  opt.skip_bad_rows = true;
  Dataset ds;
  read_jsonl_text("{\"prompt\": \"a\"}\nbroken\n{\"q\": 1}\n{\"prompt\": [" + kUser + "]}\n{\"prompt\": \"b\"}\n",
                  "mem.jsonl", opt, ds);
  CHECK(ds.skipped == 1);
  const Shaped s = shape_for(Task::prompt_only, ds, opt);
  CHECK(s.rows.size() == 2);
  CHECK(s.skipped == 3);
  REQUIRE(s.skip_examples.size() == 3);
  CHECK_THAT(s.skip_examples[0], Contains("mem.jsonl:2:"));
  CHECK_THAT(s.skip_examples[1], Contains("mem.jsonl:3:"));
  CHECK_THAT(s.skip_examples[2], Contains("mem.jsonl:4:"));
}

TEST_CASE("shape: a skipped first row does not decide the form", "[data][shape]") {
  LoadOptions opt;
  opt.skip_bad_rows = true;
  const Shaped s = shape(Task::prompt_only, "{\"prompt\": 1}\n{\"prompt\": [" + kUser + "]}\n{\"prompt\": \"x\"}\n", opt);
  CHECK(s.form == Form::conversational);
  CHECK(s.rows.size() == 1);
  CHECK(s.skipped == 2);
}

TEST_CASE("shape: nothing usable is an error", "[data][shape][errors]") {
  LoadOptions opt;
  opt.skip_bad_rows = true;
  CHECK_THAT(input_error([&] { shape(Task::sft, "{\"x\": 1}\n{\"y\": 2}\n", opt); }),
             Contains("no usable rows for sft data (2 bad rows skipped)"));
  CHECK_THAT(input_error([&] { shape_for(Task::sft, Dataset{}); }), Contains("empty"));
}

TEST_CASE("shape: load_for reads and shapes a file", "[data][shape]") {
  trlx::data::test::TempDir dir;
  const auto p = dir.write("train.jsonl", "{\"prompt\": \"a\"}\n");
  const Shaped s = load_for(Task::prompt_only, dir.path);
  CHECK(s.rows.size() == 1);
  CHECK(s.files == std::vector<std::string>{p.string()});
}

TEST_CASE("help text of each data task", "[data][shape]") {
  CHECK_THAT(describe(Task::sft), Contains("\"messages\""));
  CHECK_THAT(describe(Task::preference), Contains("\"rejected\""));
  CHECK_THAT(describe(Task::unpaired_preference), Contains("\"label\""));
  CHECK_THAT(describe(Task::reward), Contains("\"margin\""));
  CHECK_THAT(describe(Task::prompt_only), Contains("\"prompt\""));
}

// --- what a row passes the chat template ----------------------------------------

TEST_CASE("tools: a list of schemas is kept, a JSON string of one is parsed for every task", "[data][shape][tools]") {
  const std::string conv = "[" + kUser + ", " + kAsst + "]";
  const std::string schema = R"({"type": "function", "function": {"name": "add", "parameters": {}}})";
  const std::string as_list = "[" + schema + "]";
  // The string form, as a datasets column of JSON text holds it.
  const std::string as_string = nlohmann::ordered_json(as_list).dump();
  for (const auto& tools : {as_list, as_string}) {
    const Shaped s = shape(Task::sft, "{\"messages\": " + conv + ", \"tools\": " + tools + "}\n");
    const Value& t = s.rows[0].value["tools"];
    REQUIRE(t.is_array());
    REQUIRE(t.size() == 1);
    CHECK(t[0]["function"]["name"] == "add");
    const Shaped p = shape(Task::prompt_only, "{\"prompt\": [" + kUser + "], \"tools\": " + tools + "}\n");
    CHECK(p.rows[0].value["tools"].is_array());
  }
  // Null is no tools; chat_template_kwargs an object, kept.
  const Shaped n = shape(Task::sft, "{\"messages\": " + conv +
                                        ", \"tools\": null, \"chat_template_kwargs\": {\"enable_thinking\": false}}\n");
  CHECK(n.rows[0].value["tools"].is_null());
  CHECK(n.rows[0].value["chat_template_kwargs"]["enable_thinking"] == false);
}

TEST_CASE("tools: a value that is not a list of schemas is a bad row, named", "[data][shape][tools]") {
  const std::string conv = "[" + kUser + ", " + kAsst + "]";
  const std::string ok = R"([{"type": "function", "function": {"name": "add"}}])";
  CHECK_THAT(shape_error(Task::sft, "{\"messages\": " + conv + ", \"tools\": {\"name\": \"add\"}}\n"),
             Contains("mem.jsonl:1") && Contains("\"tools\"") && Contains("not a list of function schemas"));
  CHECK_THAT(shape_error(Task::sft, "{\"messages\": " + conv + ", \"tools\": \"[{oops\"}\n"),
             Contains("mem.jsonl:1") && Contains("not JSON"));
  CHECK_THAT(shape_error(Task::preference, "{\"prompt\": [" + kUser + "], \"chosen\": [" + kAsst + "], \"rejected\": [" +
                                               kAsst + "], \"tools\": [1]}\n"),
             Contains("element 0") && Contains("not a function schema"));
  CHECK_THAT(shape_error(Task::sft, "{\"messages\": " + conv + ", \"chat_template_kwargs\": \"x\"}\n"),
             Contains("\"chat_template_kwargs\"") && Contains("not an object"));
  // With skip_bad_rows the row is dropped and counted, the good one kept.
  LoadOptions skip;
  skip.skip_bad_rows = true;
  const Shaped s = shape(Task::sft,
                         "{\"messages\": " + conv + ", \"tools\": 3}\n{\"messages\": " + conv + ", \"tools\": " + ok +
                             "}\n",
                         skip);
  CHECK(s.rows.size() == 1);
  CHECK(s.skipped == 1);
}

TEST_CASE("image columns: vision-language rows are refused, not stripped, even with skip_bad_rows",
          "[data][shape][tools]") {
  LoadOptions skip;
  skip.skip_bad_rows = true;
  for (const char* column : {"image", "images"}) {
    const std::string row =
        std::string("{\"messages\": [") + kUser + ", " + kAsst + "], \"" + column + "\": [\"cat.png\"]}\n";
    const std::string e = shape_error(Task::sft, row, skip);
    CHECK_THAT(e, Contains("mem.jsonl:1") && Contains(std::string("column \"") + column + "\"") &&
                      Contains("vision-language training is not supported"));
  }
  // A null image column is no image.
  const Shaped s = shape(Task::sft, "{\"messages\": [" + kUser + ", " + kAsst + "], \"images\": null}\n");
  CHECK(s.rows.size() == 1);
}
