// Host values (counts, metrics, names) through a communicator: the one place they cross to its device.
#include "dist/comm/host_values.hpp"

#include <algorithm>

namespace trlx::dist {

namespace {
// One process with nothing to exchange; a real communicator of one rank (NCCL
// under debug_force_distributed) still runs the collective, so one GPU
// exercises the device round trip.
bool alone(const Communicator& comm) { return comm.backend() == "single"; }
}  // namespace

void all_reduce_values(Communicator& comm, std::vector<double>& values, ReduceOp op) {
  if (alone(comm) || values.empty()) return;
  auto t = comm.host_to_device(torch::tensor(values, torch::kFloat64));
  comm.all_reduce(t, op)->wait();
  auto host = comm.device_to_host(t);
  const auto* p = host.data_ptr<double>();
  std::copy(p, p + values.size(), values.begin());
}

std::vector<std::vector<int64_t>> all_gather_values(Communicator& comm, const std::vector<int64_t>& mine) {
  const int world = comm.world_size();
  if (alone(comm)) return {mine};
  const int64_t n = static_cast<int64_t>(mine.size());
  auto in = comm.host_to_device(torch::tensor(mine, torch::kInt64));
  auto out = comm.host_to_device(torch::zeros({n * world}, torch::kInt64));
  comm.all_gather(in, out)->wait();
  auto host = comm.device_to_host(out);
  const auto* p = host.data_ptr<int64_t>();
  std::vector<std::vector<int64_t>> all(static_cast<size_t>(world));
  for (int r = 0; r < world; ++r) all[static_cast<size_t>(r)].assign(p + r * n, p + (r + 1) * n);
  return all;
}

std::vector<std::vector<double>> all_gather_doubles(Communicator& comm, const std::vector<double>& mine) {
  if (alone(comm)) return {mine};
  const int world = comm.world_size();
  // Lengths first, then the values padded to the longest.
  const auto lens = all_gather_values(comm, std::vector<int64_t>{static_cast<int64_t>(mine.size())});
  int64_t longest = 0;
  for (const auto& l : lens) longest = std::max(longest, l[0]);
  std::vector<std::vector<double>> out(static_cast<size_t>(world));
  if (longest == 0) return out;
  auto padded = torch::zeros({longest}, torch::kFloat64);
  std::copy(mine.begin(), mine.end(), padded.data_ptr<double>());
  auto in = comm.host_to_device(padded);
  auto gathered = comm.host_to_device(torch::zeros({longest * world}, torch::kFloat64));
  comm.all_gather(in, gathered)->wait();
  const auto host = comm.device_to_host(gathered);
  const auto* p = host.data_ptr<double>();
  for (int r = 0; r < world; ++r)
    out[static_cast<size_t>(r)].assign(p + r * longest, p + r * longest + lens[static_cast<size_t>(r)][0]);
  return out;
}

int64_t broadcast_value(Communicator& comm, int64_t value, int root) {
  if (alone(comm)) return value;
  auto t = comm.host_to_device(torch::tensor({value}, torch::kInt64));
  comm.broadcast(t, root)->wait();
  return comm.device_to_host(t).item<int64_t>();
}

std::vector<std::string> all_gather_strings(Communicator& comm, const std::string& mine) {
  const int world = comm.world_size();
  if (alone(comm)) return {mine};
  // Lengths first, then the bytes padded to the longest.
  const auto lens = all_gather_values(comm, {static_cast<int64_t>(mine.size())});
  int64_t longest = 0;
  for (const auto& l : lens) longest = std::max(longest, l[0]);
  std::vector<int64_t> bytes(static_cast<size_t>(longest), 0);
  for (size_t i = 0; i < mine.size(); ++i) bytes[i] = static_cast<unsigned char>(mine[i]);
  const auto all = all_gather_values(comm, bytes);
  std::vector<std::string> out(static_cast<size_t>(world));
  for (int r = 0; r < world; ++r) {
    const auto& b = all[static_cast<size_t>(r)];
    auto& s = out[static_cast<size_t>(r)];
    s.resize(static_cast<size_t>(lens[static_cast<size_t>(r)][0]));
    for (size_t i = 0; i < s.size(); ++i) s[i] = static_cast<char>(b[i]);
  }
  return out;
}

}  // namespace trlx::dist
