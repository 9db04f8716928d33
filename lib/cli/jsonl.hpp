#pragma once
// Reading JSONL input files the way every command does: blank lines skipped,
// a bad line named by file and line number.
#include <filesystem>
#include <fstream>
#include <string>
#include <system_error>

#include <nlohmann/json.hpp>

#include "core/error.hpp"

namespace trlx::cli {

// Calls f(line_number, row) for every non-blank line of a JSONL file; `what`
// names the file's flag in errors.
template <typename F>
void for_each_jsonl(const std::string& path, const std::string& what, F&& f) {
  std::error_code ec;
  if (std::filesystem::is_directory(path, ec)) fail_input("{} {}: is a directory, expected a JSONL file", what, path);
  std::ifstream in(path, std::ios::binary);
  if (!in) fail_input("{} {}: cannot read the file", what, path);
  std::string line;
  for (size_t n = 1; std::getline(in, line); ++n) {
    if (line.find_first_not_of(" \t\r") == std::string::npos) continue;
    nlohmann::ordered_json row;
    try {
      row = nlohmann::ordered_json::parse(line);
    } catch (const nlohmann::json::exception& e) {
      fail_input("{}:{}: not valid JSON: {}", path, n, e.what());
    }
    f(n, row);
  }
  if (in.bad()) fail_input("{} {}: read error", what, path);
}

}  // namespace trlx::cli
