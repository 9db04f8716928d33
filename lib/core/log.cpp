// Rank-aware logging over spdlog: rank 0 at the chosen level, other ranks errors only, prefixed.
#include "core/log.hpp"

#include <spdlog/sinks/stdout_color_sinks.h>
#include <spdlog/spdlog.h>

#include "core/error.hpp"
#include "core/strings.hpp"

namespace trlx::log {
namespace {
int g_rank = 0;

spdlog::level::level_enum to_spdlog(Level l) {
  switch (l) {
    case Level::Trace: return spdlog::level::trace;
    case Level::Debug: return spdlog::level::debug;
    case Level::Info: return spdlog::level::info;
    case Level::Warn: return spdlog::level::warn;
    case Level::Error: return spdlog::level::err;
    case Level::Critical: return spdlog::level::critical;
    case Level::Off: return spdlog::level::off;
  }
  return spdlog::level::info;
}
}  // namespace

Level parse_level(std::string_view level) {
  const std::string l = to_lower(level);
  if (l == "trace") return Level::Trace;
  if (l == "debug") return Level::Debug;
  if (l == "info" || l == "passive") return Level::Info;
  if (l == "warning" || l == "warn") return Level::Warn;
  if (l == "error") return Level::Error;
  if (l == "critical") return Level::Critical;
  if (l == "off") return Level::Off;
  fail_input("log level `{}` is not one of trace, debug, info, warning, error, critical, off", level);
}

void init(int rank, int world_size, std::string_view level) {
  g_rank = rank;
  auto sink = std::make_shared<spdlog::sinks::stderr_color_sink_mt>();
  auto logger = std::make_shared<spdlog::logger>("trlx", sink);
  const std::string prefix = world_size > 1 ? fmt::format("[rank {}] ", rank) : "";
  logger->set_pattern("%^[%Y-%m-%d %H:%M:%S %L]%$ " + prefix + "%v");
  logger->flush_on(spdlog::level::warn);
  spdlog::set_default_logger(logger);
  set_level(level);
}

void set_level(std::string_view level) {
  Level lvl = parse_level(level);
  if (g_rank != 0) lvl = std::max(lvl, lvl <= Level::Debug ? Level::Warn : Level::Error);
  spdlog::default_logger_raw()->set_level(to_spdlog(lvl));
}

int rank() { return g_rank; }

bool enabled(Level level) { return spdlog::default_logger_raw()->should_log(to_spdlog(level)); }

void write(Level level, const std::string& message) {
  spdlog::default_logger_raw()->log(to_spdlog(level), "{}", message);
}

}  // namespace trlx::log
