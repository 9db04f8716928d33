#pragma once
// Choosing and building the communicator for this process.
//
//   world size 1             -> single (no-ops)
//   CUDA device              -> NCCL; ranks meet through a c10d TCPStore at
//                               MASTER_ADDR:MASTER_PORT (rank 0 hosts it, or
//                               torchrun's agent hosts it), or, under an MPI
//                               launcher without MASTER_ADDR, at a free port
//                               of rank 0 that MPI tells the other ranks
//   CPU                      -> MPI (mpirun, srun with PMI, `trlx launch`)
#include <chrono>
#include <memory>
#include <optional>
#include <string>

#include "dist/comm/communicator.hpp"
#include "dist/env/launcher_env.hpp"

namespace trlx::dist {

// `timeout` bounds every wait (ddp_timeout). Throws InputError when the launch
// cannot work (torchrun on CPU without MPI, no rendezvous address, a build
// without NCCL asked for a GPU), CommError when the rendezvous times out.
// `nccl_at_world_1`: a GPU process alone still gets the NCCL communicator
// (debug_force_distributed), so one GPU runs every NCCL code path.
std::unique_ptr<Communicator> make_communicator(const LauncherEnv& env, torch::Device device,
                                                std::chrono::seconds timeout, bool nccl_at_world_1 = false);

std::unique_ptr<Communicator> make_single_communicator(torch::Device device = torch::kCPU);

// MPI_COMM_WORLD of the processes an MPI launcher started (MPI is initialised
// on first use and finalised at exit). Throws InputError in a build without MPI.
std::unique_ptr<Communicator> make_mpi_communicator(std::chrono::seconds timeout);
bool mpi_available();  // built with MPI

// Where the ranks of an NCCL group meet.
struct Rendezvous {
  std::string host;          // the store's address
  int port = 29500;          // 0 with is_server: any free port (world 1 tests)
  int rank = 0;
  int world_size = 1;
  bool is_server = false;    // this process hosts the store (rank 0 without torchrun's agent)
  std::string prefix;        // key prefix inside a shared store ("/worker/attempt_0" under torchrun)
  bool share_over_mpi = false;  // rank 0 hosts on a free port of `host` and MPI tells the others
};
// The rendezvous `env` implies (see the table above). `lookup` reads the
// variables LauncherEnv does not keep (TORCHELASTIC_USE_AGENT_STORE,
// TORCHELASTIC_RESTART_COUNT); the process environment by default. Throws
// InputError when there is no way for the ranks to meet.
Rendezvous rendezvous_for(const LauncherEnv& env, const EnvLookup& lookup = {});

// NCCL on `device` (a CUDA device). Throws InputError in a build whose
// LibTorch has no NCCL (nccl_available() false).
std::unique_ptr<Communicator> make_nccl_communicator(const Rendezvous& rv, torch::Device device,
                                                     std::chrono::seconds timeout);
bool nccl_available();  // built against a LibTorch with c10d NCCL (USE_C10D_NCCL)

// Ends this process and, under MPI, every other rank of the job (MPI_Abort);
// for errors outside collectives that one rank hits alone. Never returns.
[[noreturn]] void abort_job(int exit_code);

// Every rank is ending on purpose with the same non-zero code (a stop on
// request, agreed over the ranks): under MPI the ranks then leave in order
// (barrier, finalize) instead of aborting the job, which would print MPI's
// abort notice over the run's own message. A rank that never arrives still
// ends the job after the exit timeout.
void stopping_together();

}  // namespace trlx::dist
