#pragma once
// How the trained model's parameters, gradients and optimizer state are laid
// out across ranks, and the collectives that keep them consistent. The engine
// owns one Strategy and calls it at fixed points of every step; trainers never
// see it.
#include <functional>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include <ATen/core/Tensor.h>
#include <c10/core/Device.h>

#include "config/accelerate.hpp"
#include "dist/comm/communicator.hpp"

namespace trlx::model {
class LanguageModelImpl;
}

namespace trlx::dist {

struct NamedParam {
  std::string name;
  at::Tensor param;
};

class Strategy {
 public:
  explicit Strategy(std::shared_ptr<Communicator> comm) : comm_(std::move(comm)) {}
  virtual ~Strategy() = default;
  virtual std::string name() const = 0;
  int rank() const { return comm_->rank(); }
  int world_size() const { return comm_->world_size(); }

  // Called once with the parameters that train (in the same order on every
  // rank), before the optimizer is built: checks that ranks agree on them
  // and makes them equal (rank 0's values).
  virtual void setup(const std::vector<NamedParam>& trainable) = 0;

  // Called before setup with each model being trained (the policy, then a
  // value model): a strategy that shards parameters splits it here and
  // installs its model::ShardingHooks.
  virtual void wrap_model(model::LanguageModelImpl& /*model*/) {}
  // A frozen model the run also computes with (the reference model): a
  // strategy that shards parameters shards it the same way; others leave it
  // whole on every rank. Call before its first forward, on every rank.
  virtual void wrap_frozen_model(model::LanguageModelImpl& /*model*/) {}

  // Whether parameters are split across ranks (ZeRO-3/FSDP). Then every
  // forward runs collectives, so every rank must run the same forwards, and
  // reading or writing a parameter's values goes through the calls below.
  virtual bool shards_parameters() const { return false; }

  // Reading parameter values for saving, one unit at a time: rank 0 calls
  // read_parameter(p) before it reads p (the unit holding p is gathered,
  // the one gathered before is released) and end_parameter_reads() when
  // done, while every other rank runs serve_parameter_reads(), which joins
  // those gathers until rank 0 ends. So no rank holds more than one unit
  // beyond its shards. No-ops when parameters are whole.
  // begin_parameter_reads() comes first, before the reader takes hold of
  // the parameters: a strategy that computes with lower-precision copies
  // makes them show their exact values while reads run.
  virtual void begin_parameter_reads() {}
  virtual void read_parameter(const at::Tensor& /*param*/) {}
  virtual void end_parameter_reads() {}
  virtual void serve_parameter_reads() {}

  // Around a generation round on `model` (a wrapped model): under
  // parameter sharding the units that fit in `keep_bytes` of gathered
  // parameters (in forward order; negative: every unit) are gathered once
  // and stay whole until end_generation, the rest are gathered per forward
  // and freed at once. No-ops when parameters are whole. Collectives:
  // every rank calls both, with the same budget.
  virtual void begin_generation(model::LanguageModelImpl& /*model*/, int64_t /*keep_bytes*/) {}
  virtual void end_generation() {}
  // Bytes of whole (gathered) sharded parameters this rank holds now beyond
  // its shards, and the most it has held since the last reset.
  virtual int64_t gathered_bytes() const { return 0; }
  virtual int64_t peak_gathered_bytes() const { return 0; }
  virtual void reset_peak_gathered_bytes() {}

  // Writes new values into the parameters of `model` (a wrapped model):
  // `fill(name, param)` is called for every parameter while it is whole and
  // writable; what it writes is kept (in the shards, under sharding). A
  // collective under sharding: every rank calls it, with the same values.
  virtual void write_parameters(model::LanguageModelImpl& model,
                                const std::function<void(const std::string& name, at::Tensor& param)>& fill);

  // dst = alpha * src + (1 - alpha) * dst for every parameter of `dst` that
  // `src` has by name (TR-DPO's reference sync); both wrapped by this
  // strategy. Under sharding it works on the shards, with no gather.
  virtual void lerp_parameters(model::LanguageModelImpl& dst, model::LanguageModelImpl& src, double alpha) {
    lerp_by_name(dst, src, alpha, {});
  }

  // The tensors the optimizer updates, one list per group; `groups` holds
  // indices into setup's parameters (weight decay / none). Replicated
  // strategies return the parameters themselves; ZeRO returns this rank's
  // fp32 shards.
  virtual std::vector<std::vector<at::Tensor>> optimizer_groups(const std::vector<std::vector<size_t>>& groups) {
    std::vector<std::vector<at::Tensor>> out;
    for (const auto& g : groups) {
      out.emplace_back();
      for (size_t i : g) out.back().push_back(params_[i].param);
    }
    return out;
  }
  // After optimizer.step(): ZeRO puts each rank's updated slice back where
  // the parameters live (all-gathered into whole ones, or into its shard).
  virtual void after_optimizer_step() {}
  // Instead of the optimizer step, when the step is skipped (an fp16
  // overflow): no gradient of it may reach the next step. The replicated
  // strategies' gradients live in the parameters, which the optimizer's
  // zero_grad clears; ZeRO's masters are the optimizer's, but ZeRO-1 leaves
  // the reduced gradients in the parameters too.
  virtual void discard_gradients() {}
  // Whether each rank's optimizer state differs (saved per rank).
  virtual bool shards_optimizer_state() const { return false; }
  // After the engine wrote new values into the parameters (resume): ZeRO
  // takes its fp32 master shards from them again.
  virtual void on_weights_loaded() {}

  // Around each micro-step's backward. `sync`: the last micro-step of an
  // optimizer step, whose gradients are reduced (earlier ones only
  // accumulate locally). `has_data`: this rank has examples in this
  // micro-step (an uneven last batch can leave a rank none).
  virtual void begin_backward(bool sync, bool has_data) = 0;
  // After backward returned: waits for every reduction of a sync step.
  virtual void end_backward() = 0;

  // The global norm of the gradients before clipping, then clips them to
  // `max_norm`. `inv_scale`: the gradients hold the true ones times a loss
  // scale (fp16), and are multiplied by this first (GradScaler's unscale),
  // so the norm and the clipped gradients are the true ones. A non-finite
  // norm (an fp16 overflow) is returned with the gradients left unusable: the
  // caller skips the update. Replicated strategies work on the whole
  // gradients of the parameters; ZeRO on each rank's slices.
  virtual double clip_grad_norm(double max_norm, double inv_scale);

  // Checks that every rank holds the same reduced gradients (the
  // debug_check_grad_sync_steps check); throws naming the first parameter
  // that differs.
  virtual void check_grads_in_sync();

  // Sums `values` over ranks, in place (metrics, token counts).
  void sum_across_ranks(std::vector<double>& values);
  // `t` summed over ranks, as a new tensor on t's device: the reduction
  // runs on the communicator's device and nothing is read on the host.
  at::Tensor sum_across_ranks(const at::Tensor& t);
  // The largest of each value over ranks, in place.
  void max_across_ranks(std::vector<double>& values);
  // Every rank's `mine` (any length), rank by rank.
  std::vector<std::vector<double>> gather_across_ranks(const std::vector<double>& mine);

 protected:
  // lerp_parameters on whole tensors, matched by name; parameters for which
  // `skip` (when given) returns true are left to the caller.
  static void lerp_by_name(model::LanguageModelImpl& dst, model::LanguageModelImpl& src, double alpha,
                           const std::function<bool(const at::Tensor&)>& skip);

  std::shared_ptr<Communicator> comm_;
  std::vector<NamedParam> params_;
};

// Single process (world 1): nothing to reduce.
std::unique_ptr<Strategy> make_single_strategy(std::shared_ptr<Communicator> comm);

struct DDPOptions {
  double bucket_cap_mb = 25;
  bool find_unused_parameters = false;
  // true: gradients are summed (the loss is already normalised by the items of
  // all ranks); false: averaged.
  bool sum_gradients = true;
};
// Data parallel: every rank holds the whole model; gradients are all-reduced
// in buckets while backward still runs.
std::unique_ptr<Strategy> make_ddp_strategy(std::shared_ptr<Communicator> comm, const DDPOptions& options);

// Hybrid sharding (a device mesh, dist/strategy/mesh.hpp): the ranks the
// parameters and optimizer state are split over, and the ranks holding the
// same shard in the other replicas, across which the reduced gradient
// shards are reduced once more. Unset: split over every rank, one replica.
struct ShardGroups {
  std::shared_ptr<Communicator> shard;
  std::shared_ptr<Communicator> across_replicas;
};

struct ZeroOptions {
  // 1: optimizer state (fp32 master weights, Adam moments) sharded; 2: the
  // reduced gradients too.
  int stage = 1;
  double bucket_cap_mb = 25;
  bool find_unused_parameters = false;
  bool sum_gradients = true;  // as DDPOptions
  // "none" or "cpu": where the master shards and their optimizer state live.
  std::string offload_optimizer_device = "none";
  ShardGroups groups;
};
// ZeRO-1/2: every rank holds the whole model for forward and backward, but
// updates only its shard of the parameters and all-gathers the result.
std::unique_ptr<Strategy> make_zero_strategy(std::shared_ptr<Communicator> comm, const ZeroOptions& options);

struct ParameterShardingOptions {
  bool find_unused_parameters = false;
  bool sum_gradients = true;                      // as DDPOptions
  std::string offload_optimizer_device = "none";  // as ZeroOptions
  // Free a unit's gathered parameters right after its forward (false: keep
  // them until its backward, FSDP's SHARD_GRAD_OP).
  bool reshard_after_forward = true;
  // The name the run reports: zero3, or fsdp for the same layout chosen
  // through an FSDP config.
  std::string name = "zero3";
  // Mixed precision (bf16): float32 units are gathered and computed in this
  // dtype, while each rank's shard keeps float32 (the optimizer's masters,
  // and what saving reads): gathers move half the bytes, and no weight is
  // cast again for autocast. Unset: units gather in the dtype they hold.
  std::optional<at::ScalarType> compute_dtype;
  ShardGroups groups;
};
// ZeRO-3 and FSDP: the parameters are split too, unit by unit (the
// embedding, each decoder layer, the head), each gathered around its forward
// and again for its backward; only what lies outside the units (the final
// norm) stays whole on every rank. Gradients are reduce-scattered unit by
// unit, and optimizer state is kept per shard as under ZeRO-1/2.
std::unique_ptr<Strategy> make_parameter_sharding_strategy(std::shared_ptr<Communicator> comm,
                                                           const ParameterShardingOptions& options);

}  // namespace trlx::dist
