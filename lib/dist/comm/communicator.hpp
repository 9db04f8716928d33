#pragma once
// The one interface every collective goes through: NCCL between GPUs, MPI
// between CPU processes, and a single-process one that does nothing. The
// engine and the strategies (DDP, ZeRO, FSDP) see only this.
#include <chrono>
#include <memory>
#include <string>
#include <vector>

#include <ATen/core/Tensor.h>
#include <c10/core/Device.h>

#include "core/error.hpp"

namespace trlx::dist {

enum class ReduceOp { Sum, Avg, Max };
std::string reduce_op_name(ReduceOp op);  // "sum", "avg", "max"

// A collective that failed or did not finish within the timeout. The message
// names the operation, its sequence number, the rank and the timeout. Once a
// communicator has raised one it is broken: every later operation raises
// again, and the process ends the whole job when it exits (MPI_Abort under
// MPI, the NCCL watchdog under NCCL), so the other ranks never wait forever.
class CommError : public Error {
 public:
  explicit CommError(std::string message) : Error(std::move(message), ExitCode::kRuntime) {}
};

// An operation in flight. wait() blocks until it is done (for NCCL: until the
// current stream is ordered after it) and throws dist::CommError on failure or
// timeout, naming the operation and the rank. wait() may be called more than
// once and in any order relative to other Works; only the first call waits.
class Work {
 public:
  virtual ~Work() = default;
  virtual void wait() = 0;
};
using WorkPtr = std::shared_ptr<Work>;

// How all_gather and reduce_scatter split `total` elements over the ranks when
// `total` is not a multiple of the world size: the first total % world ranks
// hold one element more. Even splits are the special case remainder 0.
struct Shard {
  int64_t offset = 0;
  int64_t numel = 0;
};
Shard shard_of(int64_t total, int world_size, int rank);

class Communicator {
 public:
  virtual ~Communicator() = default;
  virtual int rank() const = 0;
  virtual int world_size() const = 0;
  virtual std::string backend() const = 0;  // "single", "mpi", "nccl"
  // The device every tensor handed to a collective is on: CPU for MPI, the
  // rank's GPU for NCCL, the run's device for a single process. Every
  // communicator refuses a tensor on any other device (type and index).
  virtual c10::Device device() const = 0;
  // A copy of a host tensor on device(), and back: the way host values
  // (counts, metrics, fingerprints, names) reach a collective. Only the
  // helpers of dist/comm/host_values.hpp call these.
  virtual at::Tensor host_to_device(const at::Tensor& host) const { return host.to(device(), false, true); }
  virtual at::Tensor device_to_host(const at::Tensor& t) const { return t.to(c10::kCPU, false, true); }

  // Tensors are contiguous and on device(); every rank passes the same dtype
  // and sizes, and every rank starts the same collectives in the same order.
  // Supported dtypes: float32, float64, bfloat16, float16, int32, int64 (Avg
  // on integers rounds down). A tensor handed to a collective must not be
  // touched until wait().

  // In place over every rank's `t`.
  virtual WorkPtr all_reduce(at::Tensor& t, ReduceOp op = ReduceOp::Sum) = 0;
  // `out` holds every rank's `in` one after another: with n = in.numel() on
  // every rank, rank r's `in` lands at [r * n, (r + 1) * n). Uneven shards
  // are allowed: `out` has `total` elements and rank r's `in` has
  // shard_of(total, world, r).numel of them, placed at its offset.
  virtual WorkPtr all_gather(const at::Tensor& in, at::Tensor& out) = 0;
  // The reverse: `in` has `total` elements on every rank; rank r receives the
  // reduction over ranks of the slice shard_of(total, world, r) in `out`
  // (with an even split: [r * n, (r + 1) * n), n = out.numel()).
  virtual WorkPtr reduce_scatter(const at::Tensor& in, at::Tensor& out, ReduceOp op = ReduceOp::Sum) = 0;
  virtual WorkPtr broadcast(at::Tensor& t, int root = 0) = 0;
  // `in` and `out` have the same number of elements, a multiple of the world
  // size, in world equal chunks: chunk j of `in` goes to rank j, and chunk i
  // of `out` is what rank i sent this rank (sequence parallelism's exchange
  // of heads for positions).
  virtual WorkPtr all_to_all(const at::Tensor& in, at::Tensor& out) = 0;
  // Blocks until every rank has entered the barrier (same timeout as above).
  virtual void barrier() = 0;

  // A communicator over the ranks that pass the same `color`, ranked by
  // `key` (ties by rank here): one dimension of a device mesh. A collective:
  // every rank calls it, in the same order. Collectives on the new one are
  // matched only among its ranks.
  virtual std::shared_ptr<Communicator> split(int color, int key) = 0;

  // Bytes this rank has handed to collectives (the input of each operation;
  // a barrier counts 0). For benchmarks: compare with the parameter bytes.
  virtual int64_t bytes_communicated() const = 0;
};

}  // namespace trlx::dist
