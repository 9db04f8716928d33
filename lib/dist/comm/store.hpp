#pragma once
// The c10d TCPStore where ranks meet (NCCL's rendezvous, `trlx env
// --rendezvous`). Internal to lib/dist/comm: pulls in c10d's headers.
#include <chrono>

#include <torch/csrc/distributed/c10d/Store.hpp>

#include "dist/comm/make_communicator.hpp"

namespace trlx::dist::detail {

// c10d logs every failed connection attempt or lost peer with a LibTorch
// stack trace; trlx's CommError says what failed, once. While one of these
// lives c10's logs are quiet (fatal only), unless the user asked for them
// (TORCH_CPP_LOG_LEVEL).
class QuietC10Logs {
 public:
  QuietC10Logs();
  ~QuietC10Logs();
  QuietC10Logs(const QuietC10Logs&) = delete;
  QuietC10Logs& operator=(const QuietC10Logs&) = delete;

 private:
  int saved_;
  bool quiet_;
};

// Connects to (or, on the hosting rank, starts) the store `rv` names, waiting
// at most `timeout` for it; keys live under rv.prefix. Throws CommError
// naming the address and the rank when the store cannot be reached.
c10::intrusive_ptr<c10d::Store> connect_store(const Rendezvous& rv, std::chrono::seconds timeout);

}  // namespace trlx::dist::detail
