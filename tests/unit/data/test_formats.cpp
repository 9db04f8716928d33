// Parquet, Arrow (save_to_disk) and compressed JSON Lines give the rows the
// JSON Lines reader gives for the same dataset. The files and the reference
// rows come from pyarrow/datasets (scripts/fixtures/data_formats_fixtures.py
// writes tests/data/formats/).
#include <catch2/catch.hpp>
#include <filesystem>
#include <fstream>

#include "helpers.hpp"
#include "text/data/columnar.hpp"
#include "text/data/dataset.hpp"

using namespace trlx::data;
using Catch::Matchers::Contains;
using trlx::data::test::input_error;
using trlx::data::test::TempDir;
namespace fs = std::filesystem;

namespace {

fs::path formats() { return ::trlx::test::data_dir() / "formats"; }

#define REQUIRE_ARROW_BUILD()                                                                      \
  do {                                                                                             \
    if (!detail::columnar_built()) TRLX_SKIP("this build has no Apache Arrow (no pyarrow found)"); \
  } while (0)

std::vector<Value> values(const Dataset& ds) {
  std::vector<Value> out;
  for (const auto& r : ds.rows) out.push_back(r.value);
  return out;
}

// The same values, types and key order: their JSON text is the same.
void check_same_rows(const std::vector<Value>& got, const std::vector<Value>& want,
                     const std::string& what) {
  REQUIRE(got.size() == want.size());
  for (size_t i = 0; i < want.size(); ++i) {
    INFO(what << " row " << i << "\n  got:  " << got[i].dump() << "\n  want: " << want[i].dump());
    CHECK(got[i].dump() == want[i].dump());
  }
}

std::vector<Value> reference(const std::string& name) {
  return values(load_dataset(formats() / (name + ".jsonl")));
}

std::vector<Value> slice(const std::vector<Value>& v, size_t from, size_t n) {
  return {v.begin() + static_cast<std::ptrdiff_t>(from),
          v.begin() + static_cast<std::ptrdiff_t>(from + n)};
}

void copy_into(const fs::path& from, const fs::path& to) {
  fs::create_directories(to.parent_path());
  fs::copy_file(from, to, fs::copy_options::overwrite_existing);
}

}  // namespace

TEST_CASE("formats: Parquet and save_to_disk rows are the JSON Lines rows", "[data][formats]") {
  REQUIRE_ARROW_BUILD();
  for (const std::string name : {"prompt_completion", "conversational", "preference", "typed"}) {
    const auto want = reference(name);
    REQUIRE(want.size() >= 5);
    check_same_rows(values(load_dataset(formats() / (name + ".parquet"))), want, name + ".parquet");
    check_same_rows(values(load_dataset(formats() / (name + "_arrow"))), want, name + "_arrow");
  }
}

TEST_CASE("formats: every scalar type maps as the JSON reader reads it", "[data][formats]") {
  REQUIRE_ARROW_BUILD();
  const Dataset ds = load_dataset(formats() / "prompt_completion.parquet");
  const Value& r = ds.rows.at(0).value;
  CHECK(r["prompt"].is_string());                                 // large_string
  CHECK(r["id"].type() == Value::value_t::number_integer);        // int64
  CHECK(r["small"].get<int64_t>() == -128);                       // int8
  CHECK(r["big"].get<uint64_t>() == 18446744073709551615ull);     // uint64
  CHECK(r["weight"].get<double>() == static_cast<double>(0.1f));  // float32, widened as Python does
  CHECK(r["flag"].get<bool>() == true);
  CHECK(r["source"] == "web");    // dictionary-encoded
  CHECK(r["nothing"].is_null());  // null type
  CHECK(ds.rows.at(1).value["note"].is_null());
  CHECK(ds.rows.at(3).value["tags"].is_null());  // a null list
  CHECK(ds.rows.at(6).value["tags"] == Value::parse(R"(["e", null])"));
  std::vector<std::string> keys;
  for (auto it = r.begin(); it != r.end(); ++it) keys.push_back(it.key());
  CHECK(keys == std::vector<std::string>{"prompt", "completion", "id", "score", "weight", "flag",
                                         "note", "tags", "small", "big", "source", "nothing"});
}

TEST_CASE("formats: a message struct keeps every field, null where a message has none",
          "[data][formats]") {
  REQUIRE_ARROW_BUILD();
  const Dataset ds = load_dataset(formats() / "conversational.parquet");
  CHECK(ds.rows.at(0).value["messages"][0] ==
        Value::parse(R"({"role": "user", "content": "Hi", "name": null})"));
  CHECK(ds.rows.at(2).value["messages"][0]["name"] == "alice");
}

TEST_CASE("formats: rows of a Parquet file span its row groups in order and say where they are",
          "[data][formats]") {
  REQUIRE_ARROW_BUILD();
  const auto p = formats() / "prompt_completion.parquet";
  const Dataset ds = load_dataset(p);  // 3 rows per row group: 4 groups
  REQUIRE(ds.rows.size() == 10);
  for (size_t i = 0; i < ds.rows.size(); ++i) {
    CHECK(ds.rows[i].value["id"] == 100 + static_cast<int>(i));
    CHECK(ds.rows[i].element == i);
    CHECK(ds.rows[i].file == p.string());
  }
  CHECK(ds.rows[7].where() == p.string() + " (row 7)");
  CHECK(ds.files == std::vector<std::string>{p.string()});
}

TEST_CASE("formats: a save_to_disk directory reads its shards in state.json's order",
          "[data][formats]") {
  REQUIRE_ARROW_BUILD();
  const auto dir = formats() / "preference_arrow";
  const Dataset ds = load_dataset(dir);
  REQUIRE(ds.files.size() == 2);
  CHECK(fs::path(ds.files[0]).filename() == "data-00000-of-00002.arrow");
  CHECK(fs::path(ds.files[1]).filename() == "data-00001-of-00002.arrow");
  // Rows are numbered within their file.
  CHECK(ds.rows.at(3).element == 0u);
  CHECK(ds.rows.at(3).file == ds.files[1]);
  // One Dataset is the train split.
  LoadOptions test;
  test.split = "test";
  CHECK_THROWS_AS(load_dataset(dir, test), MissingSplitError);
}

TEST_CASE("formats: a single .arrow file can be named directly", "[data][formats]") {
  REQUIRE_ARROW_BUILD();
  const auto want = reference("preference");
  check_same_rows(
      values(load_dataset(formats() / "preference_arrow" / "data-00001-of-00002.arrow")),
      slice(want, 3, 3), "shard 1");
}

TEST_CASE("formats: a DatasetDict directory serves its splits by name", "[data][formats]") {
  REQUIRE_ARROW_BUILD();
  const auto want = reference("preference");
  const auto dir = formats() / "dict_arrow";
  check_same_rows(values(load_dataset(dir)), slice(want, 0, 4), "train");
  LoadOptions eval;
  eval.split = "eval";
  check_same_rows(values(load_dataset(dir, eval)), slice(want, 4, 2), "eval");
  LoadOptions test;  // "test" finds the one split of its group, "eval"
  test.split = "test";
  check_same_rows(values(load_dataset(dir, test)), slice(want, 4, 2), "test");
  LoadOptions missing;
  missing.split = "validation";
  try {
    load_dataset(dir, missing);
    FAIL("expected MissingSplitError");
  } catch (const MissingSplitError& e) {
    CHECK_THAT(std::string(e.what()),
               Contains("no split \"validation\"") && Contains("train, eval"));
  }
}

TEST_CASE("formats: a hub dataset directory of Parquet shards splits by file path",
          "[data][formats]") {
  REQUIRE_ARROW_BUILD();
  const auto want = reference("prompt_completion");
  const auto hub = formats() / "hub";
  const Dataset train = load_dataset(hub);
  CHECK(train.files.size() == 2);
  check_same_rows(values(train), slice(want, 0, 8), "train");
  LoadOptions test;
  test.split = "test";
  check_same_rows(values(load_dataset(hub, test)), slice(want, 8, 2), "test");
}

TEST_CASE("formats: hub-style split directories of save_to_disk datasets", "[data][formats]") {
  REQUIRE_ARROW_BUILD();
  // train/ and test/ each a save_to_disk directory, with a stray cache file
  // that state.json does not list.
  TempDir dir;
  for (const auto& e : fs::directory_iterator(formats() / "dict_arrow" / "train"))
    copy_into(e.path(), dir.path / "train" / e.path().filename());
  for (const auto& e : fs::directory_iterator(formats() / "dict_arrow" / "eval"))
    copy_into(e.path(), dir.path / "test" / e.path().filename());
  copy_into(formats() / "dict_arrow" / "eval" / "data-00000-of-00001.arrow",
            dir.path / "train" / "cache-1234.arrow");
  const auto want = reference("preference");
  check_same_rows(values(load_dataset(dir.path)), slice(want, 0, 4), "train");
  LoadOptions test;
  test.split = "test";
  check_same_rows(values(load_dataset(dir.path, test)), slice(want, 4, 2), "test");
}

TEST_CASE("formats: compressed JSON Lines (.jsonl.gz, .jsonl.zst)", "[data][formats]") {
  REQUIRE_ARROW_BUILD();
  const auto want = reference("prompt_completion");
  check_same_rows(values(load_dataset(formats() / "prompt_completion.jsonl.gz")), want, "gz");
  check_same_rows(values(load_dataset(formats() / "prompt_completion.jsonl.zst")), want, "zst");
  // Concatenated gzip members are one stream, as gunzip reads them.
  auto twice = want;
  twice.insert(twice.end(), want.begin(), want.end());
  const Dataset ds = load_dataset(formats() / "two_members.jsonl.gz");
  check_same_rows(values(ds), twice, "two members");
  CHECK(ds.rows.at(11).where() == (formats() / "two_members.jsonl.gz").string() + ":12");
}

TEST_CASE("formats: one split never mixes JSON and Parquet files", "[data][formats][errors]") {
  REQUIRE_ARROW_BUILD();
  TempDir dir;
  copy_into(formats() / "prompt_completion.jsonl", dir.path / "train.jsonl");
  copy_into(formats() / "prompt_completion.parquet", dir.path / "train.parquet");
  const std::string msg = input_error([&] { load_dataset(dir.path); });
  CHECK_THAT(
      msg, Contains("mixes JSON files") && Contains("Parquet files") && Contains("train.parquet"));
  // Different splits may use different formats.
  fs::rename(dir.path / "train.parquet", dir.path / "test.parquet");
  CHECK(load_dataset(dir.path).rows.size() == 10);
  LoadOptions test;
  test.split = "test";
  CHECK(load_dataset(dir.path, test).rows.size() == 10);
}

TEST_CASE("formats: a corrupt Parquet file names the file, row group and column",
          "[data][formats][errors]") {
  REQUIRE_ARROW_BUILD();
  const auto p = formats() / "errors" / "corrupt.parquet";
  const std::string msg = input_error([&] { load_dataset(p); });
  CHECK_THAT(msg, Contains(p.string() + ": row group 1, column \"completion\": cannot be read"));
  const auto t = formats() / "errors" / "truncated.parquet";
  CHECK_THAT(input_error([&] { load_dataset(t); }),
             Contains(t.string() + ": not a readable Parquet file"));
}

TEST_CASE("formats: a column of a type trlx cannot map is refused by name",
          "[data][formats][errors]") {
  REQUIRE_ARROW_BUILD();
  const auto bin = formats() / "errors" / "binary.parquet";
  const std::string b = input_error([&] { load_dataset(bin); });
  CHECK_THAT(b,
             Contains(bin.string() + ": row group 0, column \"blob\"") && Contains("type binary"));
  const auto map = formats() / "errors" / "map.parquet";
  CHECK_THAT(input_error([&] { load_dataset(map); }),
             Contains(map.string() + ": row group 0, column \"attrs\"") && Contains("type map<"));
  const auto nested = formats() / "errors" / "nested_binary.parquet";
  CHECK_THAT(input_error([&] { load_dataset(nested); }),
             Contains("column \"messages\": messages[].data has type binary"));
}

TEST_CASE("formats: timestamps in a zone other than UTC are refused with the advice to cast",
          "[data][formats][errors]") {
  REQUIRE_ARROW_BUILD();
  const auto p = formats() / "errors" / "zoned_timestamp.parquet";
  CHECK_THAT(input_error([&] { load_dataset(p); }),
             Contains(p.string() + ": row group 0, column \"at\"") &&
                 Contains("tz=Europe/Paris]") && Contains("cast the column to UTC"));
}

TEST_CASE("formats: text that is not UTF-8 names the row", "[data][formats][errors]") {
  REQUIRE_ARROW_BUILD();
  const auto p = formats() / "errors" / "bad_utf8.parquet";
  LoadOptions skip;  // encoding errors are never skipped
  skip.skip_bad_rows = true;
  CHECK_THAT(
      input_error([&] { load_dataset(p, skip); }),
      Contains(p.string() + ": row group 1, column \"prompt\", row 1: not valid UTF-8 (byte 0xE9"));
}

TEST_CASE("formats: .arrow files without state.json are refused", "[data][formats][errors]") {
  REQUIRE_ARROW_BUILD();
  const auto dir = formats() / "errors" / "no_state";
  const std::string msg = input_error([&] { load_dataset(dir); });
  CHECK_THAT(msg, Contains((dir / "data-00000-of-00002.arrow").string()) &&
                      Contains("without state.json"));
  // A state.json naming a file that is not there.
  TempDir tmp;
  for (const auto& e : fs::directory_iterator(formats() / "preference_arrow"))
    copy_into(e.path(), tmp.path / e.path().filename());
  fs::remove(tmp.path / "data-00001-of-00002.arrow");
  CHECK_THAT(input_error([&] { load_dataset(tmp.path); }),
             Contains("state.json: lists data file") &&
                 Contains("data-00001-of-00002.arrow, which is not there"));
  std::ofstream(tmp.path / "state.json") << "{\"_split\": null}";
  CHECK_THAT(input_error([&] { load_dataset(tmp.path); }), Contains("\"_data_files\" list"));
}

TEST_CASE("formats: a damaged Arrow file names the file", "[data][formats][errors]") {
  REQUIRE_ARROW_BUILD();
  TempDir tmp;
  const auto src = formats() / "preference_arrow" / "data-00000-of-00002.arrow";
  std::ifstream in(src, std::ios::binary);
  std::string bytes((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
  const auto cut = tmp.write("cut.arrow", bytes.substr(0, bytes.size() * 2 / 3));
  CHECK_THAT(input_error([&] { load_dataset(cut); }), Contains(cut.string() + ": "));
  const auto junk = tmp.write("junk.arrow", "not arrow at all");
  CHECK_THAT(input_error([&] { load_dataset(junk); }),
             Contains(junk.string() + ": not a readable Arrow"));
  const auto gz = tmp.write("junk.jsonl.gz", "not gzip");
  CHECK_THAT(input_error([&] { load_dataset(gz); }),
             Contains(gz.string() + ": not valid gzip data"));
}

TEST_CASE("formats: other compressed files and csv are still refused with advice",
          "[data][formats][errors]") {
  TempDir tmp;
  const auto xz = tmp.write("d.jsonl.xz", "x");
  CHECK_THAT(input_error([&] { load_dataset(xz); }), Contains("decompress it first"));
  const auto csv = tmp.write("d.csv", "a,b\n");
  CHECK_THAT(input_error([&] { load_dataset(csv); }), Contains("csv files are not supported yet"));
}

TEST_CASE("formats: save_to_disk directories that lost files are refused by name",
          "[data][formats][errors]") {
  // A DatasetDict split folder without state.json.
  TempDir dict;
  dict.write("dataset_dict.json", "{\"splits\": [\"train\"]}");
  dict.write("train/dataset_info.json", "{}");
  dict.write("train/data-00000-of-00001.arrow", "");
  CHECK_THAT(input_error([&] { load_dataset(dict.path); }),
             Contains((dict.path / "train").string() + ": split directory without state.json"));
  // A split the index does not list.
  dict.write("dataset_dict.json", "{\"splits\": [\"train\", \"../x\"]}");
  CHECK_THAT(input_error([&] { load_dataset(dict.path); }),
             Contains("\"splits\": expected split names"));
}

TEST_CASE("formats: another tool's state.json beside JSON files is only metadata",
          "[data][formats]") {
  TempDir dir;
  dir.write("state.json", "{\"step\": 3}");
  dir.write("train.jsonl", "{\"text\": \"a\"}\n");
  const Dataset ds = load_dataset(dir.path);
  REQUIRE(ds.rows.size() == 1);
  CHECK(ds.files.size() == 1);
}

TEST_CASE("formats: a hub cache snapshot of symlinked Parquet files", "[data][formats]") {
  REQUIRE_ARROW_BUILD();
  // The hub cache keeps files as blobs and a snapshot of symlinks to them.
  TempDir cache;
  const auto blobs = cache.path / "blobs";
  fs::create_directories(blobs);
  fs::create_directories(cache.path / "snapshots" / "abc" / "data");
  for (const std::string name :
       {"train-00000-of-00002.parquet", "train-00001-of-00002.parquet", "test-00000-of-00001.parquet"}) {
    fs::copy_file(formats() / "hub" / "data" / name, blobs / name);
    fs::create_symlink(blobs / name, cache.path / "snapshots" / "abc" / "data" / name);
  }
  const auto want = reference("prompt_completion");
  check_same_rows(values(load_dataset(cache.path / "snapshots" / "abc")), slice(want, 0, 8),
                  "train");
}
