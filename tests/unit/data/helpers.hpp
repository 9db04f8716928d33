#pragma once
// Temporary files and error capture for the dataset reader tests.
#include <filesystem>
#include <fstream>
#include <string>

#include <catch2/catch.hpp>

#include "core/error.hpp"
#include "support.hpp"

namespace trlx::data::test {

using ::trlx::test::TempDir;

// The message of the InputError `f` throws; fails the test if it throws none.
template <typename F>
std::string input_error(F&& f) {
  return ::trlx::test::input_error_of(std::forward<F>(f));
}

inline std::filesystem::path golden(const std::string& name) {
  return ::trlx::test::data_dir() / "data" / name;
}

}  // namespace trlx::data::test
