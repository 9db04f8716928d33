#pragma once
// The communicator of the processes mpirun started, one per process and
// shared by every test case of the executable (MPI starts once).
#include <chrono>
#include <memory>

#include "dist/comm/make_communicator.hpp"
#include "dist/env/launcher_env.hpp"

namespace trlx::dist::test {

inline Communicator& mpi_comm() {
  static std::unique_ptr<Communicator> comm =
      make_communicator(detect_launcher(), torch::kCPU, std::chrono::seconds(20));
  return *comm;
}

}  // namespace trlx::dist::test
