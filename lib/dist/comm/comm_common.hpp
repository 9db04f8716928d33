#pragma once
// Shared by the communicators: argument checks, how an operation is named in
// errors, and the marker of the collective a thread is blocked in.
#include <chrono>
#include <optional>
#include <string>

#include "dist/comm/communicator.hpp"

namespace trlx::dist::detail {

// "all_reduce #12 (sum, 1024 x float32)"
std::string describe(const char* op, int64_t seq, const torch::Tensor& t, std::optional<ReduceOp> reduce = std::nullopt,
                     int root = -1);

// Throws Error for a tensor a collective cannot take (on another device than
// the communicator's, type or index; not contiguous; unsupported dtype).
void check_tensor(const char* op, const torch::Tensor& t, const torch::Device& device);
// The shard of `total` elements rank `rank` holds; throws Error when
// `shard_numel` (the caller's tensor) does not match it.
Shard check_shard(const char* op, int64_t total, int64_t shard_numel, int world_size, int rank);

// Throws Error unless `in` and `out` hold the same dtype and number of
// elements, a multiple of `world_size`.
void check_all_to_all(const torch::Tensor& in, const torch::Tensor& out, int world_size);

[[noreturn]] void throw_timeout(const std::string& what, int rank, int world_size, std::chrono::seconds timeout);
[[noreturn]] void throw_broken(const std::string& what, int rank);

// Rank 0's `value` on every rank, over MPI_COMM_WORLD (the NCCL rendezvous
// under an MPI launcher). Throws InputError in a build without MPI.
std::string mpi_broadcast_string(const std::string& value, std::chrono::seconds timeout);

// While alive, a SIGTERM (what mpirun and `trlx launch` send to the other
// ranks when one fails) goes to the handler that was there before, or, with
// none, ends the process as SIGTERM would. Unless a graceful stop is armed
// (see graceful_stop_armed), it first prints which collective this rank was
// waiting in.
class WaitingIn {
 public:
  WaitingIn(const std::string& what, int rank, int world_size);
  ~WaitingIn();
  WaitingIn(const WaitingIn&) = delete;
  WaitingIn& operator=(const WaitingIn&) = delete;
};

}  // namespace trlx::dist::detail

namespace trlx::dist {

// The training loop takes SIGTERM as "save and stop at the end of this step"
// (on every rank, agreed): while armed, a SIGTERM in a collective wait is
// that request, not a sign that another rank failed, and says nothing.
void graceful_stop_armed(bool armed);

}  // namespace trlx::dist
