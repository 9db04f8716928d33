// CPU collectives over MPI (Open MPI, MPICH): the processes mpirun, srun or
// `trlx launch` started. Nonblocking MPI collectives give the asynchronous
// Work; wait() polls with a deadline instead of blocking in MPI_Wait, so a
// peer that never arrives becomes a CommError after ddp_timeout.
//
// bfloat16 and float16 have no MPI type: they travel as 16-bit words and are
// reduced by user-defined MPI operations that add (or take the max) in
// float32 and round back at each step, as NCCL does on GPUs. The bytes on the
// wire stay those of the 16-bit tensor.
//
// A failing rank takes the whole job down: a process that exits with a
// non-zero status after using MPI calls MPI_Abort (mpirun then stops every
// rank), and one that exits normally meets the others in a barrier with the
// same deadline before MPI_Finalize.
#include <sched.h>
#include <stdlib.h>

#include <atomic>
#include <cstdio>
#include <mutex>

#include <c10/util/BFloat16.h>
#include <c10/util/Half.h>

#ifdef TRLX_WITH_MPI
#include <mpi.h>
#endif

#include "core/log.hpp"
#include "dist/comm/comm_common.hpp"
#include "dist/comm/make_communicator.hpp"

namespace trlx::dist {

#ifndef TRLX_WITH_MPI

bool mpi_available() { return false; }

std::unique_ptr<Communicator> make_mpi_communicator(std::chrono::seconds) {
  fail_input("this trlx was built without MPI, which CPU ranks use to talk to each other; rebuild with "
             "libopenmpi-dev installed (-DTRLX_WITH_MPI=ON), or train on GPUs (NCCL)");
}

void abort_job(int exit_code) { std::_Exit(exit_code); }

void stopping_together() {}

std::string detail::mpi_broadcast_string(const std::string&, std::chrono::seconds) {
  fail_input("the ranks were started by an MPI launcher without MASTER_ADDR, and this trlx was built without MPI "
             "to share rank 0's address; set MASTER_ADDR and MASTER_PORT");
}

#else

bool mpi_available() { return true; }

namespace {

std::string mpi_error_string(int code) {
  char buf[MPI_MAX_ERROR_STRING];
  int len = 0;
  if (MPI_Error_string(code, buf, &len) != MPI_SUCCESS) return fmt::format("MPI error {}", code);
  return std::string(buf, static_cast<size_t>(len));
}

// The 16-bit reductions. MPI calls them with `inout` = in (op) inout.
template <typename T, bool kMax>
void reduce16(void* in, void* inout, int* len, MPI_Datatype*) {
  const T* a = static_cast<const T*>(in);
  T* b = static_cast<T*>(inout);
  for (int i = 0; i < *len; ++i) {
    const float x = static_cast<float>(a[i]);
    const float y = static_cast<float>(b[i]);
    if constexpr (kMax) {
      if (x > y || std::isnan(x)) b[i] = a[i];
    } else {
      b[i] = T(x + y);
    }
  }
}

// Process-wide MPI state: initialised once, finished once at exit.
struct MpiRuntime {
  MPI_Op bf16_sum = MPI_OP_NULL, bf16_max = MPI_OP_NULL, f16_sum = MPI_OP_NULL, f16_max = MPI_OP_NULL;
  int world_rank = 0;
  int world_size = 1;
  std::atomic<int64_t> exit_timeout_s{1800};
  std::atomic<bool> failed{false};
  // Every rank agreed to end with a non-zero code (a stop on request).
  std::atomic<bool> together{false};
};

MpiRuntime& runtime() {
  static MpiRuntime* rt = new MpiRuntime();  // never destroyed: used from on_exit
  return *rt;
}

// Waits for `req` with a deadline; false when the deadline passed. Polls
// without sleeping (as MPI_Wait does) so that large, segmented collectives
// progress at full speed; sched_yield lets oversubscribed ranks share cores.
bool test_until(MPI_Request& req, std::chrono::steady_clock::time_point deadline, int& error) {
  int flag = 0;
  for (;;) {
    error = MPI_Test(&req, &flag, MPI_STATUS_IGNORE);
    if (error != MPI_SUCCESS) return true;
    if (flag) return true;
    if (std::chrono::steady_clock::now() > deadline) return false;
    sched_yield();
  }
}

void at_exit(int status, void*) {
  int finalized = 0;
  MPI_Finalized(&finalized);
  if (finalized) return;
  MpiRuntime& rt = runtime();
  if ((status != 0 && !rt.together) || rt.failed) {
    std::fflush(stdout);
    std::fprintf(stderr, "[rank %d] exiting with status %d: stopping every rank of the job\n", rt.world_rank,
                 status != 0 ? status : 1);
    std::fflush(stderr);
    MPI_Abort(MPI_COMM_WORLD, status != 0 ? status : 1);
  }
  // Every rank leaves together; a peer that never arrives ends the job
  // rather than leaving this rank in MPI_Finalize for ever.
  MPI_Request req;
  int err = MPI_Ibarrier(MPI_COMM_WORLD, &req);
  if (err == MPI_SUCCESS) {
    const auto deadline = std::chrono::steady_clock::now() + std::chrono::seconds(rt.exit_timeout_s.load());
    if (!test_until(req, deadline, err) || err != MPI_SUCCESS) {
      std::fprintf(stderr, "[rank %d] the other ranks did not reach the end of the run within %lld s: stopping the job\n",
                   rt.world_rank, static_cast<long long>(rt.exit_timeout_s.load()));
      MPI_Abort(MPI_COMM_WORLD, 1);
    }
  }
  for (MPI_Op* op : {&rt.bf16_sum, &rt.bf16_max, &rt.f16_sum, &rt.f16_max})
    if (*op != MPI_OP_NULL) MPI_Op_free(op);
  MPI_Finalize();
}

MpiRuntime& ensure_mpi() {
  static std::once_flag once;
  std::call_once(once, [] {
    MpiRuntime& rt = runtime();
    int initialized = 0;
    MPI_Initialized(&initialized);
    if (!initialized) {
      int provided = 0;
      // Collectives may be started from autograd's threads, one at a time.
      const int rc = MPI_Init_thread(nullptr, nullptr, MPI_THREAD_SERIALIZED, &provided);
      if (rc != MPI_SUCCESS) fail("MPI_Init_thread failed: {}", mpi_error_string(rc));
      if (provided < MPI_THREAD_SERIALIZED)
        log::warn("MPI provides thread level {} (< MPI_THREAD_SERIALIZED); start collectives from one thread",
                  provided);
    }
    MPI_Comm_rank(MPI_COMM_WORLD, &rt.world_rank);
    MPI_Comm_size(MPI_COMM_WORLD, &rt.world_size);
    MPI_Comm_set_errhandler(MPI_COMM_WORLD, MPI_ERRORS_RETURN);
    MPI_Op_create(&reduce16<c10::BFloat16, false>, 1, &rt.bf16_sum);
    MPI_Op_create(&reduce16<c10::BFloat16, true>, 1, &rt.bf16_max);
    MPI_Op_create(&reduce16<c10::Half, false>, 1, &rt.f16_sum);
    MPI_Op_create(&reduce16<c10::Half, true>, 1, &rt.f16_max);
    on_exit(&at_exit, nullptr);
  });
  return runtime();
}

MPI_Datatype mpi_type(torch::ScalarType t) {
  switch (t) {
    case torch::kFloat: return MPI_FLOAT;
    case torch::kDouble: return MPI_DOUBLE;
    case torch::kInt: return MPI_INT32_T;
    case torch::kLong: return MPI_INT64_T;
    case torch::kBFloat16:
    case torch::kHalf: return MPI_UINT16_T;
    default: fail("MPI: dtype {} is not supported", c10::toString(t));
  }
}

MPI_Op mpi_op(torch::ScalarType t, ReduceOp op) {
  const MpiRuntime& rt = runtime();
  const bool max = op == ReduceOp::Max;
  if (t == torch::kBFloat16) return max ? rt.bf16_max : rt.bf16_sum;
  if (t == torch::kHalf) return max ? rt.f16_max : rt.f16_sum;
  return max ? MPI_MAX : MPI_SUM;  // Avg: a sum, divided when done
}

void finish_avg(torch::Tensor& t, int world) {
  if (t.is_floating_point()) t.div_(world);
  else t.floor_divide_(world);
}

int to_int(int64_t n, const char* op) {
  if (n > std::numeric_limits<int>::max())
    fail("{}: {} elements exceed MPI's int count; split the tensor into buckets", op, n);
  return static_cast<int>(n);
}

class MpiCommunicator;

class MpiWork : public Work {
 public:
  MpiWork(MpiCommunicator* comm, std::string what) : comm_(comm), what_(std::move(what)) {}
  void wait() override;
  const std::string& what() const { return what_; }

  MPI_Request request = MPI_REQUEST_NULL;
  std::vector<torch::Tensor> keep_alive;
  std::vector<int> counts, displs;
  std::function<void()> finish;

 private:
  MpiCommunicator* comm_;
  std::string what_;
  bool done_ = false;
};

class MpiCommunicator : public Communicator {
 public:
  explicit MpiCommunicator(std::chrono::seconds timeout) : timeout_(timeout) {
    MpiRuntime& rt = ensure_mpi();
    if (timeout.count() > rt.exit_timeout_s) rt.exit_timeout_s = timeout.count();
    rank_ = rt.world_rank;
    world_ = rt.world_size;
    // A communicator of our own, so that nothing else using MPI_COMM_WORLD
    // can match our collectives.
    MPI_Request req;
    int err = MPI_Comm_idup(MPI_COMM_WORLD, &comm_, &req);
    if (err == MPI_SUCCESS) wait_request(req, "communicator setup (MPI_Comm_idup)");
    else fail_op("communicator setup (MPI_Comm_idup)", err);
    MPI_Comm_set_errhandler(comm_, MPI_ERRORS_RETURN);
  }
  // One dimension of a mesh: `comm` came from MPI_Comm_split of another.
  MpiCommunicator(MPI_Comm comm, std::chrono::seconds timeout) : timeout_(timeout), comm_(comm) {
    MPI_Comm_rank(comm_, &rank_);
    MPI_Comm_size(comm_, &world_);
    MPI_Comm_set_errhandler(comm_, MPI_ERRORS_RETURN);
  }

  ~MpiCommunicator() override {
    // Unwinding from an error: the other ranks may be waiting in a collective
    // this rank will never join; make sure the exit ends the job.
    if (std::uncaught_exceptions() > 0) runtime().failed = true;
    int finalized = 0;
    MPI_Finalized(&finalized);
    if (!broken_ && !finalized && comm_ != MPI_COMM_NULL) MPI_Comm_free(&comm_);
  }

  int rank() const override { return rank_; }
  int world_size() const override { return world_; }
  std::string backend() const override { return "mpi"; }
  torch::Device device() const override { return torch::Device(torch::kCPU); }

  WorkPtr all_reduce(torch::Tensor& t, ReduceOp op) override {
    detail::check_tensor("all_reduce", t, device());
    auto w = start(detail::describe("all_reduce", ++seq_, t, op));
    w->keep_alive = {t};
    call(*w, MPI_Iallreduce(MPI_IN_PLACE, t.data_ptr(), to_int(t.numel(), "all_reduce"), mpi_type(t.scalar_type()),
                            mpi_op(t.scalar_type(), op), comm_, &w->request));
    if (op == ReduceOp::Avg) w->finish = [t, n = world_]() mutable { finish_avg(t, n); };
    bytes_ += t.nbytes();
    return w;
  }

  WorkPtr all_gather(const torch::Tensor& in, torch::Tensor& out) override {
    detail::check_tensor("all_gather", in, device());
    detail::check_tensor("all_gather", out, device());
    if (in.scalar_type() != out.scalar_type()) fail("all_gather: input and output dtypes differ");
    const int64_t total = out.numel();
    detail::check_shard("all_gather", total, in.numel(), world_, rank_);
    auto w = start(detail::describe("all_gather", ++seq_, in));
    w->keep_alive = {in, out};
    for (int r = 0; r < world_; ++r) {
      const Shard s = shard_of(total, world_, r);
      w->counts.push_back(to_int(s.numel, "all_gather"));
      w->displs.push_back(to_int(s.offset, "all_gather"));
    }
    const MPI_Datatype dt = mpi_type(in.scalar_type());
    call(*w, MPI_Iallgatherv(in.data_ptr(), w->counts[rank_], dt, out.data_ptr(), w->counts.data(), w->displs.data(),
                             dt, comm_, &w->request));
    bytes_ += in.nbytes();
    return w;
  }

  WorkPtr reduce_scatter(const torch::Tensor& in, torch::Tensor& out, ReduceOp op) override {
    detail::check_tensor("reduce_scatter", in, device());
    detail::check_tensor("reduce_scatter", out, device());
    if (in.scalar_type() != out.scalar_type()) fail("reduce_scatter: input and output dtypes differ");
    detail::check_shard("reduce_scatter", in.numel(), out.numel(), world_, rank_);
    auto w = start(detail::describe("reduce_scatter", ++seq_, in, op));
    w->keep_alive = {in, out};
    for (int r = 0; r < world_; ++r) w->counts.push_back(to_int(shard_of(in.numel(), world_, r).numel, "reduce_scatter"));
    call(*w, MPI_Ireduce_scatter(in.data_ptr(), out.data_ptr(), w->counts.data(), mpi_type(in.scalar_type()),
                                 mpi_op(in.scalar_type(), op), comm_, &w->request));
    if (op == ReduceOp::Avg) w->finish = [out, n = world_]() mutable { finish_avg(out, n); };
    bytes_ += in.nbytes();
    return w;
  }

  WorkPtr broadcast(torch::Tensor& t, int root) override {
    detail::check_tensor("broadcast", t, device());
    if (root < 0 || root >= world_) fail("broadcast: root {} is not a rank of this world of {}", root, world_);
    auto w = start(detail::describe("broadcast", ++seq_, t, std::nullopt, root));
    w->keep_alive = {t};
    call(*w, MPI_Ibcast(t.data_ptr(), to_int(t.numel(), "broadcast"), mpi_type(t.scalar_type()), root, comm_,
                        &w->request));
    bytes_ += t.nbytes();
    return w;
  }

  WorkPtr all_to_all(const torch::Tensor& in, torch::Tensor& out) override {
    detail::check_tensor("all_to_all", in, device());
    detail::check_tensor("all_to_all", out, device());
    detail::check_all_to_all(in, out, world_);
    auto w = start(detail::describe("all_to_all", ++seq_, in));
    w->keep_alive = {in, out};
    const int n = to_int(in.numel() / world_, "all_to_all");
    const MPI_Datatype dt = mpi_type(in.scalar_type());
    call(*w, MPI_Ialltoall(in.data_ptr(), n, dt, out.data_ptr(), n, dt, comm_, &w->request));
    bytes_ += in.nbytes();
    return w;
  }

  std::shared_ptr<Communicator> split(int color, int key) override {
    const std::string what = fmt::format("communicator split #{} (color {})", ++seq_, color);
    if (broken_) detail::throw_broken(what, rank_);
    // MPI_Comm_split has no nonblocking form; the ranks arrive together at
    // setup, and a rank that never does ends the job through the launcher.
    detail::WaitingIn marker(what, rank_, world_);
    MPI_Comm part = MPI_COMM_NULL;
    const int err = MPI_Comm_split(comm_, color, key, &part);
    if (err != MPI_SUCCESS) fail_op(what, err);
    return std::make_shared<MpiCommunicator>(part, timeout_);
  }

  void barrier() override {
    const std::string what = fmt::format("barrier #{}", ++seq_);
    if (broken_) detail::throw_broken(what, rank_);
    MPI_Request req;
    const int err = MPI_Ibarrier(comm_, &req);
    if (err != MPI_SUCCESS) fail_op(what, err);
    wait_request(req, what);
  }

  int64_t bytes_communicated() const override { return bytes_; }

  void wait_request(MPI_Request& req, const std::string& what) {
    if (broken_) detail::throw_broken(what, rank_);
    detail::WaitingIn marker(what, rank_, world_);
    int err = MPI_SUCCESS;
    if (!test_until(req, std::chrono::steady_clock::now() + timeout_, err)) {
      mark_broken();
      detail::throw_timeout(what, rank_, world_, timeout_);
    }
    if (err != MPI_SUCCESS) fail_op(what, err);
  }

 private:
  std::shared_ptr<MpiWork> start(std::string what) {
    if (broken_) detail::throw_broken(what, rank_);
    return std::make_shared<MpiWork>(this, std::move(what));
  }
  void call(MpiWork& w, int err) {
    if (err != MPI_SUCCESS) fail_op(w.what(), err);
  }
  [[noreturn]] void fail_op(const std::string& what, int err) {
    mark_broken();
    throw CommError(fmt::format("{} failed on rank {} of {}: {} (another rank has probably died)", what, rank_, world_,
                                mpi_error_string(err)));
  }
  void mark_broken() {
    broken_ = true;
    runtime().failed = true;
  }

  std::chrono::seconds timeout_;
  MPI_Comm comm_ = MPI_COMM_NULL;
  int rank_ = 0;
  int world_ = 1;
  int64_t seq_ = 0;
  int64_t bytes_ = 0;
  bool broken_ = false;
};

void MpiWork::wait() {
  if (done_) return;
  comm_->wait_request(request, what_);
  if (finish) finish();
  keep_alive.clear();
  done_ = true;
}

}  // namespace

std::unique_ptr<Communicator> make_mpi_communicator(std::chrono::seconds timeout) {
  return std::make_unique<MpiCommunicator>(timeout);
}

std::string detail::mpi_broadcast_string(const std::string& value, std::chrono::seconds timeout) {
  MpiRuntime& rt = ensure_mpi();
  const auto deadline = std::chrono::steady_clock::now() + timeout;
  auto run = [&](const char* what, void* buf, int count, MPI_Datatype dt) {
    MPI_Request req;
    int err = MPI_Ibcast(buf, count, dt, 0, MPI_COMM_WORLD, &req);
    if (err == MPI_SUCCESS && !test_until(req, deadline, err)) {
      rt.failed = true;
      detail::throw_timeout(what, rt.world_rank, rt.world_size, timeout);
    }
    if (err != MPI_SUCCESS) {
      rt.failed = true;
      throw CommError(fmt::format("{} failed on rank {}: {}", what, rt.world_rank, mpi_error_string(err)));
    }
  };
  int len = static_cast<int>(value.size());
  run("rendezvous address broadcast", &len, 1, MPI_INT);
  std::string out = rt.world_rank == 0 ? value : std::string(static_cast<size_t>(len), '\0');
  run("rendezvous address broadcast", out.data(), len, MPI_CHAR);
  return out;
}

void stopping_together() { runtime().together = true; }

void abort_job(int exit_code) {
  int initialized = 0, finalized = 0;
  MPI_Initialized(&initialized);
  MPI_Finalized(&finalized);
  std::fflush(stdout);
  std::fflush(stderr);
  if (initialized && !finalized) MPI_Abort(MPI_COMM_WORLD, exit_code);
  std::_Exit(exit_code);
}

#endif

}  // namespace trlx::dist
