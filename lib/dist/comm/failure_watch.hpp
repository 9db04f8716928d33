#pragma once
// Heartbeats through the rendezvous store, so that a rank that dies without
// a word (SIGKILL, a segfault, the out-of-memory killer: no destructor runs)
// is noticed by the others within seconds, under any launcher, instead of
// after ddp_timeout. Internal to lib/dist/comm (pulls in c10d's headers); the
// NCCL communicator runs one, and tests/unit/dist/failure_watch_test.sh kills
// ranks of a probe that runs the same one.
//
// Every rank adds to its own counter in the store each period and watches one
// peer (the next rank that has not left cleanly), so the store sees O(world)
// operations per period. A peer whose counter stood still for `silence`
// after its first beat is declared failed: the watch writes that into the
// store's failure key, which every rank's watch reads each period, so all of
// them learn it within a period or two. A rank that fails in a way it sees
// (an exception) announces itself there too. The watch talks to the store
// over a connection of its own (Store::clone), so a main thread blocked in a
// store wait (NCCL's lazy setup) never stalls its beats.
#include <chrono>
#include <functional>
#include <memory>
#include <string>

#include <torch/csrc/distributed/c10d/Store.hpp>

namespace trlx::dist::detail {

class FailureWatch {
 public:
  struct Options {
    std::chrono::milliseconds period{1000};   // between beats and checks
    std::chrono::milliseconds silence{10000};  // a peer this long without a beat has failed; 0: no heartbeats
  };
  // From TRLX_HEARTBEAT_TIMEOUT (seconds, default 10; 0 turns heartbeats off
  // and keeps the failure key): silence, and a period of a fifth of it (at
  // most a second). A value that is not a number is an InputError.
  static Options from_env();

  // `on_failure` runs once, on the watch's thread, with a message naming the
  // failed rank, or saying that the store is gone (`store_lost`: rank 0,
  // which hosts it, ended or failed; at the end of a run that is no failure).
  // The watch starts at once.
  using OnFailure = std::function<void(const std::string& message, bool store_lost)>;
  FailureWatch(const c10::intrusive_ptr<c10d::Store>& store, int rank, int world, OnFailure on_failure,
               Options options = from_env());
  // Stops the watch; a rank that did not announce a failure has left cleanly
  // and its watchers stop watching it.
  ~FailureWatch();
  FailureWatch(const FailureWatch&) = delete;
  FailureWatch& operator=(const FailureWatch&) = delete;

  // This rank failed (`why` says how): every other rank's watch fires.
  void announce_failure(const std::string& why);

 private:
  struct State;
  std::unique_ptr<State> s_;
};

}  // namespace trlx::dist::detail
