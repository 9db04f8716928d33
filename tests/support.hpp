#pragma once
// Helpers shared by the unit tests.
#include <cstdlib>
#include <filesystem>
#include <optional>
#include <string>

namespace trlx::test {

// The project's own committed test data (tests/data).
inline std::filesystem::path data_dir() { return TRLX_TEST_DATA; }

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

}  // namespace trlx::test

// Skips the rest of a test case when the shared fixtures are absent.
#define TRLX_NEED_SHARED(var)                                                  \
  const auto var##_opt = ::trlx::test::shared_dir();                           \
  if (!var##_opt) {                                                            \
    WARN("SKIPPED: TRLX_SHARED_DIR is not set or missing; shared fixtures absent"); \
    return;                                                                    \
  }                                                                            \
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

}  // namespace trlx::test
