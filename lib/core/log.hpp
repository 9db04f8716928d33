#pragma once
// Rank-aware logging. Rank 0 logs at the chosen level; other ranks log only
// errors (warnings too at debug level), always prefixed with "[rank N]", so a
// failure on any rank is visible in a multi-process run.
//
// The backend (spdlog) stays inside log.cpp: LibTorch bundles its own fmt,
// and translation units that include LibTorch must not see spdlog's headers.
#include <string>
#include <string_view>

#include <fmt/format.h>

namespace trlx::log {

enum class Level { Trace, Debug, Info, Warn, Error, Critical, Off };

void init(int rank, int world_size, std::string_view level = "info");
// Changes the level after init (a config's log_level, once it is resolved).
void set_level(std::string_view level);
// Parses "trace|debug|info|passive|warning|warn|error|critical|off"; throws InputError otherwise.
Level parse_level(std::string_view level);
int rank();
void write(Level level, const std::string& message);
bool enabled(Level level);

template <typename... Args>
void info(fmt::format_string<Args...> f, Args&&... a) {
  if (enabled(Level::Info)) write(Level::Info, fmt::format(f, std::forward<Args>(a)...));
}
template <typename... Args>
void warn(fmt::format_string<Args...> f, Args&&... a) {
  if (enabled(Level::Warn)) write(Level::Warn, fmt::format(f, std::forward<Args>(a)...));
}
template <typename... Args>
void error(fmt::format_string<Args...> f, Args&&... a) {
  if (enabled(Level::Error)) write(Level::Error, fmt::format(f, std::forward<Args>(a)...));
}
template <typename... Args>
void debug(fmt::format_string<Args...> f, Args&&... a) {
  if (enabled(Level::Debug)) write(Level::Debug, fmt::format(f, std::forward<Args>(a)...));
}

}  // namespace trlx::log
