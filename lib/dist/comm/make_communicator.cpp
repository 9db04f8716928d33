// Which communicator a process gets, and where NCCL ranks meet.
#include "dist/comm/make_communicator.hpp"

#include <unistd.h>

#include <cstdlib>

#include "core/log.hpp"

namespace trlx::dist {

namespace {

bool is_mpi_launcher(Launcher l) { return l == Launcher::OpenMPI || l == Launcher::MPICH || l == Launcher::MVAPICH; }

std::string this_host() {
  char buf[256] = {};
  if (gethostname(buf, sizeof(buf) - 1) != 0) return "127.0.0.1";
  return buf;
}

EnvLookup process_env() {
  return [](const std::string& k) -> std::optional<std::string> {
    const char* v = std::getenv(k.c_str());
    if (!v) return std::nullopt;
    return std::string(v);
  };
}

}  // namespace

Rendezvous rendezvous_for(const LauncherEnv& env, const EnvLookup& lookup_in) {
  const EnvLookup lookup = lookup_in ? lookup_in : process_env();
  Rendezvous rv;
  rv.rank = env.rank;
  rv.world_size = env.world_size;
  if (env.world_size <= 1) {
    rv.host = "127.0.0.1";
    rv.port = env.master_port.value_or(0);
    rv.is_server = true;
    return rv;
  }
  // torchrun's agent already hosts a store at MASTER_ADDR:MASTER_PORT; its
  // workers are clients and keep their keys under a per-restart prefix.
  if (env.launcher == Launcher::Torchrun && lookup("TORCHELASTIC_USE_AGENT_STORE").value_or("") == "True") {
    if (!env.master_port) fail_input("torchrun set TORCHELASTIC_USE_AGENT_STORE=True but not MASTER_PORT");
    rv.host = env.master_addr;
    rv.port = *env.master_port;
    rv.is_server = false;
    rv.prefix = "/worker/attempt_" + lookup("TORCHELASTIC_RESTART_COUNT").value_or("0");
    return rv;
  }
  if (!env.master_addr.empty()) {
    rv.host = env.master_addr;
    rv.is_server = env.rank == 0;
    if (env.master_port) {
      rv.port = *env.master_port;
    } else if (env.launcher == Launcher::Slurm && !env.run_id.empty() &&
               env.run_id.find_first_not_of("0123456789") == std::string::npos) {
      // Jobs sharing a node get different ports.
      rv.port = 20000 + static_cast<int>(std::stoll(env.run_id.substr(std::max<size_t>(env.run_id.size(), 9) - 9)) % 20000);
      log::info("MASTER_PORT is not set: using port {} (from the Slurm job id {})", rv.port, env.run_id);
    } else {
      rv.port = 29500;
      log::info("MASTER_PORT is not set: using {}", rv.port);
    }
    return rv;
  }
  if (is_mpi_launcher(env.launcher)) {
    rv.share_over_mpi = true;
    // Loopback only when the launcher said every rank is on this node; a
    // guess of one node would leave other nodes dialling their own loopback.
    rv.host = env.num_nodes <= 1 && env.nodes_known ? "127.0.0.1" : this_host();
    rv.is_server = env.rank == 0;
    rv.port = 0;
    return rv;
  }
  fail_input("{} ranks on GPUs need a rendezvous address: set MASTER_ADDR and MASTER_PORT (rank 0's host and a free "
             "port), or launch with torchrun, mpirun or `trlx launch`",
             env.world_size);
}

std::unique_ptr<Communicator> make_communicator(const LauncherEnv& env, torch::Device device,
                                                std::chrono::seconds timeout, bool nccl_at_world_1) {
  if (env.world_size <= 1 && !(nccl_at_world_1 && device.is_cuda())) return make_single_communicator(device);
  if (device.is_cuda()) {
    if (!nccl_available())
      fail_input("{} ranks on {}: GPU ranks talk through NCCL, and this trlx was built against a LibTorch without "
                 "it (a CPU-only LibTorch, or NCCL's headers not found when it was configured: the configure line "
                 "'NCCL communicator' says why); rebuild against the PyTorch wheel with its nvidia-nccl package, "
                 "or with the CUDA toolkit, or train on CPU",
                 env.world_size, device.str());
    if (!device.has_index()) device = torch::Device(torch::kCUDA, static_cast<c10::DeviceIndex>(env.local_rank));
    auto comm = make_nccl_communicator(rendezvous_for(env), device, timeout);
    log::debug("communicator: nccl on {}, rank {} of {}, timeout {} s", device.str(), env.rank, env.world_size,
               timeout.count());
    return comm;
  }
  const std::string how = fmt::format("`mpirun -np {0} trlx ...` or `trlx launch --nproc_per_node {0} -- trlx ...`",
                                      env.world_size);
  if (!mpi_available())
    fail_input("{} ranks on CPU talk through MPI, and this trlx was built without it; rebuild with libopenmpi-dev "
               "installed, or train on GPUs",
               env.world_size);
  if (env.launcher == Launcher::Torchrun)
    fail_input("{} ranks on CPU were started by torchrun, but CPU ranks talk through MPI (the LibTorch trlx uses has "
               "no Gloo, torchrun's CPU backend): launch with {}",
               env.world_size, how);
  if (!is_mpi_launcher(env.launcher) && env.launcher != Launcher::Slurm)
    fail_input("{} ranks on CPU need an MPI launcher: launch with {}", env.world_size, how);
  auto comm = make_mpi_communicator(timeout);
  if (comm->world_size() != env.world_size)
    fail_input("{} started {} ranks but MPI sees {}: this MPI library cannot talk to that launcher (under srun try "
               "`srun --mpi=pmix`), or launch with {}",
               launcher_name(env.launcher), env.world_size, comm->world_size(), how);
  if (comm->rank() != env.rank)
    fail_input("{} says this is rank {} but MPI says rank {}", launcher_name(env.launcher), env.rank, comm->rank());
  log::debug("communicator: mpi, rank {} of {}, timeout {} s", env.rank, env.world_size, timeout.count());
  return comm;
}

}  // namespace trlx::dist
