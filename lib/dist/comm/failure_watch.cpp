// Heartbeats and the failure key in the rendezvous store (failure_watch.hpp).
#include "dist/comm/failure_watch.hpp"

#include <algorithm>
#include <atomic>
#include <condition_variable>
#include <cstdlib>
#include <mutex>
#include <thread>

#include <fmt/format.h>

#include "core/error.hpp"
#include "dist/comm/store.hpp"

namespace trlx::dist::detail {

namespace {

constexpr const char* kFailedKey = "trlx/failed";
// Added to a rank's counter when it leaves cleanly: its watchers move on.
constexpr int64_t kLeft = int64_t{1} << 40;

std::string beat_key(int rank) { return fmt::format("trlx/beat/{}", rank); }

std::string to_string(const std::vector<uint8_t>& v) { return std::string(v.begin(), v.end()); }

}  // namespace

struct FailureWatch::State {
  c10::intrusive_ptr<c10d::Store> store;  // the watch's own connection
  int rank = 0;
  int world = 1;
  OnFailure on_failure;
  Options options;
  std::thread thread;
  std::mutex m;
  std::condition_variable cv;
  bool stop = false;
  std::atomic<bool> fired{false};
  std::atomic<bool> left{false};

  void fire(const std::string& message, bool store_lost = false) {
    bool expected = false;
    if (!fired.compare_exchange_strong(expected, true)) return;
    if (!store_lost) leave();  // this rank watches no more: rank 0 need not wait for it
    if (on_failure) on_failure(message, store_lost);
  }

  // Marks this rank as gone in the store (its watchers move on, rank 0 stops
  // waiting for it); once.
  void leave() {
    bool expected = false;
    if (world == 1 || !left.compare_exchange_strong(expected, true)) return;
    try {
      const QuietC10Logs quiet;
      store->add(beat_key(rank), kLeft);
    } catch (const std::exception&) {
      // The store is gone (rank 0 left first): nobody is left to watch.
    }
  }

  // Rank 0 hosts the store: before it goes, the others get up to `bound` to
  // leave (or to read a failure from it), so that none of them finds it
  // gone while it still watches.
  void wait_for_others(std::chrono::milliseconds bound) {
    const auto end = std::chrono::steady_clock::now() + bound;
    try {
      for (int r = 1; r < world; ++r)
        while (store->add(beat_key(r), 0) < kLeft && std::chrono::steady_clock::now() < end)
          std::this_thread::sleep_for(std::chrono::milliseconds(20));
    } catch (const std::exception&) {
    }
  }

  void run() {
    const bool beats = options.silence.count() > 0 && world > 1;
    int peer = (rank + 1) % world;
    int64_t last = -1;
    auto last_change = std::chrono::steady_clock::now();
    for (;;) {
      {
        std::unique_lock<std::mutex> lock(m);
        if (cv.wait_for(lock, options.period, [&] { return stop; })) return;
      }
      try {
        if (beats) store->add(beat_key(rank), 1);
        if (store->check({kFailedKey})) {
          fire(to_string(store->get(kFailedKey)));
          return;
        }
        if (!beats || peer == rank) continue;
        const int64_t v = store->add(beat_key(peer), 0);
        const auto now = std::chrono::steady_clock::now();
        if (v >= kLeft) {  // left cleanly: watch the next one
          peer = (peer + 1) % world;
          last = -1;
        } else if (v != last) {
          last = v;
          last_change = now;
        } else if (v > 0 && now - last_change > options.silence) {
          const auto secs = std::chrono::duration_cast<std::chrono::milliseconds>(now - last_change).count() / 1000.0;
          const std::string message = fmt::format(
              "rank {} stopped answering: no heartbeat in the rendezvous store for {:.1f} s (killed, or crashed "
              "without a word; its own output or the system log says why)",
              peer, secs);
          store->set(kFailedKey, std::vector<uint8_t>(message.begin(), message.end()));
          fire(message);
          return;
        }
      } catch (const std::exception&) {
        fire("the rendezvous store, which rank 0 hosts, is gone: rank 0 ended or failed", true);
        return;
      }
    }
  }
};

FailureWatch::Options FailureWatch::from_env() {
  Options o;
  const char* v = std::getenv("TRLX_HEARTBEAT_TIMEOUT");
  if (v == nullptr || *v == '\0') return o;
  char* end = nullptr;
  const double secs = std::strtod(v, &end);
  if (end == v || *end != '\0' || !(secs >= 0))
    fail_input("TRLX_HEARTBEAT_TIMEOUT={}: expected seconds (a number >= 0; 0 turns the heartbeats off)", v);
  o.silence = std::chrono::milliseconds(static_cast<int64_t>(secs * 1000));
  o.period = std::clamp(o.silence / 5, std::chrono::milliseconds(50), std::chrono::milliseconds(1000));
  return o;
}

FailureWatch::FailureWatch(const c10::intrusive_ptr<c10d::Store>& store, int rank, int world, OnFailure on_failure,
                           Options options)
    : s_(std::make_unique<State>()) {
  s_->rank = rank;
  s_->world = world;
  s_->on_failure = std::move(on_failure);
  s_->options = options;
  {
    const QuietC10Logs quiet;
    try {
      s_->store = store->clone();
    } catch (const std::exception&) {
      s_->store = store;  // a store without a second connection: beats may wait behind the main thread's waits
    }
  }
  // The first beat before the watch counts as started: a rank killed from
  // here on is noticed.
  if (options.silence.count() > 0 && world > 1) {
    try {
      const QuietC10Logs quiet;
      s_->store->add(beat_key(rank), 1);
    } catch (const std::exception&) {
      // The watch's first check says the store is gone.
    }
  }
  s_->thread = std::thread([s = s_.get()] { s->run(); });
}

FailureWatch::~FailureWatch() {
  {
    std::lock_guard<std::mutex> lock(s_->m);
    s_->stop = true;
  }
  s_->cv.notify_all();
  if (s_->thread.joinable()) s_->thread.join();
  s_->leave();
  if (s_->rank == 0 && s_->world > 1)
    s_->wait_for_others(std::min<std::chrono::milliseconds>(std::chrono::seconds(3), 3 * s_->options.period));
}

void FailureWatch::announce_failure(const std::string& why) {
  const std::string message = fmt::format("rank {} failed: {}", s_->rank, why);
  try {
    const QuietC10Logs quiet;
    s_->store->set(kFailedKey, std::vector<uint8_t>(message.begin(), message.end()));
  } catch (const std::exception&) {
    // The store may be what failed; NCCL's own timeout still ends the others.
  }
}

}  // namespace trlx::dist::detail
