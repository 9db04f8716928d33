#pragma once
// Helpers shared by the dataset reader and the shaper; not part of the API.
#include <cstddef>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "text/data/dataset.hpp"

namespace trlx::data::detail {

// Rows nested deeper than this are refused: every later pass over a row
// (validation, comparison, printing) recurses, and real rows are shallow.
inline constexpr size_t kMaxDepth = 64;
// How many skip reasons a Dataset/Shaped keeps for the log.
inline constexpr size_t kSkipExamples = 5;

// Byte offset of the first byte that does not start a well-formed UTF-8
// sequence (overlong forms, surrogates and code points past U+10FFFF count as
// ill-formed), or nullopt.
std::optional<size_t> first_invalid_utf8(std::string_view s);

// The deepest bracket nesting in JSON text, strings skipped.
size_t json_depth(std::string_view text);

// "a string \"abc\"", "a number (3)", "a list of 2 items", ... for messages.
std::string describe_value(const Value& v);

// Counts a skipped row and keeps the first few reasons.
void note_skip(size_t& skipped, std::vector<std::string>& examples, const std::string& why);

}  // namespace trlx::data::detail
