// Reading and writing tensors: values against the reference's fixtures,
// byte-identical writes, round trips, sharded checkpoints as transformers
// writes them, views and alignment, crash-safe replacement.
#include "catch_torch.hpp"

#include <nlohmann/json.hpp>

#include <set>

#include "core/error.hpp"
#include "helpers.hpp"
#include "io/safetensors.hpp"

using namespace trlx::io;
using trlx::io::test::bytes_of;
using trlx::io::test::expected_json;
using trlx::io::test::fixture;
using trlx::test::error_message_of;
using trlx::io::test::make_file;
using trlx::io::test::TempDir;
using Catch::Matchers::Contains;
namespace fs = std::filesystem;

namespace {

std::string hex_of(const at::Tensor& t) {
  static const char* digits = "0123456789abcdef";
  const auto c = t.contiguous();
  const auto* p = static_cast<const uint8_t*>(c.data_ptr());
  std::string s;
  const size_t n = static_cast<size_t>(c.numel()) * c.element_size();
  for (size_t i = 0; i < n; ++i) {
    s += digits[p[i] >> 4];
    s += digits[p[i] & 15];
  }
  return s;
}

at::Tensor from_spec(const nlohmann::json& spec) {
  const auto dtype = to_torch_dtype(*parse_dtype(spec["dtype"].get<std::string>()));
  const auto shape = spec["shape"].get<std::vector<int64_t>>();
  const std::string hex = spec["hex"];
  auto t = torch::empty(shape, torch::TensorOptions().dtype(dtype));
  auto* p = static_cast<uint8_t*>(t.data_ptr());
  for (size_t i = 0; i < hex.size() / 2; ++i) p[i] = static_cast<uint8_t>(std::stoi(hex.substr(2 * i, 2), nullptr, 16));
  return t;
}

NamedTensors tensors_of(const nlohmann::json& spec) {
  NamedTensors out;
  for (const auto& name : spec["order"]) out.emplace_back(name, from_spec(spec["tensors"][name.get<std::string>()]));
  return out;
}

std::set<std::string> listing(const fs::path& dir) {
  std::set<std::string> s;
  for (const auto& e : fs::directory_iterator(dir)) s.insert(e.path().filename().string());
  return s;
}

bool same_bits(const at::Tensor& a, const at::Tensor& b) {
  return a.scalar_type() == b.scalar_type() && a.sizes() == b.sizes() && hex_of(a) == hex_of(b);
}

}  // namespace

TEST_CASE("read: every fixture value, exactly", "[io][read]") {
  const auto exp = expected_json();
  for (const auto& [file, spec] : exp["files"].items()) {
    const auto f = SafetensorsFile::open(fixture(file));
    REQUIRE(f.tensors().size() == spec["tensors"].size());
    for (const auto& [name, want] : spec["tensors"].items()) {
      INFO(file << " " << name);
      REQUIRE(f.contains(name));
      for (bool copy : {false, true}) {
        const at::Tensor t = f.get(name, copy);
        CHECK(t.device().is_cpu());
        CHECK(t.scalar_type() == to_torch_dtype(*parse_dtype(want["dtype"].get<std::string>())));
        CHECK(t.sizes().vec() == want["shape"].get<std::vector<int64_t>>());
        CHECK(hex_of(t) == want["hex"].get<std::string>());
      }
    }
  }
  const auto f = SafetensorsFile::open(fixture("meta.safetensors"));
  CHECK(f.metadata().at("note") == "h\xc3\xa9llo \"q\"\n");
  CHECK_THAT(error_message_of([&] { f.get("nope"); }), Contains("meta.safetensors") && Contains("no tensor `nope`"));
}

TEST_CASE("read: values as numbers", "[io][read]") {
  const auto f32 = SafetensorsFile::open(fixture("dtype_F32.safetensors")).get("x");
  CHECK(f32[0][2].item<float>() == 1.0f);
  CHECK(f32[0][3].item<float>() == -1.5f);
  CHECK(std::isinf(f32[2][0].item<float>()));
  CHECK(std::isnan(f32[2][2].item<float>()));
  const auto bf = SafetensorsFile::open(fixture("dtype_BF16.safetensors")).get("x");
  CHECK(bf[1][0].item<float>() == 3.140625f);
  const auto b = SafetensorsFile::open(fixture("dtype_BOOL.safetensors")).get("x");
  CHECK(b.equal(torch::tensor({true, false, true, false, false, true}).reshape({2, 3})));
  const auto i64 = SafetensorsFile::open(fixture("dtype_I64.safetensors")).get("x");
  CHECK(i64[1][0].item<int64_t>() == INT64_MAX);
  CHECK(i64[1][1].item<int64_t>() == INT64_MIN);
  const auto sp = SafetensorsFile::open(fixture("special.safetensors"));
  CHECK(sp.get("scalar").dim() == 0);
  CHECK(sp.get("scalar").item<float>() == 2.5f);
  CHECK(sp.get("scalar_i64").item<int64_t>() == -7);
  CHECK(sp.get("empty").sizes().vec() == std::vector<int64_t>{0, 3});
  CHECK(sp.get("caf\xc3\xa9.\xe6\x97\xa5\xe6\x9c\xac").sum().item<float>() == 2.0f);
}

TEST_CASE("read: views share the mapping and never write the file", "[io][read]") {
  TempDir d;
  const auto src = fixture("dtype_F32.safetensors");
  const auto p = d.path() / "f.safetensors";
  fs::copy_file(src, p);
  const std::string before = bytes_of(p);
  at::Tensor view;
  {
    const auto f = SafetensorsFile::open(p);
    view = f.get("x");
    const at::Tensor again = f.get("x");
    CHECK(view.data_ptr() == again.data_ptr());  // zero copy
    const at::Tensor copy = f.get("x", true);
    CHECK(copy.data_ptr() != view.data_ptr());
  }
  // the file object is gone; the view keeps the mapping alive
  CHECK(view[0][2].item<float>() == 1.0f);
  view.fill_(7.0f);  // copy-on-write: memory only
  CHECK(view.sum().item<float>() == 84.0f);
  CHECK(bytes_of(p) == before);
  CHECK(SafetensorsFile::open(p).get("x")[0][2].item<float>() == 1.0f);
}

TEST_CASE("read: data not aligned for its dtype is copied", "[io][read]") {
  TempDir d;
  // An unpadded header: 8 + 55 bytes, so the data starts at an odd offset.
  const std::string header = R"({"x":{"dtype":"F32","shape":[2],"data_offsets":[0,8]}} )";
  REQUIRE((8 + header.size()) % 4 != 0);
  std::string bytes(8, '\0');
  const uint64_t n = header.size();
  std::memcpy(bytes.data(), &n, 8);
  bytes += header;
  const float vals[2] = {1.25f, -2.5f};
  bytes.append(reinterpret_cast<const char*>(vals), 8);
  const auto p = d.write("odd.safetensors", bytes);
  const auto f = SafetensorsFile::open(p);
  const at::Tensor t = f.get("x");
  CHECK(reinterpret_cast<uintptr_t>(t.data_ptr()) % 4 == 0);
  CHECK(t[0].item<float>() == 1.25f);
  CHECK(t[1].item<float>() == -2.5f);
}

TEST_CASE("write: byte-identical to safetensors.torch.save_file", "[io][write]") {
  TempDir d;
  const auto exp = expected_json();
  for (const auto& [file, spec] : exp["files"].items()) {
    INFO(file);
    std::map<std::string, std::string> meta;
    if (!spec["metadata"].is_null()) meta = spec["metadata"].get<std::map<std::string, std::string>>();
    const auto out = d.path() / file;
    save_safetensors(out, tensors_of(spec), meta);
    const std::string ref = bytes_of(fixture(file));
    const std::string got = bytes_of(out);
    if (meta.size() > 1) {
      // The reference orders several metadata keys arbitrarily (a hash map);
      // compare everything else.
      const auto a = SafetensorsFile::open(out);
      const auto b = SafetensorsFile::open(fixture(file));
      CHECK(a.metadata() == b.metadata());
      CHECK(got.size() == ref.size());
      const size_t data = got.size() - a.tensors().back().end;  // where the data section starts
      CHECK(got.substr(data) == ref.substr(data));
      continue;
    }
    CHECK(got.size() == ref.size());
    CHECK(got == ref);
  }
}

TEST_CASE("write: sharded checkpoint byte-identical to transformers' save_pretrained", "[io][write]") {
  TempDir d;
  const auto exp = expected_json();
  const auto& model = exp["model"];
  const NamedTensors tensors = tensors_of(model);
  const auto ref = fixture("sharded");
  const auto out = d.path() / "sharded";
  // total_parameters defaults to the element count, which is num_parameters() here
  save_checkpoint(out, tensors, parse_size(model["max_shard_size"].get<std::string>()));
  REQUIRE(listing(out) == listing(ref));
  for (const auto& name : listing(ref)) {
    INFO(name);
    CHECK(bytes_of(out / name) == bytes_of(ref / name));
  }
  // one file when the limit is 0 or large enough
  const auto single = d.path() / "single";
  save_checkpoint(single, tensors);
  REQUIRE(listing(single) == listing(fixture("single")));
  CHECK(bytes_of(single / "model.safetensors") == bytes_of(fixture("single") / "model.safetensors"));
  save_checkpoint(single, tensors, parse_size("100MB"));
  CHECK(bytes_of(single / "model.safetensors") == bytes_of(fixture("single") / "model.safetensors"));
}

TEST_CASE("read: sharded and single checkpoints from transformers", "[io][read]") {
  const auto exp = expected_json();
  const auto& model = exp["model"];
  for (const char* dir : {"sharded", "single"}) {
    INFO(dir);
    const auto c = Checkpoint::open_dir(fixture(dir));
    CHECK(c.sharded() == (std::string(dir) == "sharded"));
    std::vector<std::string> want = model["order"];
    std::sort(want.begin(), want.end());
    CHECK(c.names() == want);
    for (const auto& [name, spec] : model["tensors"].items()) {
      const at::Tensor t = c.get(name);
      CHECK(hex_of(t) == spec["hex"].get<std::string>());
      CHECK(c.info(name).shape == spec["shape"].get<std::vector<int64_t>>());
    }
  }
  const auto c = Checkpoint::open(fixture("sharded") / "model.safetensors.index.json");
  CHECK(c.files().size() == 4);
  CHECK(c.file_of("lm_head.weight").filename() == "model-00004-of-00004.safetensors");
  CHECK_THAT(error_message_of([&] { c.get("nope"); }), Contains("model.safetensors.index.json") && Contains("`nope`"));
  CHECK(Checkpoint::open(fixture("single") / "model.safetensors").names().size() == model["order"].size());
}

TEST_CASE("read: broken sharded checkpoints", "[io][read][corrupt]") {
  TempDir d;
  const auto dir = d.path() / "ck";
  fs::copy(fixture("sharded"), dir);
  const auto index = dir / "model.safetensors.index.json";
  const std::string good = bytes_of(index);
  auto write_index = [&](std::string text) { d.write("ck/model.safetensors.index.json", text); };
  auto replace = [&](std::string s, const std::string& from, const std::string& to) {
    const auto at = s.find(from);
    REQUIRE(at != std::string::npos);
    return s.replace(at, from.size(), to);
  };

  // a shard that is not there
  write_index(replace(good, "\"lm_head.weight\": \"model-00004-of-00004.safetensors\"",
                      "\"lm_head.weight\": \"model-00009-of-00009.safetensors\""));
  CHECK_THAT(error_message_of([&] { Checkpoint::open_dir(dir); }),
             Contains(index.string()) && Contains("model-00009-of-00009.safetensors") &&
                 Contains("tensor `lm_head.weight`") && Contains("does not exist"));
  // a tensor mapped to a shard that does not hold it
  write_index(replace(good, "\"lm_head.weight\": \"model-00004-of-00004.safetensors\"",
                      "\"lm_head.weight\": \"model-00001-of-00004.safetensors\""));
  CHECK_THAT(error_message_of([&] { Checkpoint::open_dir(dir); }),
             Contains(index.string()) && Contains("tensor `lm_head.weight` is mapped to `model-00001-of-00004.safetensors`"));
  // listed twice
  write_index(replace(good, "\"lm_head.weight\": \"model-00004-of-00004.safetensors\"",
                      "\"lm_head.weight\": \"model-00004-of-00004.safetensors\",\n    \"lm_head.weight\": "
                      "\"model-00004-of-00004.safetensors\""));
  CHECK_THAT(error_message_of([&] { Checkpoint::open_dir(dir); }),
             Contains(index.string()) && Contains("key `lm_head.weight` appears twice"));
  // a corrupt shard is reported with its own path
  write_index(good);
  const auto shard = dir / "model-00002-of-00004.safetensors";
  const std::string s = bytes_of(shard);
  d.write("ck/model-00002-of-00004.safetensors", s.substr(0, s.size() - 3));
  CHECK_THAT(error_message_of([&] { Checkpoint::open_dir(dir); }),
             Contains(shard.string()) && Contains("past the end of the file"));
  // no entry point
  fs::remove(index);
  CHECK_THAT(error_message_of([&] { Checkpoint::open_dir(dir); }), Contains(dir.string()) && Contains("no model.safetensors"));
}

TEST_CASE("write: round trip of every dtype, any layout", "[io][write]") {
  TempDir d;
  torch::manual_seed(3);
  NamedTensors ts;
  ts.emplace_back("f32", torch::randn({3, 5}));
  ts.emplace_back("f16", torch::randn({4}).to(torch::kFloat16));
  ts.emplace_back("bf16", torch::randn({2, 2, 2}).to(torch::kBFloat16));
  ts.emplace_back("f64", torch::randn({2}, torch::kFloat64));
  ts.emplace_back("i64", torch::randint(-1000, 1000, {7}, torch::kInt64));
  ts.emplace_back("i32", torch::randint(-1000, 1000, {3, 1}, torch::kInt32));
  ts.emplace_back("i16", torch::randint(-1000, 1000, {5}, torch::kInt16));
  ts.emplace_back("i8", torch::randint(-100, 100, {9}, torch::kInt8));
  ts.emplace_back("u8", torch::randint(0, 255, {1}, torch::kUInt8));
  ts.emplace_back("bool", torch::rand({3, 3}) > 0.5);
  ts.emplace_back("scalar", torch::tensor(3.5));
  ts.emplace_back("empty", torch::empty({0, 4}));
  ts.emplace_back("transposed", torch::arange(12, torch::kFloat32).reshape({3, 4}).t());
  ts.emplace_back("strided", torch::arange(20, torch::kInt64).slice(0, 1, 20, 3));
  ts.emplace_back("expanded", torch::tensor({1.0f, 2.0f}).expand({3, 2}));
  const auto p = d.path() / "rt.safetensors";
  save_safetensors(p, ts);
  const auto f = SafetensorsFile::open(p);
  CHECK(f.metadata() == std::map<std::string, std::string>{{"format", "pt"}});
  REQUIRE(f.tensors().size() == ts.size());
  for (const auto& [name, t] : ts) {
    INFO(name);
    CHECK(same_bits(f.get(name), t));
  }
  // a file trlx writes loads into a dir checkpoint, sharded at any size
  for (uint64_t limit : {0ull, 1ull, 40ull, 100ull, 100000ull}) {
    INFO(limit);
    const auto dir = d.path() / ("ck" + std::to_string(limit));
    save_checkpoint(dir, ts, limit);
    const auto c = Checkpoint::open_dir(dir);
    CHECK(c.names().size() == ts.size());
    for (const auto& [name, t] : ts) CHECK(same_bits(c.get(name), t));
  }
}

TEST_CASE("write: replacing files is atomic and leaves no temporaries", "[io][write]") {
  TempDir d;
  const auto p = d.path() / "w.safetensors";
  save_safetensors(p, {{"x", torch::ones({4})}});
  const auto old_file = SafetensorsFile::open(p);
  const at::Tensor old_view = old_file.get("x");
  save_safetensors(p, {{"x", torch::zeros({4})}});
  // the old mapping still reads the old (unlinked) file
  CHECK(old_view.sum().item<float>() == 4.0f);
  CHECK(SafetensorsFile::open(p).get("x").sum().item<float>() == 0.0f);
  CHECK(listing(d.path()) == std::set<std::string>{"w.safetensors"});

  // a failing save leaves the existing file as it was and removes its temporary
  const std::string before = bytes_of(p);
  CHECK_THAT(error_message_of([&] { save_safetensors(p, {{"a", torch::ones({1})}, {"a", torch::ones({1})}}); }),
             Contains("tensor `a` is given twice"));
  CHECK_THAT(error_message_of([&] { save_safetensors(p, {{"c", torch::ones({1}, torch::kComplexFloat)}}); }),
             Contains("tensor `c`") && Contains("cannot be saved"));
  CHECK_THAT(error_message_of([&] { save_safetensors(p, {{"__metadata__", torch::ones({1})}}); }),
             Contains("`__metadata__` cannot be a tensor name"));
  CHECK(bytes_of(p) == before);
  CHECK(listing(d.path()) == std::set<std::string>{"w.safetensors"});
}

TEST_CASE("write: re-saving a checkpoint in another form removes the stale one", "[io][write]") {
  TempDir d;
  const auto dir = d.path() / "ck";
  NamedTensors ts;
  for (int i = 0; i < 6; ++i) {
    std::string name = "t";  // (GCC 12 warns falsely on "t" + std::string)
    name += std::to_string(i);
    ts.emplace_back(name, torch::full({10}, float(i)));
  }
  save_checkpoint(dir, ts, 80);  // 40 bytes each, two per shard
  CHECK(listing(dir) == std::set<std::string>{"model-00001-of-00003.safetensors", "model-00002-of-00003.safetensors",
                                              "model-00003-of-00003.safetensors", "model.safetensors.index.json"});
  save_checkpoint(dir, ts, 120);
  CHECK(listing(dir) == std::set<std::string>{"model-00001-of-00002.safetensors", "model-00002-of-00002.safetensors",
                                              "model.safetensors.index.json"});
  CHECK(Checkpoint::open_dir(dir).get("t5").sum().item<float>() == 50.0f);
  save_checkpoint(dir, ts);
  CHECK(listing(dir) == std::set<std::string>{"model.safetensors"});
  save_checkpoint(dir, ts, 80);
  CHECK(listing(dir).count("model.safetensors") == 0);
  const auto c = Checkpoint::open_dir(dir);
  CHECK(c.sharded());
  CHECK(c.get("t3").sum().item<float>() == 30.0f);
  // other files in the directory are left alone
  d.write("ck/config.json", "{}");
  save_checkpoint(dir, ts);
  CHECK(listing(dir) == std::set<std::string>{"config.json", "model.safetensors"});
}
