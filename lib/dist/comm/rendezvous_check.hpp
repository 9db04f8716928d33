#pragma once
// `trlx env --rendezvous`: every rank of a launch meets at the store GPU ranks
// would meet at (MASTER_ADDR:MASTER_PORT, torchrun's agent store, or rank 0's
// port shared over MPI) and tells rank 0 who and where it is, so a cluster
// job can check its addresses, ports and rank layout before it asks for GPUs.
#include <chrono>
#include <string>
#include <vector>

#include "dist/env/launcher_env.hpp"

namespace trlx::dist {

struct RendezvousMember {
  int rank = 0;
  int world_size = 1;
  int local_rank = 0;
  int local_world_size = 1;
  int node_rank = 0;  // -1: the launcher does not say (MPI launchers)
  std::string host;  // gethostname()
  long pid = 0;
};

struct RendezvousCheck {
  std::string where;                      // the store's address, as the ranks dialled it
  double seconds = 0;                     // from this rank's start to everyone met
  std::vector<RendezvousMember> members;  // by rank, on rank 0; this rank alone elsewhere
  std::vector<std::string> problems;      // rank 0: layouts that cannot be right
};

// Meets the other ranks within `timeout`. Throws CommError naming the address
// when the store cannot be reached, and, on rank 0, the ranks that did not
// arrive; InputError when the environment gives no way to meet.
RendezvousCheck check_rendezvous(const LauncherEnv& env, std::chrono::seconds timeout);

// What rank 0 can tell from the members alone: ranks disagreeing on the world
// size, a host whose local ranks are not 0..n-1 of one local world size, two
// hosts with the same node rank or one host with two (node ranks of -1 are
// not checked).
std::vector<std::string> rendezvous_problems(const std::vector<RendezvousMember>& members, int world_size);

}  // namespace trlx::dist
