#pragma once
// Host values (counts, metrics, fingerprints, names) through a communicator:
// the one place they cross to its device and back, so that no caller hands a
// collective a host tensor that NCCL would refuse. The single-process
// communicator returns at once, without a collective.
#include <cstdint>
#include <string>
#include <vector>

#include "dist/comm/communicator.hpp"

namespace trlx::dist {

// `values` reduced over ranks, in place.
void all_reduce_values(Communicator& comm, std::vector<double>& values, ReduceOp op);
// Every rank's `mine` (the same length on every rank), rank by rank.
std::vector<std::vector<int64_t>> all_gather_values(Communicator& comm, const std::vector<int64_t>& mine);
// Every rank's `mine` (any length, any rank's may be empty), rank by rank;
// exact (the values cross as float64).
std::vector<std::vector<double>> all_gather_doubles(Communicator& comm, const std::vector<double>& mine);
// Rank `root`'s `value` on every rank.
int64_t broadcast_value(Communicator& comm, int64_t value, int root = 0);
// Every rank's string (any length, any bytes), rank by rank.
std::vector<std::string> all_gather_strings(Communicator& comm, const std::string& mine);

}  // namespace trlx::dist
