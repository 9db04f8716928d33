// Picks the strategy a run's settings ask for: single process, DDP, ZeRO-1/2, or ZeRO-3/FSDP sharding.
#include "dist/strategy/make_strategy.hpp"

#include "core/error.hpp"
#include "core/log.hpp"

namespace trlx::dist {

std::unique_ptr<Strategy> make_strategy(const config::DistributedConfig& dist, const config::TrainingConfig& training,
                                        const Mesh& mesh, torch::Device device) {
  std::shared_ptr<Communicator> comm = mesh.world;
  ShardGroups groups;
  if (mesh.across_replicas) groups = {mesh.replica, mesh.across_replicas};
  if (comm->world_size() == 1 && !training.debug_force_distributed) return make_single_strategy(std::move(comm));
  if (comm->world_size() == 1)
    log::info("debug_force_distributed: running {} with one process ({} communicator)",
              dist.strategy == config::Strategy::Single ? std::string("DDP") : dist.describe(), comm->backend());
  const bool find_unused = training.ddp_find_unused_parameters.value_or(false);
  const bool sum_gradients = training.average_tokens_across_devices;
  if (dist.shards_parameters()) {
    if (dist.offload_param_device != "none" && device.type() != torch::kCPU)
      fail_input("{}: parameter offload (offload_param_device / fsdp_offload_params) is not built yet in trlx; "
                 "set it to none (offload_optimizer_device: cpu keeps the optimizer state on the host)",
                 dist.source);
    if (dist.offload_param_device != "none")
      log::info("parameter offload to {}: the parameters already live on the host in this CPU run",
                dist.offload_param_device);
    if (training.ddp_bucket_cap_mb)
      log::warn("ddp_bucket_cap_mb has no effect under {}: gradients are reduced one sharded unit (layer) at a time",
                dist.describe());
    ParameterShardingOptions o;
    o.find_unused_parameters = find_unused;
    o.sum_gradients = sum_gradients;
    o.offload_optimizer_device = dist.offload_optimizer_device;
    const bool fsdp = dist.strategy == config::Strategy::FSDP;
    o.name = fsdp ? "fsdp" : "zero3";
    o.reshard_after_forward = fsdp ? dist.reshard_after_forward : true;
    // bf16 mixed precision gathers bf16 (as DeepSpeed's bf16 mode and FSDP's
    // param_dtype do); fp16 keeps float32 weights for its loss scaling.
    if (training.use_bf16() && !training.fp16) o.compute_dtype = at::kBFloat16;
    o.groups = groups;
    return make_parameter_sharding_strategy(std::move(comm), o);
  }
  const double bucket_cap_mb = training.ddp_bucket_cap_mb.value_or(25.0);
  if (dist.strategy == config::Strategy::Zero) {
    ZeroOptions o;
    o.stage = std::max(1, dist.zero_stage);
    o.bucket_cap_mb = bucket_cap_mb;
    o.find_unused_parameters = find_unused;
    o.sum_gradients = sum_gradients;
    o.offload_optimizer_device = dist.offload_optimizer_device;
    o.groups = groups;
    return make_zero_strategy(std::move(comm), o);
  }
  DDPOptions o;
  o.bucket_cap_mb = bucket_cap_mb;
  o.find_unused_parameters = find_unused;
  o.sum_gradients = sum_gradients;
  return make_ddp_strategy(std::move(comm), o);
}

}  // namespace trlx::dist
