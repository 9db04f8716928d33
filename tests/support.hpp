#pragma once
// Helpers shared by the unit tests.
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <iostream>
#include <optional>
#include <string>

#include <unistd.h>

namespace trlx::test {

// The checkout the tests were built from (tests/support.cpp).
std::filesystem::path source_dir();

// The project's own committed test data (tests/data).
inline std::filesystem::path data_dir() { return source_dir() / "tests" / "data"; }

// The committed tiny model (examples/tiny-model) the model and trainer tests
// load.
inline std::filesystem::path tiny_model() { return source_dir() / "examples" / "tiny-model"; }

// The workplace's shared fixtures (real tokenizer files, ...). Passed in by the
// test command as TRLX_SHARED_DIR; a user's clone has none, and tests that need
// it skip.
inline std::optional<std::filesystem::path> shared_dir() {
  const char* p = std::getenv("TRLX_SHARED_DIR");
  if (!p || !*p) return std::nullopt;
  std::filesystem::path dir(p);
  if (!std::filesystem::is_directory(dir)) return std::nullopt;
  return dir;
}

// Writes `text` to the file `name` in the temp dir; its path.
inline std::filesystem::path write_temp(const std::string& name, const std::string& text) {
  const auto path = std::filesystem::temp_directory_path() / name;
  std::ofstream(path) << text;
  return path;
}

// A fresh directory under the temp dir, removed with everything in it when
// the object goes.
struct TempDir {
  std::filesystem::path path;
  explicit TempDir(const std::string& prefix = "trlx_test") {
    static int n = 0;
    path = std::filesystem::temp_directory_path() /
           (prefix + "_" + std::to_string(::getpid()) + "_" + std::to_string(n++));
    std::filesystem::remove_all(path);
    std::filesystem::create_directories(path);
  }
  ~TempDir() {
    std::error_code ec;
    std::filesystem::remove_all(path, ec);
  }
  TempDir(const TempDir&) = delete;
  TempDir& operator=(const TempDir&) = delete;

  // Writes `content` (bytes as given) to a path relative to the directory.
  std::filesystem::path write(const std::string& rel, const std::string& content) const {
    const auto p = path / rel;
    std::filesystem::create_directories(p.parent_path());
    std::ofstream(p, std::ios::binary) << content;
    return p;
  }
};

// Says why a test cannot run here, in the line ctest turns into "Skipped"
// (TRLX_TEST_SKIP_MARKER, tests/CMakeLists.txt); the test then returns.
inline void report_skipped(const std::string& why) {
  std::cout << TRLX_TEST_SKIP_MARKER << " " << why << std::endl;
}

}  // namespace trlx::test

// Ends a test case as skipped (see report_skipped). Include Catch first.
#define TRLX_SKIP(why)                                  \
  do {                                                  \
    const std::string trlx_skip_why_ = (why);           \
    ::trlx::test::report_skipped(trlx_skip_why_);       \
    WARN("SKIPPED: " << trlx_skip_why_);                \
    return;                                             \
  } while (0)

// Skips the rest of a test case when the shared fixtures are absent.
#define TRLX_NEED_SHARED(var)                                                          \
  const auto var##_opt = ::trlx::test::shared_dir();                                   \
  if (!var##_opt) TRLX_SKIP("TRLX_SHARED_DIR is not set or missing; shared fixtures absent"); \
  const std::filesystem::path var = *var##_opt

#include <functional>
#include <string>

#include "core/error.hpp"

namespace trlx::test {

// The message of the InputError that `f` throws (checking its exit code is
// 2); fails the test when `f` throws none. Include Catch before this header.
inline std::string input_error_of(const std::function<void()>& f) {
  try {
    f();
  } catch (const ::trlx::InputError& e) {
    CHECK(static_cast<int>(e.code()) == 2);
    return e.what();
  }
  FAIL("expected an InputError");
  return "";
}

// The message of the InputError that `f` throws, else a text saying what
// happened instead, which no expected message contains.
inline std::string error_message_of(const std::function<void()>& f) {
  try {
    f();
  } catch (const ::trlx::InputError& e) {
    return e.what();
  } catch (const std::exception& e) {
    return std::string("<not an InputError: ") + e.what() + ">";
  }
  return "<no error>";
}

}  // namespace trlx::test
