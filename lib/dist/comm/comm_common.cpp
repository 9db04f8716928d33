// What every communicator shares: argument checks, operation names in errors, the blocked-collective marker.
#include "dist/comm/comm_common.hpp"

#include <signal.h>
#include <unistd.h>

#include <cstdio>
#include <cstring>

namespace trlx::dist {

std::string reduce_op_name(ReduceOp op) {
  switch (op) {
    case ReduceOp::Sum: return "sum";
    case ReduceOp::Avg: return "avg";
    case ReduceOp::Max: return "max";
  }
  return "?";
}

Shard shard_of(int64_t total, int world_size, int rank) {
  const int64_t base = total / world_size;
  const int64_t extra = total % world_size;
  Shard s;
  s.numel = base + (rank < extra ? 1 : 0);
  s.offset = rank * base + std::min<int64_t>(rank, extra);
  return s;
}

namespace detail {

std::string describe(const char* op, int64_t seq, const torch::Tensor& t, std::optional<ReduceOp> reduce, int root) {
  std::string args;
  if (reduce) args += reduce_op_name(*reduce) + ", ";
  if (root >= 0) args += fmt::format("root {}, ", root);
  args += t.defined() ? fmt::format("{} x {}", t.numel(), c10::toString(t.scalar_type())) : "no data";
  return fmt::format("{} #{} ({})", op, seq, args);
}

void check_tensor(const char* op, const torch::Tensor& t, const torch::Device& device) {
  if (!t.defined()) fail("{}: the tensor is undefined", op);
  const auto d = t.device();
  // A CPU tensor reports no index; a GPU one always does.
  if (d.type() != device.type() || (device.has_index() && d.has_index() && d.index() != device.index()))
    fail("{}: the tensor is on {} but this communicator works on {} tensors (host values go through "
         "dist/comm/host_values.hpp)",
         op, d.str(), device.str());
  if (!t.is_contiguous()) fail("{}: the tensor must be contiguous (call .contiguous() and copy back)", op);
  switch (t.scalar_type()) {
    case torch::kFloat: case torch::kDouble: case torch::kBFloat16: case torch::kHalf: case torch::kInt:
    case torch::kLong: return;
    default:
      fail("{}: dtype {} is not supported (float32, float64, bfloat16, float16, int32, int64)", op,
           c10::toString(t.scalar_type()));
  }
}

Shard check_shard(const char* op, int64_t total, int64_t shard_numel, int world_size, int rank) {
  const Shard s = shard_of(total, world_size, rank);
  if (s.numel != shard_numel)
    fail("{}: rank {} of {} holds {} elements of {} but passed a shard of {} (the first {} % {} ranks hold one more)",
         op, rank, world_size, s.numel, total, shard_numel, total, world_size);
  return s;
}

void check_all_to_all(const torch::Tensor& in, const torch::Tensor& out, int world_size) {
  if (in.scalar_type() != out.scalar_type()) fail("all_to_all: input and output dtypes differ");
  if (in.numel() != out.numel() || in.numel() % world_size != 0)
    fail("all_to_all: the input ({}) and output ({}) must hold the same number of elements, a multiple of the {} "
         "ranks",
         in.numel(), out.numel(), world_size);
}

void throw_timeout(const std::string& what, int rank, int world_size, std::chrono::seconds timeout) {
  throw CommError(fmt::format(
      "{} on rank {} of {} did not finish within {} s (ddp_timeout): another rank crashed, hangs, or did not "
      "start this collective; the job is being stopped",
      what, rank, world_size, timeout.count()));
}

void throw_broken(const std::string& what, int rank) {
  throw CommError(fmt::format("{} on rank {}: the communicator failed earlier and cannot be used again", what, rank));
}

namespace {

char g_waiting_message[512];
volatile sig_atomic_t g_waiting = 0;
volatile sig_atomic_t g_graceful = 0;
struct sigaction g_previous;

void on_sigterm(int sig) {
  // Armed, the training loop's handler takes the signal as a stop request:
  // the collective finishes and every rank stops at the end of the step (a
  // peer that died is reported by the collective itself: its error or
  // ddp_timeout). Otherwise, say which collective this rank was waiting in.
  if (g_waiting && !g_graceful) {
    ssize_t n = ::write(STDERR_FILENO, g_waiting_message, std::strlen(g_waiting_message));
    (void)n;
  }
  const auto prev = g_previous.sa_handler;
  if (!(g_previous.sa_flags & SA_SIGINFO) && prev != SIG_DFL && prev != SIG_IGN && prev != nullptr) {
    prev(sig);
    return;
  }
  if (prev == SIG_IGN) return;
  ::signal(sig, SIG_DFL);
  ::raise(sig);
}

}  // namespace

WaitingIn::WaitingIn(const std::string& what, int rank, int world_size) {
  std::snprintf(g_waiting_message, sizeof(g_waiting_message),
                "[rank %d] SIGTERM while waiting in %s with %d ranks: the job is being stopped, most likely "
                "because another rank failed (see its message)\n",
                rank, what.c_str(), world_size);
  struct sigaction sa {};
  sa.sa_handler = on_sigterm;
  sigemptyset(&sa.sa_mask);
  ::sigaction(SIGTERM, &sa, &g_previous);
  g_waiting = 1;
}

WaitingIn::~WaitingIn() {
  g_waiting = 0;
  ::sigaction(SIGTERM, &g_previous, nullptr);
}

}  // namespace detail
}  // namespace trlx::dist

namespace trlx::dist {

void graceful_stop_armed(bool armed) { detail::g_graceful = armed ? 1 : 0; }

}  // namespace trlx::dist
