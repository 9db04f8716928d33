// Tests: what each launcher's environment tells a process (rank, world, local rank, store).
#include <catch2/catch.hpp>

#include "core/error.hpp"
#include "dist/env/launcher_env.hpp"

using namespace trlx;
using namespace trlx::dist;
using Catch::Matchers::Contains;
using Env = std::map<std::string, std::string>;

namespace {
LauncherEnv detect(const Env& e) { return detect_launcher(map_lookup(e)); }
std::string error_of(const Env& e) {
  try {
    detect(e);
  } catch (const InputError& err) {
    return err.what();
  }
  FAIL("expected an InputError");
  return "";
}
}  // namespace

TEST_CASE("no launcher: one process", "[launcher]") {
  auto e = detect({{"HOME", "/root"}});
  CHECK(e.launcher == Launcher::None);
  CHECK(e.world_size == 1);
  CHECK(e.rank == 0);
  CHECK_FALSE(e.distributed());
}

TEST_CASE("torchrun", "[launcher]") {
  auto e = detect({{"RANK", "5"}, {"WORLD_SIZE", "8"}, {"LOCAL_RANK", "1"}, {"LOCAL_WORLD_SIZE", "4"},
                   {"GROUP_RANK", "1"}, {"MASTER_ADDR", "node0"}, {"MASTER_PORT", "29500"},
                   {"TORCHELASTIC_RUN_ID", "abc"}, {"TORCHELASTIC_RESTART_COUNT", "0"},
                   // a Slurm allocation around torchrun must not win
                   {"SLURM_PROCID", "0"}, {"SLURM_STEP_ID", "0"}, {"SLURM_NTASKS", "2"}});
  CHECK(e.launcher == Launcher::Torchrun);
  CHECK(e.rank == 5);
  CHECK(e.world_size == 8);
  CHECK(e.local_rank == 1);
  CHECK(e.local_world_size == 4);
  CHECK(e.num_nodes == 2);
  CHECK(e.node_rank == 1);
  CHECK(e.master_addr == "node0");
  CHECK(e.master_port == 29500);
  CHECK(e.torchelastic);
  CHECK(e.run_id == "abc");
}

TEST_CASE("Open MPI", "[launcher]") {
  auto e = detect({{"OMPI_COMM_WORLD_RANK", "3"}, {"OMPI_COMM_WORLD_SIZE", "4"}, {"OMPI_COMM_WORLD_LOCAL_RANK", "1"},
                   {"OMPI_COMM_WORLD_LOCAL_SIZE", "2"}, {"OMPI_COMM_WORLD_NODE_RANK", "1"}});
  CHECK(e.launcher == Launcher::OpenMPI);
  CHECK(e.rank == 3);
  CHECK(e.world_size == 4);
  CHECK(e.local_rank == 1);
  CHECK(e.local_world_size == 2);
  CHECK(e.num_nodes == 2);
  CHECK(e.node_rank == 1);
  CHECK(e.master_addr.empty());
  // Open MPI's NODE_RANK counts processes on the node (as mpirun sets it for
  // rank 2 of 3 on one node): not the node's index.
  e = detect({{"OMPI_COMM_WORLD_RANK", "2"}, {"OMPI_COMM_WORLD_SIZE", "3"}, {"OMPI_COMM_WORLD_LOCAL_RANK", "2"},
              {"OMPI_COMM_WORLD_LOCAL_SIZE", "3"}, {"OMPI_COMM_WORLD_NODE_RANK", "2"}});
  CHECK(e.num_nodes == 1);
  CHECK(e.node_rank == 0);
}

TEST_CASE("MPICH / Intel MPI", "[launcher]") {
  auto e = detect({{"PMI_RANK", "2"}, {"PMI_SIZE", "3"}, {"MPI_LOCALRANKID", "2"}, {"MPI_LOCALNRANKS", "3"}});
  CHECK(e.launcher == Launcher::MPICH);
  CHECK(e.rank == 2);
  CHECK(e.local_rank == 2);
  // Without local variables on one node the local rank is the rank.
  e = detect({{"PMI_RANK", "1"}, {"PMI_SIZE", "2"}});
  CHECK(e.local_rank == 1);
  CHECK(e.local_world_size == 2);
}

TEST_CASE("srun with a PMI plugin: Slurm's variables win over PMI's", "[launcher]") {
  // srun --mpi=pmi2 sets PMI_RANK/PMI_SIZE for the same tasks, but no local rank.
  auto e = detect({{"PMI_RANK", "5"}, {"PMI_SIZE", "8"}, {"SLURM_PROCID", "5"}, {"SLURM_NTASKS", "8"},
                   {"SLURM_STEP_ID", "0"}, {"SLURM_LOCALID", "1"}, {"SLURM_NODEID", "1"},
                   {"SLURM_STEP_NUM_NODES", "2"}, {"SLURM_STEP_TASKS_PER_NODE", "4(x2)"},
                   {"SLURM_STEP_NODELIST", "gpu[01-02]"}, {"SLURM_JOB_ID", "9"}});
  CHECK(e.launcher == Launcher::Slurm);
  CHECK(e.rank == 5);
  CHECK(e.local_rank == 1);
  CHECK(e.local_world_size == 4);
  CHECK(e.num_nodes == 2);
  CHECK(e.master_addr == "gpu01");
  // mpiexec inside an allocation starts one srun task per node: Slurm's
  // numbers are the nodes', and the MPI launcher's own variables win.
  e = detect({{"PMI_RANK", "5"}, {"PMI_SIZE", "8"}, {"MPI_LOCALRANKID", "1"}, {"MPI_LOCALNRANKS", "4"},
              {"SLURM_PROCID", "1"}, {"SLURM_NTASKS", "2"}, {"SLURM_STEP_ID", "0"}, {"SLURM_LOCALID", "0"}});
  CHECK(e.launcher == Launcher::MPICH);
  CHECK(e.rank == 5);
  CHECK(e.local_rank == 1);
  CHECK(e.num_nodes == 2);
}

TEST_CASE("PMI's local rank when Hydra's is absent, and whether the node count is known", "[launcher]") {
  auto e = detect({{"PMI_RANK", "3"}, {"PMI_SIZE", "4"}, {"PMI_LOCAL_RANK", "1"}, {"PMI_LOCAL_SIZE", "2"}});
  CHECK(e.launcher == Launcher::MPICH);
  CHECK(e.local_rank == 1);
  CHECK(e.local_world_size == 2);
  CHECK(e.num_nodes == 2);
  CHECK(e.nodes_known);
  // Nothing said about nodes: one node is a guess, not a fact.
  e = detect({{"PMI_RANK", "1"}, {"PMI_SIZE", "2"}});
  CHECK(e.num_nodes == 1);
  CHECK_FALSE(e.nodes_known);
  CHECK(detect({{"OMPI_COMM_WORLD_RANK", "1"}, {"OMPI_COMM_WORLD_SIZE", "2"}, {"OMPI_COMM_WORLD_LOCAL_RANK", "1"},
                {"OMPI_COMM_WORLD_LOCAL_SIZE", "2"}}).nodes_known);
}

TEST_CASE("MVAPICH", "[launcher]") {
  auto e = detect({{"MV2_COMM_WORLD_RANK", "1"}, {"MV2_COMM_WORLD_SIZE", "2"}, {"MV2_COMM_WORLD_LOCAL_RANK", "1"},
                   {"MV2_COMM_WORLD_LOCAL_SIZE", "2"}});
  CHECK(e.launcher == Launcher::MVAPICH);
  CHECK(e.rank == 1);
  CHECK(e.local_rank == 1);
}

TEST_CASE("Slurm srun: master is the first host of the node list", "[launcher]") {
  auto e = detect({{"SLURM_PROCID", "6"}, {"SLURM_NTASKS", "8"}, {"SLURM_LOCALID", "2"}, {"SLURM_STEP_ID", "0"},
                   {"SLURM_NODEID", "1"}, {"SLURM_NNODES", "2"}, {"SLURM_STEP_TASKS_PER_NODE", "4(x2)"},
                   {"SLURM_JOB_NODELIST", "gpu[007-008]"}, {"SLURM_JOB_ID", "1234"}});
  CHECK(e.launcher == Launcher::Slurm);
  CHECK(e.rank == 6);
  CHECK(e.world_size == 8);
  CHECK(e.local_rank == 2);
  CHECK(e.local_world_size == 4);
  CHECK(e.num_nodes == 2);
  CHECK(e.node_rank == 1);
  CHECK(e.master_addr == "gpu007");
  CHECK(e.run_id == "1234");
  // A batch script (no job step) is not an srun task.
  CHECK(detect({{"SLURM_PROCID", "0"}, {"SLURM_NTASKS", "8"}}).launcher == Launcher::None);
}

TEST_CASE("Slurm node lists", "[launcher]") {
  CHECK(first_slurm_host("node01") == "node01");
  CHECK(first_slurm_host("node01,node02") == "node01");
  CHECK(first_slurm_host("gpu[003-010,020],cpu01") == "gpu003");
  CHECK(first_slurm_host("rack[2,5]-n[01-04]") == "rack2-n[01-04]");
  CHECK(first_slurm_host("a[09-10]b") == "a09b");
}

TEST_CASE("contradictory launcher values are clear errors", "[launcher]") {
  auto msg = error_of({{"RANK", "4"}, {"WORLD_SIZE", "4"}, {"LOCAL_RANK", "0"}, {"MASTER_ADDR", "h"}});
  CHECK_THAT(msg, Contains("RANK=4 but WORLD_SIZE=4"));
  CHECK_THAT(msg, Contains("smaller than the world size"));
  msg = error_of({{"RANK", "1"}, {"WORLD_SIZE", "2"}, {"MASTER_ADDR", "h"}});
  CHECK_THAT(msg, Contains("LOCAL_RANK is not"));
  msg = error_of({{"SLURM_PROCID", "3"}, {"SLURM_NTASKS", "4"}, {"SLURM_STEP_ID", "0"}, {"SLURM_NNODES", "2"}});
  CHECK_THAT(msg, Contains("2 nodes but gives no local rank"));
  msg = error_of({{"OMPI_COMM_WORLD_RANK", "x"}, {"OMPI_COMM_WORLD_SIZE", "2"}});
  CHECK_THAT(msg, Contains("OMPI_COMM_WORLD_RANK=x is not a non-negative integer"));
  msg = error_of({{"PMI_RANK", "0"}});
  CHECK_THAT(msg, Contains("PMI_SIZE is not"));
  msg = error_of({{"RANK", "0"}, {"WORLD_SIZE", "2"}, {"LOCAL_RANK", "3"}, {"LOCAL_WORLD_SIZE", "2"}, {"MASTER_ADDR", "h"}});
  CHECK_THAT(msg, Contains("local rank 3 is not smaller than the local world size 2"));
  msg = error_of({{"RANK", "0"}, {"WORLD_SIZE", "2"}, {"LOCAL_RANK", "0"}});
  CHECK_THAT(msg, Contains("not MASTER_ADDR"));
  msg = error_of({{"RANK", "0"}, {"WORLD_SIZE", "2"}, {"LOCAL_RANK", "0"}, {"MASTER_ADDR", "h"}, {"MASTER_PORT", "70000"}});
  CHECK_THAT(msg, Contains("MASTER_PORT=70000"));
}

TEST_CASE("each process computes on its local rank's GPU, or on the one GPU it is shown", "[launcher]") {
  auto e = detect({{"RANK", "6"}, {"WORLD_SIZE", "8"}, {"LOCAL_RANK", "2"}, {"LOCAL_WORLD_SIZE", "4"},
                   {"MASTER_ADDR", "node0"}, {"MASTER_PORT", "29500"}});
  CHECK(gpu_for_process(e, 4) == 2);
  CHECK(gpu_for_process(e, 8) == 2);
  CHECK(gpu_for_process(e, 1) == 0);  // CUDA_VISIBLE_DEVICES per process
  // More processes on the node than GPUs it shows: two would share one.
  try {
    gpu_for_process(e, 2);
    FAIL("expected an InputError");
  } catch (const InputError& err) {
    CHECK_THAT(err.what(), Contains("4 processes run on this node (local rank 2), but it shows each of them 2 GPUs"));
    CHECK_THAT(err.what(), Contains("--nproc_per_node 2"));
  }
}
