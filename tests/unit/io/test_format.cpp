// The safetensors format layer without tensors: header validation (every
// corrupt-input case), header and index encoding against the reference's
// bytes, size parsing and the shard plan against huggingface_hub's.
#include <catch2/catch.hpp>

#include <nlohmann/json.hpp>

#include <cstring>
#include <fstream>
#include <functional>
#include <vector>

#include <unistd.h>

#include "core/error.hpp"
#include "helpers.hpp"
#include "io/atomic_write.hpp"
#include "io/safetensors_format.hpp"
#include "support.hpp"

using namespace trlx::io;
using trlx::io::test::bytes_of;
using trlx::io::test::expected_json;
using trlx::io::test::fixture;
using trlx::test::error_message_of;
using trlx::io::test::make_file;
using trlx::io::test::TempDir;
using Catch::Matchers::Contains;

namespace {

// Opens a file as the readers do and returns the InputError message.
std::string open_error(const std::filesystem::path& p) {
  return error_message_of([&] { (void)open_safetensors(p); });
}

const char* kTwo =
    R"({"a":{"dtype":"F32","shape":[2],"data_offsets":[0,8]},"b":{"dtype":"I8","shape":[3],"data_offsets":[8,11]}})";

}  // namespace

TEST_CASE("format: fixtures validate and list without reading data", "[io][format]") {
  const auto exp = expected_json();
  for (const auto& [file, spec] : exp["files"].items()) {
    INFO(file);
    auto [map, h] = open_safetensors(fixture(file));
    REQUIRE(h.tensors.size() == spec["tensors"].size());
    for (const auto& t : h.tensors) {
      const auto& want = spec["tensors"][t.name];
      CHECK(dtype_name(t.dtype) == want["dtype"].get<std::string>());
      CHECK(t.shape == want["shape"].get<std::vector<int64_t>>());
      CHECK(t.nbytes() * 2 == want["hex"].get<std::string>().size());
    }
    if (spec["metadata"].is_null()) {
      CHECK_FALSE(h.has_metadata);
    } else {
      CHECK(h.metadata == spec["metadata"].get<std::map<std::string, std::string>>());
    }
    // the reference pads so that data starts 8-byte aligned
    CHECK(h.data_start() % 8 == 0);
  }
}

TEST_CASE("format: encode_header gives the reference's exact header bytes", "[io][format]") {
  const auto exp = expected_json();
  for (const auto& [file, spec] : exp["files"].items()) {
    INFO(file);
    const std::string ref = bytes_of(fixture(file));
    auto [map, h] = open_safetensors(fixture(file));
    std::vector<TensorSpec> specs;
    for (const auto& name : spec["order"]) {
      const auto& t = spec["tensors"][name.get<std::string>()];
      specs.push_back({name, *parse_dtype(t["dtype"].get<std::string>()), t["shape"].get<std::vector<int64_t>>()});
    }
    std::map<std::string, std::string> meta;
    if (!spec["metadata"].is_null()) meta = spec["metadata"].get<std::map<std::string, std::string>>();
    const EncodedHeader enc = encode_header(specs, meta, file);
    CHECK(enc.data_size == h.data_size);
    if (meta.size() > 1) {
      // The reference keeps metadata in a hash map: its key order is arbitrary.
      CHECK(enc.bytes.size() == h.data_start());
      continue;
    }
    CHECK(enc.bytes == ref.substr(0, h.data_start()));
  }
}

TEST_CASE("format: encode_index gives transformers' exact index file", "[io][format]") {
  const auto dir = fixture("sharded");
  const std::string ref = bytes_of(dir / kIndexFileName);
  const ShardIndex idx = parse_index(ref, "index");
  const auto exp = expected_json();
  CHECK(idx.total_size == exp["shard_plans"]["1KB"]["total_size"].get<uint64_t>());
  // written from an unsorted weight map: the encoder sorts
  auto wm = idx.weight_map;
  std::reverse(wm.begin(), wm.end());
  CHECK(encode_index(wm, *idx.total_size, exp["model"]["num_parameters"].get<uint64_t>()) == ref);
}

TEST_CASE("format: encode_index escapes as json.dumps(ensure_ascii=True)", "[io][format]") {
  const std::string s = encode_index({{"caf\xc3\xa9\"\\\n\x7f\xf0\x9f\x98\x80", "f"}}, 4, std::nullopt);
  CHECK(s == "{\n  \"metadata\": {\n    \"total_size\": 4\n  },\n  \"weight_map\": {\n"
             "    \"caf\\u00e9\\\"\\\\\\n\\u007f\\ud83d\\ude00\": \"f\"\n  }\n}\n");
}

TEST_CASE("format: parse_size follows huggingface_hub (decimal units)", "[io][format]") {
  CHECK(parse_size("5GB") == 5'000'000'000ull);
  CHECK(parse_size("500MB") == 500'000'000ull);
  CHECK(parse_size("1KB") == 1000);
  CHECK(parse_size("2TB") == 2'000'000'000'000ull);
  CHECK(parse_size("5gb") == 5'000'000'000ull);
  CHECK(parse_size(" 1.5 GB ") == 1'500'000'000ull);
  CHECK(parse_size("1.1GB") == 1'100'000'000ull);  // int(1.1 * 10**9) in Python
  CHECK(parse_size("0.0000015KB") == 0);           // truncated like int()
  CHECK(parse_size("123456") == 123456);           // a plain byte count
  CHECK(parse_size("1e2MB") == 100'000'000ull);
  for (const char* bad : {"", "GB", "5GiB", "5 G", "abc", "-5GB", "5..0GB", "1e400GB", "99999999999999999999"}) {
    INFO(bad);
    CHECK_THAT(error_message_of([&] { parse_size(bad); }), Contains("max_shard_size"));
  }
}

TEST_CASE("format: shard plans match huggingface_hub's split", "[io][format]") {
  const auto exp = expected_json();
  const auto& model = exp["model"];
  std::vector<std::string> order = model["order"];
  std::vector<uint64_t> sizes;
  for (const auto& n : order) sizes.push_back(model["tensors"][n]["hex"].get<std::string>().size() / 2);
  for (const auto& [size, want] : exp["shard_plans"].items()) {
    INFO(size);
    const ShardPlan plan = plan_shards(sizes, parse_size(size));
    CHECK(plan.total_size == want["total_size"].get<uint64_t>());
    std::map<std::string, std::vector<std::string>> got;
    for (size_t i = 0; i < plan.shards.size(); ++i)
      for (size_t t : plan.shards[i]) got[shard_file_name(i, plan.shards.size())].push_back(order[t]);
    CHECK(got == want["filename_to_tensors"].get<std::map<std::string, std::vector<std::string>>>());
  }
  // a tensor over the limit gets its own shard while the open one stays open
  const ShardPlan p = plan_shards({1, 10, 1, 3, 1}, 5);
  CHECK(p.shards == std::vector<std::vector<size_t>>{{1}, {0, 2, 3}, {4}});
  CHECK(plan_shards({1, 2, 3}, 0).shards.size() == 1);
  CHECK(plan_shards({}, 5).shards.empty());
}

TEST_CASE("format: shard file names", "[io][format]") {
  CHECK(shard_file_name(0, 1) == "model.safetensors");
  CHECK(shard_file_name(0, 3) == "model-00001-of-00003.safetensors");
  CHECK(shard_file_name(2, 3) == "model-00003-of-00003.safetensors");
  CHECK(is_shard_file_name("model-00001-of-00003.safetensors"));
  CHECK_FALSE(is_shard_file_name("model.safetensors"));
  CHECK_FALSE(is_shard_file_name("model-0001-of-00003.safetensors"));
  CHECK_FALSE(is_shard_file_name("model-00001-of-00003.safetensors.tmp"));
}

// ---- corrupt input: each error names the file and the tensor or key --------

TEST_CASE("corrupt: a good file built by the helper opens", "[io][corrupt]") {
  TempDir d;
  const auto p = make_file(d.path() / "ok.safetensors", kTwo, 11);
  auto [m, h] = open_safetensors(p);
  REQUIRE(h.tensors.size() == 2);
  CHECK(h.tensors[0].name == "a");
  CHECK(h.tensors[1].name == "b");
}

TEST_CASE("corrupt: truncated files", "[io][corrupt]") {
  TempDir d;
  const std::string good = bytes_of(fixture("mixed.safetensors"));
  const auto p = d.write("trunc.safetensors", good.substr(0, good.size() - 1));
  const auto msg = open_error(p);
  CHECK_THAT(msg, Contains(p.string()) && Contains("past the end of the file") && Contains("truncated"));
  // the last tensor in data order is named
  auto [m, h] = open_safetensors(fixture("mixed.safetensors"));
  CHECK_THAT(msg, Contains("`" + h.tensors.back().name + "`"));

  const auto tiny = d.write("tiny.safetensors", std::string("\x10\0\0", 3));
  CHECK_THAT(open_error(tiny), Contains(tiny.string()) && Contains("too small"));
  const auto empty = d.write("empty.safetensors", "");
  CHECK_THAT(open_error(empty), Contains(empty.string()) && Contains("too small"));
  const auto cut_header = d.write("cut.safetensors", good.substr(0, 40));
  CHECK_THAT(open_error(cut_header), Contains(cut_header.string()) && Contains("runs past the end"));
}

TEST_CASE("corrupt: header length", "[io][corrupt]") {
  TempDir d;
  std::string bytes(8, '\0');
  uint64_t n = 1000;
  std::memcpy(bytes.data(), &n, 8);
  bytes += "{}";
  const auto p = d.write("long.safetensors", bytes);
  CHECK_THAT(open_error(p), Contains(p.string()) && Contains("header length 1000 runs past the end"));
  n = kMaxHeaderSize + 1;
  std::memcpy(bytes.data(), &n, 8);
  const auto q = d.write("huge.safetensors", bytes);
  CHECK_THAT(open_error(q), Contains(q.string()) && Contains("exceeds the format's limit of 100000000"));
  n = UINT64_MAX;
  std::memcpy(bytes.data(), &n, 8);
  const auto r = d.write("max.safetensors", bytes);
  CHECK_THAT(open_error(r), Contains("exceeds"));
}

TEST_CASE("corrupt: header text", "[io][corrupt]") {
  TempDir d;
  struct Case {
    std::string header;
    std::string want;
  };
  const std::vector<Case> cases = {
      {R"({"a":)", "not valid JSON"},
      {R"({"a":{"dtype":"F32","shape":[0],"data_offsets":[0,0]}} x)", "unexpected characters"},
      {"[1,2]", "header is an array, expected a JSON object"},
      {"\"x\"", "header is a string, expected a JSON object"},
      {"", "not valid JSON"},
      {"\xef\xbb\xbf{}", "not valid JSON"},  // a BOM, as serde_json
      {"{\"a\xff\":1}", "not valid UTF-8"},
      {R"({"\ud800":1})", "surrogate"},
      {R"({"a":{"dtype":"F32","shape":[0],"data_offsets":[0,0]},"a":{"dtype":"F32","shape":[0],"data_offsets":[0,0]}})",
       "key `a` appears twice"},
      {R"({"a":{"dtype":"F32","shape":[0],"data_offsets":[0,0],"x":)" + std::string(200, '[') +
           std::string(200, ']') + "}}",
       "nesting deeper than 128"},
      {std::string(200, '[') + std::string(200, ']'), "nesting deeper than 128"},
      {"[1, {\"a\": 2}]", "header is an array, expected a JSON object"},
      {"nul", "not valid JSON"},
  };
  for (const auto& c : cases) {
    INFO(c.header);
    const auto p = make_file(d.path() / "h.safetensors", c.header, 0, /*pad=*/false);
    const auto msg = open_error(p);
    CHECK_THAT(msg, Contains(p.string()) && Contains(c.want));
  }
}

TEST_CASE("corrupt: tensor entries", "[io][corrupt]") {
  TempDir d;
  struct Case {
    std::string header;
    uint64_t data;
    std::string want;  // besides the file name
  };
  const std::vector<Case> cases = {
      {R"({"w":{"shape":[2],"data_offsets":[0,8]}})", 8, "tensor `w`: missing `dtype`"},
      {R"({"w":{"dtype":"F32","data_offsets":[0,8]}})", 8, "tensor `w`: missing `shape`"},
      {R"({"w":{"dtype":"F32","shape":[2]}})", 8, "tensor `w`: missing `data_offsets`"},
      {R"({"w":[1,2]})", 8, "tensor `w`: header entry is an array"},
      {R"({"w":{"dtype":3,"shape":[2],"data_offsets":[0,8]}})", 8, "tensor `w`: `dtype` is a number"},
      {R"({"w":{"dtype":"F128","shape":[2],"data_offsets":[0,8]}})", 8, "tensor `w`: unknown dtype `F128`"},
      {R"({"w":{"dtype":"f32","shape":[2],"data_offsets":[0,8]}})", 8, "tensor `w`: unknown dtype `f32`"},
      {R"({"w":{"dtype":"F32","shape":[-2],"data_offsets":[0,8]}})", 8, "tensor `w`: `shape`"},
      {R"({"w":{"dtype":"F32","shape":[2.0],"data_offsets":[0,8]}})", 8, "tensor `w`: `shape`"},
      {R"({"w":{"dtype":"F32","shape":2,"data_offsets":[0,8]}})", 8, "tensor `w`: `shape` is a number"},
      {R"({"w":{"dtype":"F32","shape":[2],"data_offsets":[0]}})", 8, "tensor `w`: `data_offsets` must be"},
      {R"({"w":{"dtype":"F32","shape":[2],"data_offsets":[0,8,9]}})", 8, "tensor `w`: `data_offsets` must be"},
      {R"({"w":{"dtype":"F32","shape":[2],"data_offsets":[0,-8]}})", 8, "tensor `w`: `data_offsets` must be"},
      // offsets
      {R"({"a":{"dtype":"F32","shape":[1],"data_offsets":[0,4]},"b":{"dtype":"F32","shape":[1],"data_offsets":[8,12]}})",
       12, "tensor `b`: data_offsets [8, 12] leave a gap of 4 bytes after tensor `a`"},
      {R"({"a":{"dtype":"F32","shape":[1],"data_offsets":[4,8]}})", 8,
       "tensor `a`: data_offsets [4, 8] leave a gap of 4 bytes after the start of the data"},
      {R"({"a":{"dtype":"F32","shape":[2],"data_offsets":[0,8]},"b":{"dtype":"F32","shape":[2],"data_offsets":[4,12]}})",
       12, "tensor `b`: data_offsets [4, 12] overlap tensor `a`, which ends at 8"},
      {R"({"a":{"dtype":"F32","shape":[2],"data_offsets":[0,8]},"b":{"dtype":"F32","shape":[2],"data_offsets":[0,8]}})",
       8, "overlap tensor"},
      {R"({"a":{"dtype":"F32","shape":[0],"data_offsets":[8,0]}})", 8, "tensor `a`: data_offsets [8, 0] end before"},
      {R"({"a":{"dtype":"F32","shape":[2],"data_offsets":[0,8]}})", 4,
       "tensor `a` ends at byte 8 of the data section, past the end of the file (4 data bytes"},
      {R"({"a":{"dtype":"F32","shape":[2],"data_offsets":[0,8]}})", 12, "12 data bytes after the header but its tensors cover only 8"},
      // sizes
      {R"({"a":{"dtype":"F32","shape":[3],"data_offsets":[0,8]}})", 8,
       "tensor `a`: data_offsets [0, 8] hold 8 bytes, but dtype F32 with shape [3] needs 12"},
      {R"({"a":{"dtype":"BF16","shape":[2,2],"data_offsets":[0,4]}})", 4, "needs 8"},
      {R"({"a":{"dtype":"F32","shape":[4294967296,4294967296],"data_offsets":[0,8]}})", 8, "tensor `a`: the size of dtype F32 with this shape overflows"},
      {R"({"a":{"dtype":"U8","shape":[18446744073709551615],"data_offsets":[0,0]}})", 0, "overflows"},
      {R"({"a":{"dtype":"F32","shape":[0,9223372036854775808],"data_offsets":[0,0]}})", 0,
       "tensor `a`: dimension 9223372036854775808 is too large"},
      {R"({"a":{"dtype":"F4","shape":[3],"data_offsets":[0,1]}})", 1, "tensor `a`: dtype F4 with this shape does not fill a whole number"},
      // metadata
      {R"({"__metadata__":{"format":1},"a":{"dtype":"F32","shape":[0],"data_offsets":[0,0]}})", 0,
       "`__metadata__`: value of `format` is a number, expected a string"},
      {R"({"__metadata__":[],"a":{"dtype":"F32","shape":[0],"data_offsets":[0,0]}})", 0, "`__metadata__` is an array"},
      // known to the format, not to trlx
      {R"({"w":{"dtype":"F8_E4M3","shape":[2],"data_offsets":[0,2]}})", 2,
       "tensor `w`: unsupported dtype F8_E4M3 (trlx reads F32, F16, BF16, F64, I64, I32, I16, I8, U8, BOOL)"},
      {R"({"w":{"dtype":"U32","shape":[1],"data_offsets":[0,4]}})", 4, "tensor `w`: unsupported dtype U32"},
  };
  for (const auto& c : cases) {
    INFO(c.header);
    const auto p = make_file(d.path() / "t.safetensors", c.header, c.data);
    const auto msg = open_error(p);
    CHECK_THAT(msg, Contains(p.string()) && Contains(c.want));
  }
}

TEST_CASE("corrupt: what the reference accepts, trlx accepts", "[io][corrupt]") {
  TempDir d;
  // entries in any order, unknown fields, metadata null, "-0", no padding, empty tensors sharing an offset
  const std::string header =
      R"({"b":{"dtype":"I8","shape":[3],"data_offsets":[8,11],"extra":{"x":[1]}},"__metadata__":null,)"
      R"("a":{"dtype":"F32","shape":[2],"data_offsets":[-0,8]},"e":{"dtype":"F16","shape":[0,5],"data_offsets":[11,11]},)"
      R"("f":{"dtype":"F16","shape":[5,0],"data_offsets":[11,11]}})";
  const auto p = make_file(d.path() / "ok.safetensors", header, 11, false);
  auto [m, h] = open_safetensors(p);
  REQUIRE(h.tensors.size() == 4);
  CHECK(h.tensors[0].name == "a");
  CHECK(h.tensors[1].name == "b");
  CHECK_FALSE(h.has_metadata);
  // an empty header
  const auto q = make_file(d.path() / "none.safetensors", "{}", 0);
  CHECK(open_safetensors(q).second.tensors.empty());
}

TEST_CASE("corrupt: not a file", "[io][corrupt]") {
  TempDir d;
  CHECK_THAT(open_error(d.path() / "absent.safetensors"), Contains("absent.safetensors") && Contains("no such file"));
  CHECK_THAT(open_error(d.path()), Contains("not a regular file"));
}

TEST_CASE("corrupt: index files", "[io][corrupt]") {
  struct Case {
    std::string text;
    std::string want;
  };
  const std::vector<Case> cases = {
      {"[]", "the index is an array"},
      {R"({"metadata":{}})", "missing `weight_map`"},
      {R"({"weight_map":[]})", "`weight_map` is an array"},
      {R"({"weight_map":{"a":1}})", "tensor `a` maps to a number"},
      {R"({"weight_map":{"a":"x.safetensors","a":"y.safetensors"}})", "key `a` appears twice"},
      {R"({"weight_map":{"a":"../x.safetensors"}})", "tensor `a` maps to `../x.safetensors`, which is not a file inside"},
      {R"({"weight_map":{"a":"/etc/passwd"}})", "not a file inside"},
      {R"({"weight_map":{"a":""}})", "not a file inside"},
      {R"({"weight_map":{"a":"x"})", "not valid JSON"},
  };
  for (const auto& c : cases) {
    INFO(c.text);
    CHECK_THAT(error_message_of([&] { parse_index(c.text, "dir/model.safetensors.index.json"); }),
               Contains("dir/model.safetensors.index.json") && Contains(c.want));
  }
}

TEST_CASE("atomic write: replace, abandon, no temporaries left", "[io][atomic]") {
  TempDir d;
  const auto p = d.path() / "f.txt";
  write_file_atomic(p, "one");
  write_file_atomic(p, "two");
  CHECK(bytes_of(p) == "two");
  {
    AtomicFile f(p);
    f.write("three, never committed");
    CHECK(std::filesystem::exists(f.temp_path()));
    CHECK(f.temp_path().parent_path() == d.path());
    CHECK(f.temp_path().filename().string().rfind(".f.txt.tmp-", 0) == 0);
  }
  CHECK(bytes_of(p) == "two");
  {
    AtomicFile f(p);
    f.write(std::string(3 << 20, 'x'));  // past the write buffer
    f.finish();
    CHECK(bytes_of(p) == "two");  // finished, not yet renamed
    f.commit();
  }
  CHECK(bytes_of(p).size() == (3u << 20));
  size_t files = 0;
  for ([[maybe_unused]] const auto& e : std::filesystem::directory_iterator(d.path())) ++files;
  CHECK(files == 1);
  CHECK_THROWS_AS(write_file_atomic(d.path() / "missing-dir" / "x", "y"), trlx::Error);
}

TEST_CASE("swap_in_directory: new, replaced, and a failed rename puts the old one back", "[io][atomic]") {
  namespace fs = std::filesystem;
  TempDir d;
  const auto target = d.path() / "model";
  auto fresh = [&](const std::string& tag) {
    const auto tmp = d.path() / (".model.tmp-" + tag);
    fs::create_directories(tmp);
    std::ofstream(tmp / "weights") << tag;
    return tmp;
  };
  swap_in_directory(fresh("a"), target);
  CHECK(bytes_of(target / "weights") == "a");
  swap_in_directory(fresh("b"), target);
  CHECK(bytes_of(target / "weights") == "b");
  // Only the new directory is left: the temporary and the old one are gone.
  size_t entries = 0;
  for ([[maybe_unused]] const auto& e : fs::directory_iterator(d.path())) ++entries;
  CHECK(entries == 1);
  // A temporary that is not there: the rename fails, the old model keeps its name.
  CHECK_THROWS(swap_in_directory(d.path() / ".model.tmp-missing", target));
  CHECK(bytes_of(target / "weights") == "b");
  entries = 0;
  for ([[maybe_unused]] const auto& e : fs::directory_iterator(d.path())) ++entries;
  CHECK(entries == 1);
}

TEST_CASE("a mapped file gives back the pages of a range it is asked to release, and nothing else", "[io][mmap]") {
  // Resident memory from /proc (this process's whole RSS).
  auto resident_mib = [] {
    std::ifstream statm("/proc/self/statm");
    long pages = 0, resident = 0;
    statm >> pages >> resident;
    return static_cast<double>(resident) * static_cast<double>(::sysconf(_SC_PAGESIZE)) / (1 << 20);
  };
  TempDir tmp;
  const auto file = tmp.path() / "big.bin";
  {
    std::ofstream out(file, std::ios::binary);
    std::vector<char> chunk(1 << 20, 7);
    for (int i = 0; i < 64; ++i) out.write(chunk.data(), static_cast<std::streamsize>(chunk.size()));
  }
  auto m = MappedFile::open(file);
  long sum = 0;
  for (size_t i = 0; i < m->size(); i += 4096) sum += m->data()[i];  // every page resident
  CHECK(sum == 7 * static_cast<long>(m->size() / 4096));
  const double before = resident_mib();
  CHECK(MappedFile::release(m->data() + 100, m->size() - 200));
  const double after = resident_mib();
  INFO("resident " << before << " MiB before, " << after << " MiB after");
  CHECK(before - after > 48);
  // The bytes read as the file's again.
  CHECK(m->data()[5 << 20] == 7);
  // Memory that is not a mapping, or reaches past one, is left alone.
  std::vector<char> heap(1 << 20, 1);
  CHECK_FALSE(MappedFile::release(heap.data(), heap.size()));
  CHECK(heap[4096] == 1);
  CHECK_FALSE(MappedFile::release(m->data(), m->size() + 4096));
}
