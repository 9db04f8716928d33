#pragma once
// The strategy a run's settings ask for: single process, DDP, ZeRO-1/2, or
// parameter sharding (ZeRO-3, FSDP).
#include <memory>

#include <c10/core/Device.h>

#include "config/accelerate.hpp"
#include "config/training.hpp"
#include "dist/strategy/mesh.hpp"
#include "dist/strategy/strategy.hpp"

namespace trlx::dist {

// `device`: where the model computes (parameter offload is refused off the
// host). The gradient reduction's settings (ddp_bucket_cap_mb,
// ddp_find_unused_parameters, average_tokens_across_devices) come from
// `training`. `mesh`: the processes (make_mesh); a sharding strategy splits
// over one replica's ranks and reduces across replicas.
std::unique_ptr<Strategy> make_strategy(const config::DistributedConfig& dist, const config::TrainingConfig& training,
                                        const Mesh& mesh, c10::Device device);

}  // namespace trlx::dist
