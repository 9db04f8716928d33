#pragma once
// The processes as a device mesh, in accelerate's order: dp_replicate,
// dp_shard, then cp or sp (the last dimension's ranks are neighbours, so a
// sequence group sits inside a node). Each dimension a run uses gets a
// communicator of its own, split from the world's.
//
//   world rank = (replica * dp_shard + shard) * seq + seq_rank
//
// - data: the ranks of one sequence group read the same batch; a data rank
//   is (replica, shard), and the global batch is per_device x data ranks.
// - parameters and optimizer state are split over the ranks of one replica
//   (dp_shard x seq of them): each rank of a sequence group computes part of
//   every gradient, so splitting over them costs nothing extra.
// - gradients: reduced over the ranks of a replica, then averaged or summed
//   across replicas (hybrid sharding keeps the heavy gathers inside a node).
#include <memory>
#include <string>

#include "config/accelerate.hpp"
#include "dist/comm/communicator.hpp"

namespace trlx::dist {

struct Mesh {
  int dp_replicate = 1, dp_shard = 1, cp = 1, sp = 1;
  std::shared_ptr<Communicator> world;
  // The ranks of one replica (parameter and optimizer sharding); the world
  // when there is one replica.
  std::shared_ptr<Communicator> replica;
  // The ranks holding the same shard in every replica; null with one replica.
  std::shared_ptr<Communicator> across_replicas;
  // The ranks that split one sequence (sp or cp); null when sp = cp = 1.
  std::shared_ptr<Communicator> sequence;

  int seq() const { return cp * sp; }
  int data_size() const { return dp_replicate * dp_shard; }
  int data_rank() const { return world->rank() / seq(); }
  bool trivial() const { return dp_replicate == 1 && seq() == 1; }
  // "dp_replicate 2 x dp_shard 2 x sp 2" (the dimensions that are > 1).
  std::string describe() const;
  // Bytes this rank has handed to collectives over every communicator of
  // the mesh.
  int64_t bytes_communicated() const;
};

// The mesh `parallelism` asks for over `world` (unset data sizes resolved
// from the world size; FSDP's HYBRID_SHARD replicates across nodes of
// `local_world_size` processes). Throws InputError, with the numbers, where
// the sizes do not fit the world or the strategy (`shards_parameters`: ZeRO-3
// or FSDP; `shards_optimizer`: any ZeRO stage or FSDP). A collective: every
// rank calls it.
Mesh make_mesh(std::shared_ptr<Communicator> world, const config::ParallelismConfig& parallelism,
               const config::DistributedConfig& dist, int local_world_size);

}  // namespace trlx::dist
