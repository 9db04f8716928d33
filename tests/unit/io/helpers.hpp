#pragma once
// Helpers for the io tests: fixtures, temporary directories, hand-made files.
#include <cstdint>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <functional>
#include <random>
#include <sstream>
#include <string>

#include <nlohmann/json.hpp>

#include "core/error.hpp"
#include "support.hpp"

namespace trlx::io::test {

inline std::filesystem::path fixture(const std::string& name) {
  return trlx::test::data_dir() / "safetensors" / name;
}

inline std::string bytes_of(const std::filesystem::path& p) {
  std::ifstream in(p, std::ios::binary);
  if (!in) throw std::runtime_error("cannot open " + p.string());
  std::ostringstream ss;
  ss << in.rdbuf();
  return ss.str();
}

inline nlohmann::json expected_json() { return nlohmann::json::parse(bytes_of(fixture("expected.json"))); }

class TempDir {
 public:
  TempDir() {
    std::random_device rd;
    path_ = std::filesystem::temp_directory_path() / ("trlx-io-test-" + std::to_string(rd()) + std::to_string(rd()));
    std::filesystem::create_directories(path_);
  }
  ~TempDir() {
    std::error_code ec;
    std::filesystem::remove_all(path_, ec);
  }
  const std::filesystem::path& path() const { return path_; }
  std::filesystem::path write(const std::string& name, const std::string& content) const {
    const auto p = path_ / name;
    std::ofstream out(p, std::ios::binary | std::ios::trunc);
    out << content;
    return p;
  }

 private:
  std::filesystem::path path_;
};

// A file with the given header text (padded with spaces to a multiple of 8
// unless `pad` is false) followed by `data` zero bytes.
inline std::filesystem::path make_file(const std::filesystem::path& p, std::string header, uint64_t data,
                                       bool pad = true) {
  if (pad) header.resize((header.size() + 7) / 8 * 8, ' ');
  std::string bytes(8, '\0');
  const uint64_t n = header.size();
  std::memcpy(bytes.data(), &n, 8);
  bytes += header;
  bytes.append(data, '\0');
  std::ofstream out(p, std::ios::binary | std::ios::trunc);
  out << bytes;
  return p;
}

}  // namespace trlx::io::test
