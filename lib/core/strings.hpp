#pragma once
#include <string>
#include <string_view>
#include <vector>

namespace trlx {

// Edit distance (insert, delete, substitute, adjacent transpose), for
// "did you mean" suggestions.
size_t edit_distance(std::string_view a, std::string_view b);

// The candidate closest to `word`, or "" if none is close enough to be a
// plausible typo.
std::string closest_match(std::string_view word, const std::vector<std::string>& candidates);

std::string to_lower(std::string_view s);
std::string trim(std::string_view s);
std::vector<std::string> split(std::string_view s, char sep);
std::string join(const std::vector<std::string>& parts, std::string_view sep);
bool starts_with(std::string_view s, std::string_view prefix);
bool ends_with(std::string_view s, std::string_view suffix);

}  // namespace trlx
