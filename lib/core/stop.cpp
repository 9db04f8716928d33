#include "core/stop.hpp"

#include <time.h>

#include <atomic>
#include <cstdint>

namespace trlx::stop {
namespace {

std::atomic<bool> g_requested{false};
std::atomic<int64_t> g_at_ns{0};

int64_t now_ns() noexcept {
  timespec ts{};
  ::clock_gettime(CLOCK_MONOTONIC, &ts);  // async-signal-safe
  return static_cast<int64_t>(ts.tv_sec) * 1'000'000'000 + ts.tv_nsec;
}

}  // namespace

void request() noexcept {
  if (g_requested) return;
  g_at_ns = now_ns();  // before the flag: a reader that sees the flag sees the time
  g_requested = true;
}

void clear() noexcept {
  g_requested = false;
  g_at_ns = 0;
}

bool requested() noexcept { return g_requested; }

double seconds_since_request() noexcept {
  if (!g_requested) return 0;
  return static_cast<double>(now_ns() - g_at_ns.load()) / 1e9;
}

}  // namespace trlx::stop
