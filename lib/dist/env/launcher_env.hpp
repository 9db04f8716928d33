#pragma once
// The one place that reads what a launcher (torchrun, mpirun, srun, trlx
// launch) tells a process about its place in the job.
#include <functional>
#include <map>
#include <optional>
#include <string>

namespace trlx::dist {

enum class Launcher { None, Torchrun, OpenMPI, MPICH, MVAPICH, Slurm };
std::string launcher_name(Launcher l);

struct LauncherEnv {
  Launcher launcher = Launcher::None;
  int rank = 0;
  int world_size = 1;
  int local_rank = 0;
  int local_world_size = 1;
  int num_nodes = 1;
  int node_rank = 0;
  // The launcher said how many nodes (or ranks per node) there are; when
  // false, num_nodes is a guess and the job may span nodes.
  bool nodes_known = false;
  std::string master_addr;            // empty when unknown (MPI rendezvous needs none)
  std::optional<int> master_port;
  bool torchelastic = false;          // a torchrun agent store is available
  std::string run_id;                 // TORCHELASTIC_RUN_ID, SLURM_JOB_ID
  bool is_main() const { return rank == 0; }
  bool distributed() const { return world_size > 1; }
};

using EnvLookup = std::function<std::optional<std::string>(const std::string&)>;

// Reads the process environment.
LauncherEnv detect_launcher();
// Reads from `lookup` (tests pass a map). Throws InputError on contradictory
// or malformed values.
LauncherEnv detect_launcher(const EnvLookup& lookup);
EnvLookup map_lookup(const std::map<std::string, std::string>& env);

// The GPU a process computes on, of the `visible` ones it is shown: its
// local rank's, or the only one where each process sees one GPU of its own
// (CUDA_VISIBLE_DEVICES set per process, srun --gpus-per-task=1). Throws
// InputError where a local rank has no GPU of its number, as when more
// processes share a node than it shows GPUs: two would share one, which
// NCCL refuses at its first collective ("Duplicate GPU detected").
int gpu_for_process(const LauncherEnv& env, int visible);

// First host of a Slurm node list: "gpu[003-010,020],cpu01" -> "gpu003".
std::string first_slurm_host(const std::string& nodelist);

}  // namespace trlx::dist
