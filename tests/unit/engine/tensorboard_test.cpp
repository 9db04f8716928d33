// TensorBoard event files against TensorBoard's own writer: the fixture
// (scripts/fixtures/tensorboard_fixtures.py) was framed by TensorBoard's
// RecordWriter from Events built as transformers builds them; trlx must
// write the same bytes for the same records.
#include <catch2/catch.hpp>

#include <cstring>
#include <filesystem>
#include <fstream>
#include <sstream>

#include <nlohmann/json.hpp>

#include "io/tensorboard.hpp"
#include "support.hpp"

using namespace trlx;
namespace fs = std::filesystem;

namespace {

std::string read_all(const fs::path& p) {
  std::ifstream in(p, std::ios::binary);
  std::stringstream ss;
  ss << in.rdbuf();
  return ss.str();
}

// Splits a TFRecord stream into payloads, checking both CRCs of each record.
std::vector<std::string> records(const std::string& bytes) {
  std::vector<std::string> out;
  size_t i = 0;
  while (i < bytes.size()) {
    REQUIRE(i + 12 <= bytes.size());
    uint64_t len;
    uint32_t len_crc, data_crc;
    std::memcpy(&len, bytes.data() + i, 8);
    std::memcpy(&len_crc, bytes.data() + i + 8, 4);
    CHECK(len_crc == io::masked_crc32c(bytes.substr(i, 8)));
    REQUIRE(i + 12 + len + 4 <= bytes.size());
    out.push_back(bytes.substr(i + 12, len));
    std::memcpy(&data_crc, bytes.data() + i + 12 + len, 4);
    CHECK(data_crc == io::masked_crc32c(out.back()));
    i += 12 + len + 4;
  }
  return out;
}

}  // namespace

TEST_CASE("CRC-32C: the standard check value", "[tensorboard]") {
  // The check value of CRC-32C over "123456789" (RFC 3720, B.4).
  CHECK(io::crc32c("123456789") == 0xE3069283u);
  CHECK(io::crc32c("") == 0u);
}

TEST_CASE("event records are byte for byte those TensorBoard's writer makes", "[tensorboard][golden]") {
  const fs::path dir = test::data_dir() / "tensorboard";
  std::ifstream in(dir / "records.json");
  REQUIRE(in);
  const auto fixture = nlohmann::json::parse(in);
  std::string mine = io::tfrecord(io::event_file_version(fixture["file_version_wall_time"].get<double>()));
  for (const auto& s : fixture["scalars"])
    mine += io::tfrecord(io::event_scalar(s["wall_time"].get<double>(), s["step"].get<int64_t>(),
                                          s["tag"].get<std::string>(), static_cast<float>(s["value"].get<double>())));
  const std::string want = read_all(dir / "events.out.tfevents.fixture");
  REQUIRE(want.size() > 100);
  const auto a = records(mine), b = records(want);
  REQUIRE(a.size() == b.size());
  for (size_t i = 0; i < a.size(); ++i) {
    INFO("record " << i);
    CHECK(a[i] == b[i]);
  }
  CHECK(mine == want);
}

TEST_CASE("EventWriter names its file as TensorBoard does and starts with the file version", "[tensorboard]") {
  const fs::path dir = fs::temp_directory_path() / "trlx_tensorboard_test";
  fs::remove_all(dir);
  fs::path path;
  {
    io::EventWriter w(dir / "runs" / "x");
    w.scalar("train/loss", 1.25, 3);
    w.flush();
    path = w.path();
  }
  CHECK(path.filename().string().rfind("events.out.tfevents.", 0) == 0);
  const auto recs = records(read_all(path));
  REQUIRE(recs.size() == 2);
  CHECK(recs[0].find("brain.Event:2") != std::string::npos);
  CHECK(recs[1].find("train/loss") != std::string::npos);
  const auto d = io::default_tensorboard_dir("out");
  CHECK(d.parent_path() == fs::path("out") / "runs");
  fs::remove_all(dir);
}
