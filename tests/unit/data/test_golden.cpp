// Comparisons with TRL's own data_utils output (scripts/fixtures/data_fixtures.py
// writes tests/data/data/ by running TRL).
#include <catch2/catch.hpp>

#include "helpers.hpp"
#include "text/data/dataset.hpp"

using namespace trlx::data;
using trlx::data::test::golden;

namespace {

std::vector<Value> expected_rows(const std::string& name) {
  std::vector<Value> out;
  for (auto& r : load_dataset(golden(name)).rows) out.push_back(std::move(r.value));
  return out;
}

void check_rows_match(const Shaped& got, const std::vector<Value>& want) {
  REQUIRE(got.rows.size() == want.size());
  for (size_t i = 0; i < want.size(); ++i) {
    INFO("row " << i << " (" << got.rows[i].where() << ")\n  trlx: " << got.rows[i].value.dump()
                << "\n  TRL:  " << want[i].dump());
    CHECK(py_equal(got.rows[i].value, want[i]));
  }
}

}  // namespace

TEST_CASE("golden: implicit prompts of plain-text pairs match TRL", "[data][golden]") {
  const Shaped s = load_for(Task::preference, golden("extract_string.in.jsonl"));
  CHECK(s.form == Form::text);
  check_rows_match(s, expected_rows("extract_string.expected.jsonl"));
  CHECK(s.prompts_extracted == s.rows.size() - 1);  // one row has an explicit prompt
}

TEST_CASE("golden: implicit prompts of conversations match TRL", "[data][golden]") {
  const Shaped s = load_for(Task::preference, golden("extract_conv.in.jsonl"));
  CHECK(s.form == Form::conversational);
  check_rows_match(s, expected_rows("extract_conv.expected.jsonl"));
}

TEST_CASE("golden: extract_prompt itself on TRL's cases", "[data][golden]") {
  const auto in = load_dataset(golden("extract_string.in.jsonl")).rows;
  const auto want = expected_rows("extract_string.expected.jsonl");
  REQUIRE(in.size() == want.size());
  size_t compared = 0;
  for (size_t i = 0; i < in.size(); ++i) {
    if (in[i].value.contains("prompt")) continue;
    const PromptSplit p = extract_prompt(in[i].value["chosen"], in[i].value["rejected"]);
    INFO(in[i].value.dump());
    CHECK(p.prompt == want[i]["prompt"]);
    CHECK(p.chosen == want[i]["chosen"]);
    CHECK(p.rejected == want[i]["rejected"]);
    ++compared;
  }
  CHECK(compared >= 10);
}

TEST_CASE("golden: TRL's wrap-around at index 0 is not copied", "[data][golden]") {
  // TRL reads chosen[-1] when the texts differ at once and chosen ends in a
  // space, cutting "abc " into "abc" + " " and "xyz" into "z". trlx keeps the
  // rule it applies everywhere else: nothing shared, so the prompt is empty.
  const auto trl = expected_rows("extract_wrap.trl.jsonl");
  const Shaped s = load_for(Task::preference, golden("extract_wrap.in.jsonl"));
  REQUIRE(s.rows.size() == 1);
  CHECK_FALSE(py_equal(s.rows[0].value, trl.at(0)));
  CHECK(py_equal(s.rows[0].value, Value::parse(R"({"prompt": "", "chosen": "abc ", "rejected": "xyz"})")));
}

TEST_CASE("golden: unpairing matches TRL row for row, across map batches", "[data][golden]") {
  const Shaped s = load_for(Task::unpaired_preference, golden("unpair_string.in.jsonl"));
  CHECK(s.unpaired_from == 1003);
  check_rows_match(s, expected_rows("unpair_string.expected.jsonl"));
}

TEST_CASE("golden: unpairing conversations matches TRL", "[data][golden]") {
  const Shaped s = load_for(Task::unpaired_preference, golden("unpair_conv.in.jsonl"));
  CHECK(s.form == Form::conversational);
  check_rows_match(s, expected_rows("unpair_conv.expected.jsonl"));
}

TEST_CASE("golden: KTO on implicit-prompt pairs extracts, then unpairs, as TRL", "[data][golden]") {
  const Shaped s = load_for(Task::unpaired_preference, golden("unpair_implicit.in.jsonl"));
  CHECK(s.prompts_extracted == 2);
  check_rows_match(s, expected_rows("unpair_implicit.expected.jsonl"));
}

TEST_CASE("golden: is_conversational agrees with TRL", "[data][golden]") {
  const auto cases = load_dataset(golden("is_conversational.jsonl")).rows;
  REQUIRE(cases.size() >= 8);
  for (const auto& c : cases) {
    INFO(c.value.dump());
    CHECK(is_conversational(c.value["example"]) == c.value["expected"].get<bool>());
  }
}

TEST_CASE("py_equal follows Python's ==", "[data][golden]") {
  CHECK(py_equal(Value::parse(R"({"a": 1, "b": [1, {"c": null}]})"),
                 Value::parse(R"({"b": [1.0, {"c": null}], "a": true})")));
  CHECK_FALSE(py_equal(Value::parse(R"({"a": 1})"), Value::parse(R"({"a": 1, "b": 2})")));
  CHECK_FALSE(py_equal(Value::parse(R"([1, 2])"), Value::parse(R"([2, 1])")));
  CHECK_FALSE(py_equal(Value("1"), Value(1)));
  CHECK(py_equal(Value(-3), Value(-3.0)));
  CHECK_FALSE(py_equal(Value(-1), Value(18446744073709551615ull)));
  CHECK_FALSE(py_equal(Value(nullptr), Value(false)));
}
