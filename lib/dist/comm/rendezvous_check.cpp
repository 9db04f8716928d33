// `trlx env --rendezvous`: every rank of a launch meets at the store its GPU ranks would use.
#include "dist/comm/rendezvous_check.hpp"

#include <unistd.h>

#include <map>
#include <set>
#include <thread>

#include <nlohmann/json.hpp>

#include "core/error.hpp"
#include "dist/comm/store.hpp"

namespace trlx::dist {

namespace {

std::string this_host() {
  char buf[256] = {};
  if (gethostname(buf, sizeof(buf) - 1) != 0) return "?";
  return buf;
}

std::vector<uint8_t> bytes(const std::string& s) { return {s.begin(), s.end()}; }
std::string text(const std::vector<uint8_t>& b) { return {b.begin(), b.end()}; }

std::string member_key(int rank) { return "trlx_env/member/" + std::to_string(rank); }

std::string ranks_text(const std::vector<int>& ranks) {
  std::string out;
  for (size_t i = 0; i < ranks.size(); ++i) {
    if (i == 8 && ranks.size() > 9) return out + fmt::format(" and {} more", ranks.size() - 8);
    out += (i ? ", " : "") + std::to_string(ranks[i]);
  }
  return out;
}

}  // namespace

std::vector<std::string> rendezvous_problems(const std::vector<RendezvousMember>& members, int world_size) {
  std::vector<std::string> out;
  std::map<std::string, std::vector<const RendezvousMember*>> by_host;
  for (const auto& m : members) {
    if (m.world_size != world_size)
      out.push_back(fmt::format("rank {} on {} was started with world size {}, rank 0 with {}", m.rank, m.host,
                                m.world_size, world_size));
    by_host[m.host].push_back(&m);
  }
  std::map<int, std::string> host_of_node;
  for (const auto& [host, ms] : by_host) {
    std::set<int> local_sizes, node_ranks;
    std::map<int, int> rank_of_local;
    for (const auto* m : ms) {
      local_sizes.insert(m->local_world_size);
      node_ranks.insert(m->node_rank);
      auto [it, fresh] = rank_of_local.emplace(m->local_rank, m->rank);
      if (!fresh)
        out.push_back(fmt::format("ranks {} and {} on {} both have local rank {}: they would take the same GPU",
                                  it->second, m->rank, host, m->local_rank));
    }
    if (local_sizes.size() > 1) {
      out.push_back(fmt::format("the ranks on {} disagree on the local world size", host));
    } else if (static_cast<int>(ms.size()) != *local_sizes.begin()) {
      out.push_back(fmt::format("{} runs {} rank(s) but they were told the local world size is {}", host, ms.size(),
                                *local_sizes.begin()));
    }
    if (node_ranks.count(-1)) continue;  // the launcher gives no node rank
    if (node_ranks.size() > 1) {
      out.push_back(fmt::format("the ranks on {} disagree on their node rank", host));
    } else {
      auto [it, fresh] = host_of_node.emplace(*node_ranks.begin(), host);
      if (!fresh)
        out.push_back(fmt::format("{} and {} both say they are node {}: two nodes with the same host name, or a "
                                  "node rank given twice",
                                  it->second, host, *node_ranks.begin()));
    }
  }
  return out;
}

RendezvousCheck check_rendezvous(const LauncherEnv& env, std::chrono::seconds timeout) {
  const auto start = std::chrono::steady_clock::now();
  RendezvousMember self;
  self.rank = env.rank;
  self.world_size = env.world_size;
  self.local_rank = env.local_rank;
  self.local_world_size = env.local_world_size;
  // Only torchrun (GROUP_RANK) and srun (SLURM_NODEID) say which node this is.
  const bool node_known = env.launcher == Launcher::Torchrun || env.launcher == Launcher::Slurm;
  self.node_rank = node_known ? env.node_rank : -1;
  self.host = this_host();
  self.pid = static_cast<long>(getpid());

  RendezvousCheck out;
  const Rendezvous rv = rendezvous_for(env);
  out.where = rv.share_over_mpi ? rv.host + " (rank 0's host; the port is shared over MPI)"
                                : fmt::format("{}:{}", rv.host, rv.port);
  if (env.world_size <= 1) {
    out.where = "(one process: nothing to meet)";
    out.members.push_back(self);
    return out;
  }
  const detail::QuietC10Logs quiet;
  auto store = detail::connect_store(rv, timeout);
  const auto deadline = start + timeout;
  const nlohmann::json payload = {{"rank", self.rank},
                                  {"world_size", self.world_size},
                                  {"local_rank", self.local_rank},
                                  {"local_world_size", self.local_world_size},
                                  {"node_rank", self.node_rank},
                                  {"host", self.host},
                                  {"pid", self.pid}};
  store->set(member_key(self.rank), bytes(payload.dump()));
  if (env.rank != 0) {
    // Stay until rank 0 has read every member, then say so: rank 0 hosts
    // the store and keeps it up until every rank has left.
    try {
      const auto left = std::chrono::duration_cast<std::chrono::milliseconds>(deadline - std::chrono::steady_clock::now());
      store->wait({"trlx_env/read"}, std::max(left, std::chrono::milliseconds(1)));
    } catch (const c10::Error& e) {
      throw CommError(fmt::format("rank {} of {} reached the store at {} but rank 0 did not confirm within {} s: {}",
                                  env.rank, env.world_size, out.where, timeout.count(), e.what_without_backtrace()));
    }
    store->add("trlx_env/left", 1);
    out.members.push_back(self);
    out.seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
    return out;
  }
  // Rank 0: wait for every member, then say who is missing if some never came.
  std::vector<std::string> keys;
  for (int r = 0; r < env.world_size; ++r) keys.push_back(member_key(r));
  while (!store->check(keys)) {
    if (std::chrono::steady_clock::now() >= deadline) {
      std::vector<int> missing;
      for (int r = 0; r < env.world_size; ++r)
        if (!store->check({member_key(r)})) missing.push_back(r);
      throw CommError(fmt::format(
          "rank(s) {} of {} did not reach the rendezvous at {} within {} s: check that MASTER_ADDR is an address "
          "of rank 0's node that the other nodes can reach (not 127.0.0.1 or a name that only resolves there), "
          "that MASTER_PORT is open between the nodes, and that every node was started with the same "
          "WORLD_SIZE",
          ranks_text(missing), env.world_size, out.where, timeout.count()));
    }
    std::this_thread::sleep_for(std::chrono::milliseconds(20));
  }
  for (int r = 0; r < env.world_size; ++r) {
    const auto j = nlohmann::json::parse(text(store->get(member_key(r))));
    RendezvousMember m;
    m.rank = j.at("rank").get<int>();
    m.world_size = j.at("world_size").get<int>();
    m.local_rank = j.at("local_rank").get<int>();
    m.local_world_size = j.at("local_world_size").get<int>();
    m.node_rank = j.at("node_rank").get<int>();
    m.host = j.at("host").get<std::string>();
    m.pid = j.at("pid").get<long>();
    out.members.push_back(std::move(m));
  }
  out.seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
  out.problems = rendezvous_problems(out.members, env.world_size);
  store->set("trlx_env/read", bytes("1"));
  while (store->add("trlx_env/left", 0) < env.world_size - 1 && std::chrono::steady_clock::now() < deadline)
    std::this_thread::sleep_for(std::chrono::milliseconds(20));
  return out;
}

}  // namespace trlx::dist
