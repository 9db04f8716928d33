#pragma once
// Temporary files and error capture for the dataset reader tests.
#include <atomic>
#include <filesystem>
#include <fstream>
#include <string>
#include <unistd.h>

#include <catch2/catch.hpp>

#include "core/error.hpp"
#include "support.hpp"

namespace trlx::data::test {

// A fresh directory under the system temp dir, removed with the object.
class TempDir {
 public:
  TempDir() {
    static std::atomic<int> counter{0};
    path_ = std::filesystem::temp_directory_path() /
            ("trlx_data_test_" + std::to_string(::getpid()) + "_" + std::to_string(counter++));
    std::filesystem::remove_all(path_);
    std::filesystem::create_directories(path_);
  }
  ~TempDir() {
    std::error_code ec;
    std::filesystem::remove_all(path_, ec);
  }
  TempDir(const TempDir&) = delete;
  TempDir& operator=(const TempDir&) = delete;

  const std::filesystem::path& path() const { return path_; }

  // Writes `content` (bytes as given) to a path relative to the directory.
  std::filesystem::path write(const std::string& rel, const std::string& content) const {
    const auto p = path_ / rel;
    std::filesystem::create_directories(p.parent_path());
    std::ofstream out(p, std::ios::binary);
    out << content;
    return p;
  }

 private:
  std::filesystem::path path_;
};

// The message of the InputError `f` throws; fails the test if it throws none.
template <typename F>
std::string input_error(F&& f) {
  try {
    f();
  } catch (const InputError& e) {
    return e.what();
  }
  FAIL("expected an InputError, none was thrown");
  return "";
}

inline std::filesystem::path golden(const std::string& name) {
  return ::trlx::test::data_dir() / "data" / name;
}

}  // namespace trlx::data::test
