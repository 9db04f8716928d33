// What a launcher (torchrun, mpirun, srun, trlx launch) tells a process about its place in the job.
#include "dist/env/launcher_env.hpp"

#include <charconv>
#include <cstdlib>

#include "core/error.hpp"

namespace trlx::dist {

std::string launcher_name(Launcher l) {
  switch (l) {
    case Launcher::None: return "none (single process)";
    case Launcher::Torchrun: return "torchrun";
    case Launcher::OpenMPI: return "Open MPI (mpirun)";
    case Launcher::MPICH: return "MPICH / Intel MPI (mpiexec)";
    case Launcher::MVAPICH: return "MVAPICH";
    case Launcher::Slurm: return "Slurm (srun)";
  }
  return "?";
}

EnvLookup map_lookup(const std::map<std::string, std::string>& env) {
  return [env](const std::string& k) -> std::optional<std::string> {
    auto it = env.find(k);
    if (it == env.end()) return std::nullopt;
    return it->second;
  };
}

namespace {

class Reader {
 public:
  explicit Reader(const EnvLookup& lookup) : lookup_(lookup) {}
  bool has(const std::string& k) const { return lookup_(k).has_value(); }
  std::optional<std::string> str(const std::string& k) const { return lookup_(k); }
  // An integer variable; malformed values are an error naming the variable.
  std::optional<int> num(const std::string& k) const {
    auto v = lookup_(k);
    if (!v) return std::nullopt;
    int out = 0;
    const char* b = v->data();
    const char* e = b + v->size();
    auto [p, ec] = std::from_chars(b, e, out);
    if (ec != std::errc() || p != e || out < 0)
      fail_input("environment variable {}={} is not a non-negative integer", k, *v);
    return out;
  }

 private:
  const EnvLookup& lookup_;
};

// Slurm task counts per node: "4(x2),3" -> counts of each node.
int slurm_first_count(const std::string& spec) {
  int out = 0;
  std::from_chars(spec.data(), spec.data() + spec.size(), out);
  return out;
}

// The variables an MPI launcher sets for each process.
struct MpiVars {
  Launcher launcher;
  const char *rank, *size, *local_rank, *local_size, *node_rank;
};

const MpiVars* mpi_launcher(const Reader& env) {
  static const MpiVars table[] = {
      // OMPI_COMM_WORLD_NODE_RANK is not the node's index: it counts the
      // processes of all jobs on the node (rank 2 of one node gets 2).
      {Launcher::OpenMPI, "OMPI_COMM_WORLD_RANK", "OMPI_COMM_WORLD_SIZE", "OMPI_COMM_WORLD_LOCAL_RANK",
       "OMPI_COMM_WORLD_LOCAL_SIZE", nullptr},
      // Hydra sets MPI_LOCALRANKID; PMI servers (srun --mpi=pmi2, Intel MPI) PMI_LOCAL_RANK.
      {Launcher::MPICH, "PMI_RANK", "PMI_SIZE", "MPI_LOCALRANKID", "MPI_LOCALNRANKS", nullptr},
      {Launcher::MVAPICH, "MV2_COMM_WORLD_RANK", "MV2_COMM_WORLD_SIZE", "MV2_COMM_WORLD_LOCAL_RANK",
       "MV2_COMM_WORLD_LOCAL_SIZE", nullptr},
  };
  for (const auto& m : table)
    if (env.has(m.rank)) return &m;
  return nullptr;
}

}  // namespace

std::string first_slurm_host(const std::string& nodelist) {
  // The first top-level entry ends at a comma outside brackets.
  std::string entry;
  int depth = 0;
  for (char c : nodelist) {
    if (c == '[') ++depth;
    if (c == ']') --depth;
    if (c == ',' && depth == 0) break;
    entry += c;
  }
  const auto open = entry.find('[');
  if (open == std::string::npos) return entry;
  const auto close = entry.find(']', open);
  if (close == std::string::npos) fail_input("SLURM_JOB_NODELIST={} is malformed (unclosed '[')", nodelist);
  std::string inside = entry.substr(open + 1, close - open - 1);
  std::string first = inside.substr(0, inside.find_first_of(",-"));
  return entry.substr(0, open) + first + entry.substr(close + 1);
}

LauncherEnv detect_launcher() {
  return detect_launcher([](const std::string& k) -> std::optional<std::string> {
    const char* v = std::getenv(k.c_str());
    if (!v) return std::nullopt;
    return std::string(v);
  });
}

LauncherEnv detect_launcher(const EnvLookup& lookup) {
  Reader env(lookup);
  LauncherEnv out;
  std::optional<int> rank, world, local_rank, local_world, nodes, node_rank;
  std::string rank_var, world_var;

  // Most specific first: torchrun may run inside a Slurm allocation, mpirun
  // inside one too; the launcher that started this process sets its own
  // variables on top of the allocation's.
  // srun with a PMI plugin (--mpi=pmi2) also sets PMI_RANK/PMI_SIZE, without
  // a local rank; there Slurm's variables describe the same tasks and say
  // more. An MPI launcher running inside an allocation starts its processes
  // through one srun task per node, so there Slurm's numbers differ from its own.
  const MpiVars* mpi = mpi_launcher(env);
  const bool slurm_step = env.has("SLURM_PROCID") && env.has("SLURM_STEP_ID");
  if (mpi && mpi->launcher == Launcher::MPICH && slurm_step && env.num("SLURM_PROCID") == env.num(mpi->rank) &&
      env.num("SLURM_NTASKS") == env.num(mpi->size))
    mpi = nullptr;
  if (env.has("RANK") && env.has("WORLD_SIZE")) {
    out.launcher = Launcher::Torchrun;
    rank = env.num("RANK"), world = env.num("WORLD_SIZE");
    rank_var = "RANK", world_var = "WORLD_SIZE";
    local_rank = env.num("LOCAL_RANK");
    local_world = env.num("LOCAL_WORLD_SIZE");
    node_rank = env.num("GROUP_RANK");
    if (world && local_world && *local_world > 0) nodes = (*world + *local_world - 1) / *local_world;
    out.torchelastic = env.has("TORCHELASTIC_RUN_ID") || env.has("TORCHELASTIC_RESTART_COUNT");
    out.run_id = env.str("TORCHELASTIC_RUN_ID").value_or("");
    if (!local_rank) fail_input("RANK and WORLD_SIZE are set but LOCAL_RANK is not; launch with torchrun or set LOCAL_RANK");
  } else if (const MpiVars* m = mpi) {
    // MPI launchers differ only in their variables' names.
    out.launcher = m->launcher;
    rank = env.num(m->rank), world = env.num(m->size);
    rank_var = m->rank, world_var = m->size;
    local_rank = env.num(m->local_rank);
    local_world = env.num(m->local_size);
    if (m->launcher == Launcher::MPICH) {
      if (!local_rank) local_rank = env.num("PMI_LOCAL_RANK");
      if (!local_world) local_world = env.num("PMI_LOCAL_SIZE");
    }
    if (m->node_rank) node_rank = env.num(m->node_rank);
  } else if (slurm_step) {
    // SLURM_PROCID alone is also set in a batch script; a task started by
    // srun has a job step.
    out.launcher = Launcher::Slurm;
    rank = env.num("SLURM_PROCID"), world = env.num("SLURM_NTASKS");
    rank_var = "SLURM_PROCID", world_var = "SLURM_NTASKS";
    local_rank = env.num("SLURM_LOCALID");
    if (auto per_node = env.str("SLURM_STEP_TASKS_PER_NODE")) local_world = slurm_first_count(*per_node);
    else if (auto per_node2 = env.str("SLURM_TASKS_PER_NODE")) local_world = slurm_first_count(*per_node2);
    node_rank = env.num("SLURM_NODEID");
    nodes = env.num("SLURM_STEP_NUM_NODES");
    if (!nodes) nodes = env.num("SLURM_NNODES");
    out.run_id = env.str("SLURM_JOB_ID").value_or("");
  } else {
    return out;  // a single process
  }

  if (!world)
    fail_input("{} is set by {} but {} is not; the launcher environment is incomplete", rank_var,
               launcher_name(out.launcher), world_var);
  if (*world == 0) fail_input("{}=0: a job has at least one process", world_var);
  if (*rank >= *world)
    fail_input("{}={} but {}={}: a rank must be smaller than the world size", rank_var, *rank, world_var, *world);
  out.nodes_known = nodes.has_value() || local_world.has_value();
  if (!nodes && local_world && *local_world > 0 && *local_world < *world)
    nodes = (*world + *local_world - 1) / *local_world;
  if (!nodes && out.launcher == Launcher::Slurm) nodes = 1;
  const bool multi_node = nodes && *nodes > 1;
  if (!local_rank) {
    if (multi_node)
      fail_input("{} runs {} processes on {} nodes but gives no local rank; without it each node "
                 "cannot pick its GPU. Set LOCAL_RANK (or use a launcher that sets it)",
                 launcher_name(out.launcher), *world, *nodes);
    // One node: the local rank is the rank.
    local_rank = rank;
    if (!local_world) local_world = world;
  }
  if (!local_world) local_world = multi_node ? std::nullopt : world;
  if (!local_world) fail_input("{}: local world size unknown on a multi-node job", launcher_name(out.launcher));
  if (*local_rank >= *local_world)
    fail_input("local rank {} is not smaller than the local world size {} ({})", *local_rank, *local_world,
               launcher_name(out.launcher));
  if (*local_world > *world)
    fail_input("local world size {} is larger than the world size {} ({})", *local_world, *world,
               launcher_name(out.launcher));

  out.rank = *rank;
  out.world_size = *world;
  out.local_rank = *local_rank;
  out.local_world_size = *local_world;
  out.num_nodes = nodes.value_or(1);
  out.node_rank = node_rank.value_or(out.local_world_size > 0 ? out.rank / out.local_world_size : 0);

  out.master_addr = env.str("MASTER_ADDR").value_or("");
  out.master_port = env.num("MASTER_PORT");
  if (out.master_addr.empty() && out.launcher == Launcher::Slurm) {
    if (auto nl = env.str("SLURM_STEP_NODELIST")) out.master_addr = first_slurm_host(*nl);
    else if (auto nl2 = env.str("SLURM_JOB_NODELIST")) out.master_addr = first_slurm_host(*nl2);
  }
  if (out.launcher == Launcher::Torchrun && out.master_addr.empty())
    fail_input("torchrun set RANK={} and WORLD_SIZE={} but not MASTER_ADDR", out.rank, out.world_size);
  if (out.master_port && (*out.master_port == 0 || *out.master_port > 65535))
    fail_input("MASTER_PORT={} is not a valid port (1-65535)", *out.master_port);
  return out;
}

int gpu_for_process(const LauncherEnv& env, int visible) {
  if (visible <= 1) return 0;
  if (env.local_rank >= visible)
    fail_input("{} processes run on this node (local rank {}), but it shows each of them {} GPUs: two would share "
               "one, which NCCL refuses. Start one process per GPU ({}), or show each process one GPU of its own "
               "(CUDA_VISIBLE_DEVICES, srun --gpus-per-task=1)",
               env.local_world_size, env.local_rank, visible,
               env.launcher == Launcher::Torchrun ? "--nproc_per_node " + std::to_string(visible)
               : env.launcher == Launcher::Slurm  ? "--ntasks-per-node " + std::to_string(visible)
                                                  : "-np " + std::to_string(visible) + " per node");
  return env.local_rank;
}

}  // namespace trlx::dist
