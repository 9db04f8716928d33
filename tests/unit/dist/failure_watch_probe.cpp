// A rank of tests/unit/dist/failure_watch_test.sh: meets the others through a
// rendezvous store (rank 0 hosts it on a free port and writes the port to a
// file) and runs the heartbeat watch the NCCL communicator runs.
//
//   failure_watch_probe <rank> <world> <port file> run <seconds>
//       runs for <seconds>; exits 3 as soon as its watch reports a failure
//   failure_watch_probe <rank> <world> <port file> fail <seconds>
//       announces a failure of its own after <seconds> and exits 1
//
// It prints "rank R watching" once the watch runs and "rank R saw: <message>"
// when the watch fires. TRLX_HEARTBEAT_TIMEOUT sets the silence.
#include <atomic>
#include <chrono>
#include <cstdio>
#include <filesystem>
#include <fstream>
#include <string>
#include <thread>

#include <torch/csrc/distributed/c10d/TCPStore.hpp>

#include "dist/comm/failure_watch.hpp"
#include "dist/comm/store.hpp"

namespace fs = std::filesystem;
namespace watch_ns = trlx::dist::detail;
using trlx::dist::Rendezvous;

int main(int argc, char** argv) {
  if (argc != 6) {
    std::fprintf(stderr, "usage: %s <rank> <world> <port file> run|fail <seconds>\n", argv[0]);
    return 2;
  }
  const int rank = std::stoi(argv[1]);
  const int world = std::stoi(argv[2]);
  const fs::path port_file = argv[3];
  const std::string mode = argv[4];
  const auto seconds = std::chrono::milliseconds(static_cast<int64_t>(std::stod(argv[5]) * 1000));

  Rendezvous rv;
  rv.host = "127.0.0.1";
  rv.rank = rank;
  rv.world_size = world;
  if (rank == 0) {
    rv.port = 0;
    rv.is_server = true;
  } else {
    for (int i = 0; i < 200 && !fs::exists(port_file); ++i) std::this_thread::sleep_for(std::chrono::milliseconds(50));
    std::ifstream(port_file) >> rv.port;
  }
  auto store = watch_ns::connect_store(rv, std::chrono::seconds(10));
  if (rank == 0) {
    const fs::path tmp = port_file.string() + ".tmp";
    std::ofstream(tmp) << dynamic_cast<c10d::TCPStore&>(*store).getPort() << "\n";
    fs::rename(tmp, port_file);
  }

  std::atomic<bool> fired{false};
  watch_ns::FailureWatch watch(store, rank, world, [&](const std::string& message, bool store_lost) {
    std::printf("rank %d saw: %s%s\n", rank, message.c_str(), store_lost ? " (store lost)" : "");
    std::fflush(stdout);
    fired = true;
  });
  std::printf("rank %d watching\n", rank);
  std::fflush(stdout);
  const auto end = std::chrono::steady_clock::now() + seconds;
  while (std::chrono::steady_clock::now() < end) {
    if (fired) return 3;  // as a rank whose collectives were aborted ends
    std::this_thread::sleep_for(std::chrono::milliseconds(20));
  }
  if (mode == "fail") {
    watch.announce_failure("the probe was told to fail");
    return 1;
  }
  std::printf("rank %d saw no failure\n", rank);
  return 0;
}
