// Reading JSON Lines / JSON files and dataset directories.
#include <catch2/catch.hpp>

#include "helpers.hpp"
#include "text/data/dataset.hpp"

using namespace trlx::data;
using trlx::data::test::input_error;
using trlx::data::test::TempDir;
using Catch::Matchers::Contains;

namespace {

std::vector<std::string> file_names(const Dataset& ds) {
  std::vector<std::string> names;
  for (const auto& f : ds.files) names.push_back(std::filesystem::path(f).filename().string());
  return names;
}

}  // namespace

TEST_CASE("jsonl: rows, 1-based lines, blank lines and CRLF", "[data][reader]") {
  TempDir dir;
  const auto p = dir.write("d.jsonl", "{\"text\": \"a\"}\n\n  \n{\"text\": \"b\"}\r\n{\"text\": \"c\", \"z\": 1, \"a\": 2}");
  const Dataset ds = load_dataset(p);
  REQUIRE(ds.rows.size() == 3);
  CHECK(ds.rows[0].line == 1);
  CHECK(ds.rows[1].line == 4);
  CHECK(ds.rows[1].value["text"] == "b");
  CHECK(ds.rows[2].line == 5);
  CHECK(ds.rows[2].file == p.string());
  CHECK_FALSE(ds.rows[2].element.has_value());
  CHECK(ds.rows[2].where() == p.string() + ":5");
  // key order is the file's
  std::vector<std::string> keys;
  for (auto it = ds.rows[2].value.begin(); it != ds.rows[2].value.end(); ++it) keys.push_back(it.key());
  CHECK(keys == std::vector<std::string>{"text", "z", "a"});
  CHECK(ds.skipped == 0);
  CHECK(file_names(ds) == std::vector<std::string>{"d.jsonl"});
}

TEST_CASE("jsonl: a byte-order mark is allowed", "[data][reader]") {
  TempDir dir;
  const auto p = dir.write("d.jsonl", "\xEF\xBB\xBF{\"text\": \"a\"}\n");
  CHECK(load_dataset(p).rows.at(0).value["text"] == "a");
}

TEST_CASE("jsonl: invalid JSON names file, line and the problem", "[data][reader][errors]") {
  TempDir dir;
  const auto p = dir.write("d.jsonl", "{\"text\": \"a\"}\n{\"text\": tru}\n");
  const std::string msg = input_error([&] { load_dataset(p); });
  CHECK_THAT(msg, Contains(p.string() + ":2:"));
  CHECK_THAT(msg, Contains("invalid JSON at column"));
  CHECK_THAT(msg, Contains("tru"));
}

TEST_CASE("jsonl: an unterminated huge string is quoted by its ends only", "[data][reader][errors]") {
  TempDir dir;
  const auto p = dir.write("d.jsonl", "{\"text\": \"" + std::string(2'000'000, 'x') + "\n");
  const std::string msg = input_error([&] { load_dataset(p); });
  CHECK_THAT(msg, Contains(p.string() + ":1: invalid JSON at column"));
  CHECK_THAT(msg, Contains("missing closing quote"));
  CHECK_THAT(msg, Contains("characters ...]"));
  CHECK(msg.size() < 300 + p.string().size());
}

TEST_CASE("jsonl: two values on a line is invalid", "[data][reader][errors]") {
  TempDir dir;
  const auto p = dir.write("d.jsonl", "{\"a\": 1} {\"b\": 2}\n");
  CHECK_THAT(input_error([&] { load_dataset(p); }), Contains(p.string() + ":1: invalid JSON"));
}

TEST_CASE("jsonl: a row that is not an object", "[data][reader][errors]") {
  TempDir dir;
  const auto p = dir.write("d.jsonl", "{\"text\": \"a\"}\n[1, 2]\n");
  const std::string msg = input_error([&] { load_dataset(p); });
  CHECK_THAT(msg, Contains(p.string() + ":2:"));
  CHECK_THAT(msg, Contains("expected a JSON object"));
  CHECK_THAT(msg, Contains("found a list of 2 items"));
  const auto q = dir.write("e.jsonl", "\"just a string\"\n");
  CHECK_THAT(input_error([&] { load_dataset(q); }), Contains("found a string \"just a string\""));
}

TEST_CASE("jsonl: skip_bad_rows drops and counts bad rows", "[data][reader]") {
  TempDir dir;
  const auto p = dir.write("d.jsonl", "{\"text\": \"a\"}\nnot json\n[1]\n{\"text\": \"b\"}\n");
  LoadOptions opt;
  opt.skip_bad_rows = true;
  const Dataset ds = load_dataset(p, opt);
  REQUIRE(ds.rows.size() == 2);
  CHECK(ds.rows[1].line == 4);
  CHECK(ds.skipped == 2);
  REQUIRE(ds.skip_examples.size() == 2);
  CHECK_THAT(ds.skip_examples[0], Contains(p.string() + ":2:"));
  CHECK_THAT(ds.skip_examples[1], Contains(p.string() + ":3:"));
  // off by default
  CHECK_THAT(input_error([&] { load_dataset(p); }), Contains(":2:"));
}

TEST_CASE("jsonl: skip_bad_rows keeps only the first few reasons", "[data][reader]") {
  TempDir dir;
  std::string text;
  for (int i = 0; i < 20; ++i) text += "oops\n";
  text += "{\"text\": \"ok\"}\n";
  LoadOptions opt;
  opt.skip_bad_rows = true;
  const Dataset ds = load_dataset(dir.write("d.jsonl", text), opt);
  CHECK(ds.skipped == 20);
  CHECK(ds.skip_examples.size() == 5);
}

TEST_CASE("utf-8: a bad byte names file and line and is never skipped", "[data][reader][errors]") {
  TempDir dir;
  const auto p = dir.write("d.jsonl", "{\"text\": \"a\"}\n{\"text\": \"caf\xE9\"}\n");
  const std::string msg = input_error([&] { load_dataset(p); });
  CHECK_THAT(msg, Contains(p.string() + ":2:"));
  CHECK_THAT(msg, Contains("not valid UTF-8"));
  CHECK_THAT(msg, Contains("0xE9"));
  LoadOptions opt;
  opt.skip_bad_rows = true;
  CHECK_THAT(input_error([&] { load_dataset(p, opt); }), Contains("not valid UTF-8"));
}

TEST_CASE("utf-8: overlong forms and surrogates are rejected, good text is not", "[data][reader][errors]") {
  TempDir dir;
  for (const std::string bad : {"\xC0\xAF", "\xED\xA0\x80", "\xF4\x90\x80\x80", "\xE2\x82"}) {
    const auto p = dir.write("d.jsonl", "{\"text\": \"" + bad + "\"}\n");
    CHECK_THAT(input_error([&] { load_dataset(p); }), Contains("not valid UTF-8"));
  }
  const auto ok = dir.write("ok.jsonl", "{\"text\": \"\xE2\x82\xAC \xF0\x9F\x98\x80 \xC3\xA9\"}\n");
  CHECK(load_dataset(ok).rows.size() == 1);
  const auto json = dir.write("d.json", "[\n{\"text\": \"a\"},\n{\"text\": \"\xFF\"}\n]");
  CHECK_THAT(input_error([&] { load_dataset(json); }), Contains(json.string() + ":3: not valid UTF-8"));
}

TEST_CASE("empty datasets are errors", "[data][reader][errors]") {
  TempDir dir;
  const auto p = dir.write("d.jsonl", "\n  \n");
  CHECK_THAT(input_error([&] { load_dataset(p); }), Contains("empty"));
  const auto q = dir.write("e.json", "[]");
  CHECK_THAT(input_error([&] { load_dataset(q); }), Contains("empty"));
  const auto r = dir.write("f.jsonl", "x\ny\n");
  LoadOptions opt;
  opt.skip_bad_rows = true;
  const std::string msg = input_error([&] { load_dataset(r, opt); });
  CHECK_THAT(msg, Contains("every row was bad (2 skipped)"));
  CHECK_THAT(msg, Contains(r.string() + ":1:"));
}

TEST_CASE("json: a top-level array, with element lines", "[data][reader]") {
  TempDir dir;
  const auto p = dir.write("d.json",
                           "[\n  {\"text\": \"a\"},\n  {\n    \"text\": \"b, [x] {y}\"\n  },\n  "
                           "{\"text\": \"c\\\"]\"}\n]\n");
  const Dataset ds = load_dataset(p);
  REQUIRE(ds.rows.size() == 3);
  CHECK(ds.rows[0].line == 2);
  CHECK(ds.rows[1].line == 3);
  CHECK(ds.rows[2].line == 6);
  CHECK(ds.rows[2].element == 2u);
  CHECK(ds.rows[2].value["text"] == "c\"]");
  CHECK(ds.rows[2].where() == p.string() + ":6 (element 2)");
}

TEST_CASE("json: an array element that is not an object", "[data][reader][errors]") {
  TempDir dir;
  const auto p = dir.write("d.json", "[\n {\"text\": \"a\"},\n 42\n]");
  const std::string msg = input_error([&] { load_dataset(p); });
  CHECK_THAT(msg, Contains(p.string() + ":3 (element 1)"));
  CHECK_THAT(msg, Contains("found a number (42)"));
  LoadOptions opt;
  opt.skip_bad_rows = true;
  const Dataset ds = load_dataset(p, opt);
  CHECK(ds.rows.size() == 1);
  CHECK(ds.skipped == 1);
}

TEST_CASE("json: an object holding the split's list, or \"data\"", "[data][reader]") {
  TempDir dir;
  const auto p = dir.write("d.json",
                           "{\"version\": 2, \"train\": [{\"text\": \"t1\"}, {\"text\": \"t2\"}],\n"
                           " \"test\": [\n  {\"text\": \"e1\"}\n ]}");
  const Dataset train = load_dataset(p);
  REQUIRE(train.rows.size() == 2);
  CHECK(train.rows[1].value["text"] == "t2");
  CHECK(train.rows[1].line == 1);
  LoadOptions opt;
  opt.split = "test";
  const Dataset test = load_dataset(p, opt);
  REQUIRE(test.rows.size() == 1);
  CHECK(test.rows[0].value["text"] == "e1");
  CHECK(test.rows[0].line == 3);
  opt.split = "validation";
  const std::string msg = input_error([&] { load_dataset(p, opt); });
  CHECK_THAT(msg, Contains("no \"validation\" list"));
  CHECK_THAT(msg, Contains("\"train\", \"test\""));

  const auto q = dir.write("e.json", "{\"data\": [{\"text\": \"x\"}]}");
  CHECK(load_dataset(q).rows.at(0).value["text"] == "x");
}

TEST_CASE("json: any other object is one row", "[data][reader]") {
  TempDir dir;
  const auto p = dir.write("d.json", "\n{\n  \"prompt\": \"p\",\n  \"tags\": [\"a\"]\n}\n");
  const Dataset ds = load_dataset(p);
  REQUIRE(ds.rows.size() == 1);
  CHECK(ds.rows[0].line == 2);
  CHECK(ds.rows[0].value["prompt"] == "p");
}

TEST_CASE("json: a .json file holding JSON Lines is read as JSON Lines", "[data][reader]") {
  TempDir dir;
  const auto p = dir.write("d.json", "{\"text\": \"a\"}\n{\"text\": \"b\"}\n{\"text\": oops}\n");
  const std::string msg = input_error([&] { load_dataset(p); });
  CHECK_THAT(msg, Contains(p.string() + ":3: invalid JSON"));
  const auto q = dir.write("e.json", "{\"text\": \"a\"}\n{\"text\": \"b\"}\n");
  const Dataset ds = load_dataset(q);
  REQUIRE(ds.rows.size() == 2);
  CHECK(ds.rows[1].line == 2);
}

TEST_CASE("json: invalid JSON names the line of the error", "[data][reader][errors]") {
  TempDir dir;
  const auto p = dir.write("d.json", "[\n {\"text\": \"a\"},\n {\"text\" \"b\"}\n]");
  const std::string msg = input_error([&] { load_dataset(p); });
  CHECK_THAT(msg, Contains(p.string() + ":3: invalid JSON"));
  const auto q = dir.write("e.json", "42");
  CHECK_THAT(input_error([&] { load_dataset(q); }), Contains("found a number (42)"));
}

TEST_CASE("rows nested too deeply are refused", "[data][reader][errors]") {
  TempDir dir;
  const std::string deep = "{\"text\": " + std::string(200, '[') + std::string(200, ']') + "}";
  const auto p = dir.write("d.jsonl", "{\"text\": \"ok\"}\n" + deep + "\n");
  CHECK_THAT(input_error([&] { load_dataset(p); }), Contains(p.string() + ":2: row nested deeper"));
}

TEST_CASE("parquet and arrow: a file that is not one is refused by name", "[data][reader][errors]") {
  // (tests/unit/data/test_formats.cpp reads real ones.)
  TempDir dir;
  const auto p = dir.write("train.parquet", "PAR1");
  std::string msg = input_error([&] { load_dataset(p); });
  CHECK_THAT(msg, Contains(p.string() + ": "));
  CHECK_THAT(msg, Contains("not a readable Parquet file") || Contains("built without Apache Arrow"));
  const auto a = dir.write("x.arrow", "");
  msg = input_error([&] { load_dataset(a); });
  CHECK_THAT(msg, Contains(a.string() + ": "));
  CHECK_THAT(msg, Contains("not a readable Arrow") || Contains("built without Apache Arrow"));
  // also when a directory holds them
  TempDir hub;
  hub.write("data/train-00000-of-00001.parquet", "PAR1");
  hub.write("README.md", "# card");
  CHECK_THAT(input_error([&] { load_dataset(hub.path); }), Contains("train-00000-of-00001.parquet: "));
}

TEST_CASE("other file types are refused with a hint", "[data][reader][errors]") {
  TempDir dir;
  CHECK_THAT(input_error([&] { load_dataset(dir.write("d.csv", "a,b\n")); }), Contains("load_dataset('csv'"));
  CHECK_THAT(input_error([&] { load_dataset(dir.write("d.jsonl.bz2", "")); }), Contains("decompress"));
  CHECK_THAT(input_error([&] { load_dataset(dir.write("d.txt", "hello")); }),
             Contains("unsupported data file type"));
  CHECK_THAT(input_error([&] { load_dataset(dir.path / "missing.jsonl"); }),
             Contains("no such data file or directory"));
}

TEST_CASE("directory: split files by name", "[data][reader][dir]") {
  TempDir dir;
  dir.write("train.jsonl", "{\"text\": \"t\"}\n");
  dir.write("test.jsonl", "{\"text\": \"e1\"}\n{\"text\": \"e2\"}\n");
  dir.write("README.md", "card");
  const Dataset train = load_dataset(dir.path);
  CHECK(file_names(train) == std::vector<std::string>{"train.jsonl"});
  CHECK(train.rows.size() == 1);
  LoadOptions opt;
  opt.split = "test";
  CHECK(load_dataset(dir.path, opt).rows.size() == 2);
  opt.split = "validation";
  const std::string msg = input_error([&] { load_dataset(dir.path, opt); });
  CHECK_THAT(msg, Contains("no file names split \"validation\""));
  CHECK_THAT(msg, Contains("splits found: test, train"));
}

TEST_CASE("directory: shards in order, hub layout, hidden and metadata files skipped", "[data][reader][dir]") {
  TempDir dir;
  dir.write("data/train-00001-of-00002.jsonl", "{\"text\": \"second\"}\n");
  dir.write("data/train-00000-of-00002.jsonl", "{\"text\": \"first\"}\n");
  dir.write("data/test-00000-of-00001.json", "[{\"text\": \"e\"}]");
  dir.write(".cache/train.jsonl", "broken");
  dir.write(".gitattributes", "*.jsonl lfs");
  dir.write("dataset_info.json", "{\"splits\": {}}");
  const Dataset ds = load_dataset(dir.path);
  CHECK(file_names(ds) ==
        std::vector<std::string>{"train-00000-of-00002.jsonl", "train-00001-of-00002.jsonl"});
  REQUIRE(ds.rows.size() == 2);
  CHECK(ds.rows[0].value["text"] == "first");
  LoadOptions opt;
  opt.split = "test";
  CHECK(load_dataset(dir.path, opt).rows.at(0).value["text"] == "e");
}

TEST_CASE("directory: split aliases and split directories", "[data][reader][dir]") {
  TempDir dir;
  dir.write("dev.jsonl", "{\"text\": \"v\"}\n");
  dir.write("eval_set.jsonl", "{\"text\": \"e\"}\n");
  dir.write("training/part1.jsonl", "{\"text\": \"t\"}\n");
  LoadOptions opt;
  opt.split = "validation";
  CHECK(load_dataset(dir.path, opt).rows.at(0).value["text"] == "v");
  opt.split = "test";
  CHECK(load_dataset(dir.path, opt).rows.at(0).value["text"] == "e");
  opt.split = "train";
  CHECK(load_dataset(dir.path, opt).rows.at(0).value["text"] == "t");
}

TEST_CASE("directory: unnamed files are all train, and words must match whole", "[data][reader][dir]") {
  TempDir dir;
  dir.write("a.jsonl", "{\"text\": \"a\"}\n");
  dir.write("b.json", "[{\"text\": \"b\"}]");
  dir.write("mytrain.jsonl", "{\"text\": \"m\"}\n");  // "mytrain" is not the word "train"
  CHECK(load_dataset(dir.path).rows.size() == 3);
  LoadOptions opt;
  opt.split = "test";
  CHECK_THAT(input_error([&] { load_dataset(dir.path, opt); }),
             Contains("no file names any split"));
}

TEST_CASE("directory: custom split names and empty directories", "[data][reader][dir]") {
  TempDir dir;
  dir.write("sft.jsonl", "{\"text\": \"s\"}\n");
  dir.write("rl.jsonl", "{\"prompt\": \"p\"}\n");
  LoadOptions opt;
  opt.split = "rl";
  CHECK(load_dataset(dir.path, opt).rows.at(0).value.contains("prompt"));
  TempDir empty;
  empty.write("notes.md", "x");
  CHECK_THAT(input_error([&] { load_dataset(empty.path); }), Contains("no data files"));
}

TEST_CASE("in-memory readers append to a dataset", "[data][reader]") {
  Dataset ds;
  read_jsonl_text("{\"a\": 1}\n{\"a\": 2}\n", "mem.jsonl", {}, ds);
  read_json_text("[{\"a\": 3}]", "mem.json", {}, ds);
  REQUIRE(ds.rows.size() == 3);
  CHECK(ds.rows[2].file == "mem.json");
}

TEST_CASE("directory: a split with JSON and Parquet files is refused, not half read", "[data][reader][dir][errors]") {
  TempDir dir;
  dir.write("train.jsonl", "{\"text\": \"t\"}\n");
  dir.write("train.parquet", "PAR1");
  CHECK_THAT(input_error([&] { load_dataset(dir.path); }), Contains("mixes JSON files") && Contains("train.parquet"));
  // a save_to_disk directory whose state.json lists no files
  TempDir saved;
  saved.write("dataset_dict.json", "{\"splits\": [\"train\"]}");
  saved.write("train/state.json", "{}");
  saved.write("train/dataset_info.json", "{}");
  saved.write("train/data-00000-of-00001.arrow", "");
  CHECK_THAT(input_error([&] { load_dataset(saved.path); }), Contains("state.json: expected an object with a \"_data_files\" list"));
}

TEST_CASE("json: numbers past double's range are invalid JSON", "[data][reader][errors]") {
  TempDir dir;
  const auto p = dir.write("d.json", "[{\"margin\": 1e400}]");
  const std::string msg = input_error([&] { load_dataset(p); });
  CHECK_THAT(msg, Contains(p.string() + ": invalid JSON: number overflow"));
}

TEST_CASE("directory: errors name the file inside the directory", "[data][reader][dir][errors]") {
  TempDir dir;
  dir.write("train-0.jsonl", "{\"text\": \"a\"}\n");
  const auto bad = dir.write("train-1.jsonl", "{\"text\": \"a\"}\n{\"text\": \"b\"}\n{\"text\": \"\xC3\"}\n");
  CHECK_THAT(input_error([&] { load_dataset(dir.path); }), Contains(bad.string() + ":3: not valid UTF-8"));
}
