// The device mesh of accelerate's parallelism_config over trlx's communicators.
#include "dist/strategy/mesh.hpp"

#include <fmt/format.h>

#include <vector>

#include "core/error.hpp"
#include "core/strings.hpp"

namespace trlx::dist {

std::string Mesh::describe() const {
  std::vector<std::string> dims;
  if (dp_replicate > 1) dims.push_back(fmt::format("dp_replicate {}", dp_replicate));
  if (dp_shard > 1) dims.push_back(fmt::format("dp_shard {}", dp_shard));
  if (cp > 1) dims.push_back(fmt::format("cp {}", cp));
  if (sp > 1) dims.push_back(fmt::format("sp {}", sp));
  return dims.empty() ? std::string("1 process") : join(dims, " x ");
}

int64_t Mesh::bytes_communicated() const {
  int64_t bytes = world->bytes_communicated();
  if (replica && replica != world) bytes += replica->bytes_communicated();
  for (const auto* c : {&across_replicas, &sequence})
    if (*c) bytes += (*c)->bytes_communicated();
  return bytes;
}

Mesh make_mesh(std::shared_ptr<Communicator> world, const config::ParallelismConfig& p,
               const config::DistributedConfig& dist, int local_world_size) {
  Mesh m;
  m.world = world;
  m.replica = world;
  m.cp = p.cp_size;
  m.sp = p.sp_size;
  const int w = world->world_size(), seq = m.seq();
  const std::string where = p.source.empty() ? dist.source : p.source;
  const bool shards_optimizer = dist.strategy == config::Strategy::Zero || dist.strategy == config::Strategy::FSDP;
  if (w % seq != 0)
    fail_input(
        "{}: cp_size {} x sp_size {} does not divide the {} processes started; start a multiple of {} "
        "processes or change the sizes",
        where, m.cp, m.sp, w, seq);
  const int data = w / seq;
  if (p.dp_replicate_size || p.dp_shard_size) {
    m.dp_replicate = p.dp_replicate_size.value_or(1);
    m.dp_shard = p.dp_shard_size.value_or(1);
    if (m.dp_replicate * m.dp_shard * seq != w)
      fail_input(
          "{}: dp_replicate_size {} x dp_shard_size {} x cp_size {} x sp_size {} = {}, but {} processes were "
          "started; the sizes must multiply to the number of processes",
          where, m.dp_replicate, m.dp_shard, m.cp, m.sp, m.dp_replicate * m.dp_shard * seq, w);
  } else if (p.hybrid_per_node && w > 1) {
    // HYBRID_SHARD: one replica per node.
    if (local_world_size < 1 || w % local_world_size != 0 || local_world_size % seq != 0)
      fail_input(
          "{}: HYBRID_SHARD shards within each node, but {} processes per node do not split {} processes "
          "into whole nodes{}; set parallelism_config's dp_replicate_size and dp_shard_size instead",
          where, local_world_size, w, seq > 1 ? fmt::format(" of whole sequence groups ({})", seq) : "");
    m.dp_shard = local_world_size / seq;
    m.dp_replicate = data / m.dp_shard;
  } else {
    m.dp_shard = data;
  }
  if (!shards_optimizer && p.dp_shard_size.value_or(1) > 1)
    fail_input(
        "{}: dp_shard_size {} asks to shard the model, but {} keeps it whole on every rank; use "
        "distributed_type FSDP or DEEPSPEED, or set dp_replicate_size instead",
        where, *p.dp_shard_size, dist.strategy == config::Strategy::DDP ? "DDP" : "a single process");
  if (!shards_optimizer) {
    // Replicas are all there is: every rank holds the whole model.
    m.dp_shard = data;
    m.dp_replicate = 1;
  }
  if (shards_optimizer && w > 1 && m.dp_shard * seq == 1)
    fail_input(
        "{}: {} shards the model over the ranks of a replica, but dp_shard_size and cp/sp sizes are all 1 "
        "(every rank a replica of its own); raise dp_shard_size, or use distributed_type MULTI_GPU for "
        "plain data parallelism",
        where, dist.describe());
  const int r = world->rank();
  const int data_rank = r / seq, seq_rank = r % seq;
  const int replica = data_rank / m.dp_shard;
  // The same splits in the same order on every rank.
  if (m.dp_replicate > 1) {
    m.replica = world->split(replica, r);
    m.across_replicas = world->split(r % (m.dp_shard * seq), replica);
  }
  if (seq > 1) m.sequence = world->split(data_rank, seq_rank);
  return m;
}

}  // namespace trlx::dist
