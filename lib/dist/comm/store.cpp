// Rendezvous through a c10d TCPStore (in every LibTorch, with or without NCCL).
#include "dist/comm/store.hpp"

#include <algorithm>
#include <cstdlib>

#include <c10/util/Logging.h>
#include <torch/csrc/distributed/c10d/PrefixStore.hpp>
#include <torch/csrc/distributed/c10d/TCPStore.hpp>

#include "dist/comm/comm_common.hpp"

namespace trlx::dist::detail {

c10::intrusive_ptr<c10d::Store> connect_store(const Rendezvous& rv, std::chrono::seconds timeout) {
  const QuietC10Logs quiet;
  auto make = [&](const std::string& host, int port, bool server) {
    c10d::TCPStoreOptions o;
    o.port = static_cast<uint16_t>(port);
    o.isServer = server;
    if (server) o.numWorkers = static_cast<size_t>(rv.world_size);
    o.waitWorkers = false;
    o.timeout = std::chrono::duration_cast<std::chrono::milliseconds>(timeout);
    auto failed = [&](const std::string& why) {
      return CommError(fmt::format("rank {} of {}: the rendezvous store at {}:{} ({}) failed: {}", rv.rank,
                                   rv.world_size, host, port, server ? "hosted by this rank" : "client", why));
    };
    try {
      return c10::make_intrusive<c10d::TCPStore>(host, o);
    } catch (const c10::Error& e) {
      throw failed(e.what_without_backtrace());  // c10's what() appends a stack trace
    } catch (const std::exception& e) {
      throw failed(e.what());
    }
  };
  c10::intrusive_ptr<c10d::TCPStore> store;
  if (rv.share_over_mpi) {
    // Rank 0 hosts the store on a free port; MPI tells the other ranks where.
    std::string where;
    if (rv.rank == 0) {
      store = make(rv.host, 0, true);
      where = fmt::format("{}:{}", rv.host, store->getPort());
    }
    where = mpi_broadcast_string(where, timeout);
    if (rv.rank != 0) {
      const auto colon = where.rfind(':');
      store = make(where.substr(0, colon), std::stoi(where.substr(colon + 1)), false);
    }
  } else {
    store = make(rv.host, rv.port, rv.is_server);
  }
  if (rv.prefix.empty()) return store;
  return c10::make_intrusive<c10d::PrefixStore>(rv.prefix, store);
}

QuietC10Logs::QuietC10Logs()
    : saved_(FLAGS_caffe2_log_level), quiet_(std::getenv("TORCH_CPP_LOG_LEVEL") == nullptr) {
  if (quiet_) FLAGS_caffe2_log_level = std::max(saved_, 3);  // 3: fatal only
}

QuietC10Logs::~QuietC10Logs() {
  if (quiet_) FLAGS_caffe2_log_level = saved_;
}

}  // namespace trlx::dist::detail
