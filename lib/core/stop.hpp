#pragma once
// A request to stop the run (SIGTERM or SIGINT while the training loop runs),
// seen by whatever waits on something slow — a reward program's answer — so
// that the wait can be cut short, and the error that a wait cut short throws.
#include <stdexcept>
#include <string>

namespace trlx::stop {

// Records the request and its time. Async-signal-safe (a signal handler calls it).
void request() noexcept;
// Forgets a request (the loop starts with none).
void clear() noexcept;
bool requested() noexcept;
// Seconds since the request; 0 when there is none.
double seconds_since_request() noexcept;

// Thrown by a wait that gave up because of a stop request: the step it was in
// did not finish, and the loop saves the last finished step instead.
class Interrupted : public std::runtime_error {
 public:
  explicit Interrupted(const std::string& what) : std::runtime_error(what) {}
};

}  // namespace trlx::stop
