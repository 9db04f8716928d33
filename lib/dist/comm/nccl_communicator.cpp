// GPU collectives through LibTorch's c10d ProcessGroupNCCL, so trlx uses the
// NCCL that LibTorch itself loads and c10d's watchdog. Each collective is
// ordered after the work already queued on the current CUDA stream, runs on
// c10d's NCCL stream (so DDP can overlap it with backward), and wait() makes
// the current stream wait for it.
//
// Timeouts: ProcessGroupNCCL's watchdog thread watches every collective; one
// that has not finished after ddp_timeout makes it log the operation (type,
// sequence number) and the rank, then end the process (c10d's default
// TORCH_NCCL_ASYNC_ERROR_HANDLING), which torchrun, srun and `trlx launch`
// turn into the end of every rank. Errors c10d reports in wait() become
// CommError naming the operation and the rank. A rank that fails says so in
// the rendezvous store, and every rank beats and watches there
// (failure_watch.hpp), so a failure ends the job within seconds under
// launchers that kill nothing, a rank killed without a word (SIGKILL, a
// segfault) included.
//
// Only a LibTorch built with NCCL defines USE_C10D_NCCL (its CMake package
// adds it with the torch_cuda target; without a CUDA toolkit,
// cmake/FindLibTorch.cmake adds it where the wheel's NCCL headers are);
// elsewhere this file only says so.
#include "core/log.hpp"
#include "dist/comm/comm_common.hpp"
#include "dist/comm/make_communicator.hpp"

#if defined(USE_C10D_NCCL)
#include <atomic>

#include <c10/cuda/CUDACachingAllocator.h>
#include <c10/cuda/CUDAFunctions.h>
#include <c10/cuda/CUDAStream.h>
#include <algorithm>

#include <torch/csrc/distributed/c10d/PrefixStore.hpp>
#include <torch/csrc/distributed/c10d/ProcessGroupNCCL.hpp>

#include "dist/comm/host_values.hpp"

#include "dist/comm/failure_watch.hpp"
#include "dist/comm/store.hpp"
#endif

namespace trlx::dist {

#if !defined(USE_C10D_NCCL)

bool nccl_available() { return false; }

std::unique_ptr<Communicator> make_nccl_communicator(const Rendezvous&, torch::Device device, std::chrono::seconds) {
  fail_input("{} asks for NCCL, but this trlx was built against a LibTorch without NCCL (a CPU-only LibTorch, or "
             "a CUDA one whose NCCL headers were not found when it was configured: the configure line 'NCCL "
             "communicator' says why); rebuild against the PyTorch wheel with its nvidia-nccl package, or with the "
             "CUDA toolkit, or train on CPU",
             device.str());
}

#else

bool nccl_available() { return true; }

namespace {

c10d::ReduceOp nccl_op(ReduceOp op, bool floating) {
  switch (op) {
    case ReduceOp::Sum: return c10d::ReduceOp::SUM;
    case ReduceOp::Max: return c10d::ReduceOp::MAX;
    case ReduceOp::Avg: return floating ? c10d::ReduceOp(c10d::ReduceOp::AVG) : c10d::ReduceOp(c10d::ReduceOp::SUM);
  }
  return c10d::ReduceOp::SUM;
}

// One tensor gathered into / reduce-scattered from one flat tensor, by the
// names this LibTorch gives them (all_gather_single and reduce_scatter_single
// from 2.15, _allgather_base and _reduce_scatter_base before).
template <class PG>
c10::intrusive_ptr<c10d::Work> gather_flat(PG& pg, at::Tensor& out, at::Tensor& in, const c10d::AllgatherOptions& o) {
  if constexpr (requires { pg.all_gather_single(out, in, o); })
    return pg.all_gather_single(out, in, o);
  else
    return pg._allgather_base(out, in, o);
}
template <class PG>
c10::intrusive_ptr<c10d::Work> reduce_scatter_flat(PG& pg, at::Tensor& out, at::Tensor& in,
                                                   const c10d::ReduceScatterOptions& o) {
  if constexpr (requires { pg.reduce_scatter_single(out, in, o); })
    return pg.reduce_scatter_single(out, in, o);
  else
    return pg._reduce_scatter_base(out, in, o);
}

class NcclWork : public Work {
 public:
  NcclWork(c10::intrusive_ptr<c10d::Work> work, std::string what, int rank)
      : work_(std::move(work)), what_(std::move(what)), rank_(rank) {}
  void wait() override {
    if (done_) return;
    try {
      work_->wait();
    } catch (const std::exception& e) {
      if (on_failure) on_failure();
      throw CommError(fmt::format("{} failed on rank {}: {}", what_, rank_, e.what()));
    }
    if (finish) finish();
    // c10d has ordered only the current stream after the collective. A
    // temporary it read (an uneven reduce-scatter's padded input) was made on
    // the compute stream, so when the wait runs on a side stream (the
    // optimizer offload's), freeing it now would let the compute stream's
    // next allocation take memory NCCL may still read: the allocator holds
    // it until the work queued on the current stream so far is done.
    for (const auto& t : keep_alive)
      if (t.defined() && t.is_cuda())
        c10::cuda::CUDACachingAllocator::recordStream(t.storage().data_ptr(),
                                                      c10::cuda::getCurrentCUDAStream(t.device().index()));
    keep_alive.clear();
    done_ = true;
  }
  std::vector<torch::Tensor> keep_alive;
  std::function<void()> finish;
  std::function<void()> on_failure;

 private:
  c10::intrusive_ptr<c10d::Work> work_;
  std::string what_;
  int rank_;
  bool done_ = false;
};

class NcclCommunicator : public Communicator {
 public:
  NcclCommunicator(c10::intrusive_ptr<c10d::Store> store, int rank, int world, torch::Device device,
                   std::chrono::seconds timeout)
      : rank_(rank), world_(world), device_(device), timeout_(timeout), store_(store) {
    c10::cuda::set_device(device.index());
    auto opts = c10d::ProcessGroupNCCL::Options::create();
    opts->timeout = std::chrono::duration_cast<std::chrono::milliseconds>(timeout);
    try {
      pg_ = c10::make_intrusive<c10d::ProcessGroupNCCL>(std::move(store), rank, world, opts);
    } catch (const std::exception& e) {
      throw CommError(fmt::format("NCCL setup failed on rank {} of {}: {}", rank, world, e.what()));
    }
    watch_ = std::make_unique<detail::FailureWatch>(store_, rank, world,
                                                    [this](const std::string& message, bool store_lost) {
      // A lost store is also how a finished run ends (rank 0 leaves first):
      // nothing is pending then, and a pending collective says it failed.
      if (!store_lost) log::error("rank {}: {}; aborting this rank's collectives", rank_, message);
      abort_nccl();
    });
  }

  // A rank that fails (an error unwinding past its communicator, or a
  // collective that failed or timed out) tells every other rank through the
  // rendezvous store and aborts its NCCL communicator; the others' watches
  // see that within a second and abort theirs, so their pending collectives
  // fail now instead of after ddp_timeout, under any launcher.
  // A clean end destroys the NCCL communicators in order, as
  // destroy_process_group does (c10d would abort them otherwise, and warn).
  ~NcclCommunicator() override {
    if (std::uncaught_exceptions() > 0 || broken_) {
      watch_->announce_failure(broken_ ? "a collective failed" : "an error ended it");
      abort_nccl();
      watch_.reset();
      return;
    }
    watch_.reset();  // its thread has stopped: no abort can start beside the shutdown
    if (aborted_.load()) return;
    try {
      pg_->shutdown();
    } catch (const std::exception& e) {
      log::warn("rank {}: closing NCCL: {}", rank_, e.what());
    }
  }

  int rank() const override { return rank_; }
  int world_size() const override { return world_; }
  std::string backend() const override { return "nccl"; }
  torch::Device device() const override { return device_; }

  WorkPtr all_reduce(torch::Tensor& t, ReduceOp op) override {
    detail::check_tensor("all_reduce", t, device_);
    const std::string what = detail::describe("all_reduce", ++seq_, t, op);
    c10d::AllreduceOptions o;
    o.reduceOp = nccl_op(op, t.is_floating_point());
    o.timeout = ms();
    std::vector<torch::Tensor> v{t};
    auto w = wrap(guarded(what, [&] { return pg_->allreduce(v, o); }), what);
    w->keep_alive = {t};
    if (op == ReduceOp::Avg && !t.is_floating_point()) w->finish = [t, n = world_]() mutable { t.floor_divide_(n); };
    bytes_ += t.nbytes();
    return w;
  }

  WorkPtr all_gather(const torch::Tensor& in, torch::Tensor& out) override {
    detail::check_tensor("all_gather", in, device_);
    detail::check_tensor("all_gather", out, device_);
    const int64_t total = out.numel();
    detail::check_shard("all_gather", total, in.numel(), world_, rank_);
    const std::string what = detail::describe("all_gather", ++seq_, in);
    c10d::AllgatherOptions o;
    o.timeout = ms();
    bytes_ += in.nbytes();
    const int64_t most = shard_of(total, world_, 0).numel;
    if (most * world_ == total) {
      torch::Tensor src = in.reshape({-1}), dst = out.view({-1});
      auto w = wrap(guarded(what, [&] { return gather_flat(*pg_, dst, src, o); }), what);
      w->keep_alive = {src, dst};
      return w;
    }
    // Uneven shards: NCCL gathers equal pieces, so each rank pads its shard
    // to the largest and the padding is dropped when copying out.
    torch::Tensor src = torch::zeros({most}, in.options());
    src.narrow(0, 0, in.numel()).copy_(in.reshape({-1}));
    torch::Tensor gathered = torch::empty({most * world_}, in.options());
    auto w = wrap(guarded(what, [&] { return gather_flat(*pg_, gathered, src, o); }), what);
    w->keep_alive = {src, gathered, out};
    w->finish = [gathered, out, total, world = world_, most]() mutable {
      torch::Tensor flat = out.view({-1});
      for (int r = 0; r < world; ++r) {
        const Shard s = shard_of(total, world, r);
        flat.narrow(0, s.offset, s.numel).copy_(gathered.narrow(0, r * most, s.numel));
      }
    };
    return w;
  }

  WorkPtr reduce_scatter(const torch::Tensor& in, torch::Tensor& out, ReduceOp op) override {
    detail::check_tensor("reduce_scatter", in, device_);
    detail::check_tensor("reduce_scatter", out, device_);
    const int64_t total = in.numel();
    detail::check_shard("reduce_scatter", total, out.numel(), world_, rank_);
    const std::string what = detail::describe("reduce_scatter", ++seq_, in, op);
    c10d::ReduceScatterOptions o;
    o.reduceOp = nccl_op(op, in.is_floating_point());
    o.timeout = ms();
    bytes_ += in.nbytes();
    const int64_t most = shard_of(total, world_, 0).numel;
    std::shared_ptr<NcclWork> w;
    torch::Tensor result = out.view({-1});
    if (most * world_ == total) {
      torch::Tensor src = in.reshape({-1});
      w = wrap(guarded(what, [&] { return reduce_scatter_flat(*pg_, result, src, o); }), what);
      w->keep_alive = {src, result};
    } else {
      torch::Tensor src = torch::zeros({most * world_}, in.options());
      torch::Tensor flat = in.reshape({-1});
      for (int r = 0; r < world_; ++r) {
        const Shard s = shard_of(total, world_, r);
        src.narrow(0, r * most, s.numel).copy_(flat.narrow(0, s.offset, s.numel));
      }
      torch::Tensor piece = torch::empty({most}, in.options());
      w = wrap(guarded(what, [&] { return reduce_scatter_flat(*pg_, piece, src, o); }), what);
      w->keep_alive = {src, piece, result};
      w->finish = [piece, result]() mutable { result.copy_(piece.narrow(0, 0, result.numel())); };
    }
    if (op == ReduceOp::Avg && !in.is_floating_point()) {
      auto prev = w->finish;
      w->finish = [prev, result, n = world_]() mutable {
        if (prev) prev();
        result.floor_divide_(n);
      };
    }
    return w;
  }

  WorkPtr broadcast(torch::Tensor& t, int root) override {
    detail::check_tensor("broadcast", t, device_);
    if (root < 0 || root >= world_) fail("broadcast: root {} is not a rank of this world of {}", root, world_);
    const std::string what = detail::describe("broadcast", ++seq_, t, std::nullopt, root);
    c10d::BroadcastOptions o;
    o.rootRank = root;
    o.timeout = ms();
    std::vector<torch::Tensor> v{t};
    auto w = wrap(guarded(what, [&] { return pg_->broadcast(v, o); }), what);
    w->keep_alive = {t};
    bytes_ += t.nbytes();
    return w;
  }

  WorkPtr all_to_all(const torch::Tensor& in, torch::Tensor& out) override {
    detail::check_tensor("all_to_all", in, device_);
    detail::check_tensor("all_to_all", out, device_);
    detail::check_all_to_all(in, out, world_);
    const std::string what = detail::describe("all_to_all", ++seq_, in);
    c10d::AllToAllOptions o;
    o.timeout = ms();
    torch::Tensor src = in.reshape({-1}), dst = out.view({-1});
    std::vector<int64_t> even;  // empty: equal chunks
    auto w = wrap(guarded(what, [&] { return pg_->alltoall_base(dst, src, even, even, o); }), what);
    w->keep_alive = {src, dst};
    bytes_ += in.nbytes();
    return w;
  }

  std::shared_ptr<Communicator> split(int color, int key) override {
    // Who shares this rank's color, in key order: each rank's (color, key)
    // over this communicator. The part's ranks meet in the same store under
    // a prefix of their own, and get a ProcessGroupNCCL of their own.
    const int64_t n = ++splits_;
    const auto all = all_gather_values(*this, {color, key});
    std::vector<std::pair<int64_t, int>> members;  // (key, rank)
    for (int r = 0; r < world_; ++r)
      if (all[static_cast<size_t>(r)][0] == color) members.emplace_back(all[static_cast<size_t>(r)][1], r);
    std::sort(members.begin(), members.end());
    int part_rank = 0;
    for (size_t i = 0; i < members.size(); ++i)
      if (members[i].second == rank_) part_rank = static_cast<int>(i);
    auto store = c10::make_intrusive<c10d::PrefixStore>(fmt::format("trlx_split{}_color{}/", n, color), store_);
    return std::make_shared<NcclCommunicator>(std::move(store), part_rank, static_cast<int>(members.size()), device_,
                                              timeout_);
  }

  void barrier() override {
    const std::string what = fmt::format("barrier #{}", ++seq_);
    c10d::BarrierOptions o;
    o.device_ids = {device_.index()};
    o.timeout = ms();
    detail::WaitingIn marker(what, rank_, world_);
    wrap(guarded(what, [&] { return pg_->barrier(o); }), what)->wait();
  }

  int64_t bytes_communicated() const override { return bytes_; }

 private:
  void abort_nccl() {
    bool expected = false;
    if (!aborted_.compare_exchange_strong(expected, true)) return;
    try {
      pg_->abort();
    } catch (const std::exception& e) {
      log::warn("rank {}: aborting the NCCL communicator failed: {}", rank_, e.what());
    }
  }

  std::chrono::milliseconds ms() const { return std::chrono::duration_cast<std::chrono::milliseconds>(timeout_); }
  template <typename F>
  c10::intrusive_ptr<c10d::Work> guarded(const std::string& what, F&& start) {
    try {
      return start();
    } catch (const std::exception& e) {
      throw CommError(fmt::format("{} failed on rank {} of {}: {}", what, rank_, world_, e.what()));
    }
  }
  std::shared_ptr<NcclWork> wrap(c10::intrusive_ptr<c10d::Work> w, const std::string& what) {
    auto out = std::make_shared<NcclWork>(std::move(w), what, rank_);
    out->on_failure = [this] { broken_ = true; };
    return out;
  }

  int rank_;
  int world_;
  torch::Device device_;
  std::chrono::seconds timeout_;
  c10::intrusive_ptr<c10d::Store> store_;
  c10::intrusive_ptr<c10d::ProcessGroupNCCL> pg_;
  std::unique_ptr<detail::FailureWatch> watch_;
  std::atomic<bool> aborted_{false};
  bool broken_ = false;  // a collective of this rank failed
  int64_t seq_ = 0;
  int64_t bytes_ = 0;
  int64_t splits_ = 0;
};

}  // namespace

std::unique_ptr<Communicator> make_nccl_communicator(const Rendezvous& rv, torch::Device device,
                                                     std::chrono::seconds timeout) {
  if (!device.is_cuda()) fail("NCCL communicator: {} is not a CUDA device", device.str());
  if (!device.has_index()) device = torch::Device(torch::kCUDA, 0);
  auto store = detail::connect_store(rv, timeout);
  return std::make_unique<NcclCommunicator>(std::move(store), rv.rank, rv.world_size, device, timeout);
}

#endif

}  // namespace trlx::dist
