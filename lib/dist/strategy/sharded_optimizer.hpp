#pragma once
// The optimizer half every ZeRO layout shares: each rank updates only its
// slice of the parameters, from fp32 master copies of that slice.
//
// Layout: the gradient buckets (GradBuckets, shared with DDP) are the flat
// space. Each bucket is split over the ranks with shard_of, so uneven sizes
// need no padding; rank r owns slice shard_of(bucket, world, r) of every
// bucket. A parameter overlaps a rank's slice in at most one contiguous
// piece; the rank keeps that piece as an fp32 master tensor, and those
// pieces are what its optimizer updates (Adam is elementwise, so updating
// pieces equals updating whole tensors).
//
// Where the updated slice goes depends on where the bucket's parameters
// live: whole on every rank, the slices are all-gathered into them after the
// step, bucket by bucket; split over the ranks (parameter sharding), the
// slice is the rank's shard of them, which the next forward gathers.
#include <memory>
#include <string>
#include <vector>

#include "dist/strategy/grad_buckets.hpp"
#include "dist/strategy/strategy.hpp"

namespace trlx::dist {

class ShardedOptimizer : public Strategy {
 public:
  struct Options {
    // false (ZeRO-1): gradients accumulate locally and are all-reduced on the
    // last micro-step; the full reduced gradients stay in the parameters, as
    // under DDP. true: every micro-step's gradients are reduce-scattered as
    // backward produces them and the full gradients dropped right after
    // their bucket is flattened, so a rank holds full gradients only for
    // buckets in flight and its 1/world slice after.
    bool shard_gradients = false;
    bool find_unused_parameters = false;
    bool sum_gradients = true;
    // "none" or "cpu": where the masters and their optimizer state live.
    std::string offload_optimizer_device = "none";
    std::string name;
    // Hybrid sharding: split over `groups.shard`, the reduced shards reduced
    // again over `groups.across_replicas`. Unset: over every rank.
    ShardGroups groups;
  };
  ShardedOptimizer(std::shared_ptr<Communicator> comm, Options o);
  ~ShardedOptimizer() override;

  std::string name() const override { return o_.name; }
  bool shards_optimizer_state() const override { return true; }
  void on_weights_loaded() override;
  std::vector<std::vector<torch::Tensor>> optimizer_groups(const std::vector<std::vector<size_t>>& groups) override;
  void begin_backward(bool sync, bool has_data) override;
  void end_backward() override;
  double clip_grad_norm(double max_norm, double inv_scale) override;
  void after_optimizer_step() override;
  void discard_gradients() override;
  void check_grads_in_sync() override;

 protected:
  // From setup, once params_ is set: takes `buckets` (built with launcher())
  // as the flat space and makes this rank's masters. `held_shards[b]`, where
  // given and defined, is the tensor that holds this rank's slice of bucket
  // b's parameters between steps (their shard under parameter sharding);
  // other buckets' parameters are whole on every rank.
  void shard_buckets(std::unique_ptr<GradBuckets> buckets, std::vector<torch::Tensor> held_shards = {});
  GradBuckets::LaunchFn launcher() {
    return [this](GradBucket& b) { launch(b); };
  }
  // The ranks the parameters (their slices) are split over, and this
  // rank's place among them: the world unless sharding is hybrid.
  Communicator& shards() const { return o_.groups.shard ? *o_.groups.shard : *comm_; }
  int shard_rank() const { return shards().rank(); }
  int shard_count() const { return shards().world_size(); }

  // After the trained parameters' data changed dtype and back (set_data).
  void reattach_gradient_hooks() {
    if (buckets_) buckets_->reattach_hooks();
  }

 private:
  // The part of one parameter this rank owns.
  struct Piece {
    size_t param = 0;
    int64_t param_offset = 0;  // in the flattened parameter
    int64_t shard_offset = 0;  // in this rank's slice of the bucket
    int64_t numel = 0;
    torch::Tensor master;      // fp32, what the optimizer updates
    torch::Tensor to_host;     // under pinned offload: this micro-step's gradient, on its way to the host
  };
  // The stream (and events) gradient copies to the host run on; CUDA-only.
  struct OffloadStream;

  void launch(GradBucket& b);
  // Under pinned offload: bucket `bi`'s slice goes to the host on the
  // offload stream, after its reduction, while backward goes on.
  void queue_to_host(size_t bi);
  // Before the compute stream reads an all-reduced bucket whose reduction
  // the offload stream waited for.
  void compute_waits_for_reduction(size_t bi);
  // The host waits for every queued copy to the host.
  void wait_for_host_copies();
  torch::Device master_device() const;
  // Offloaded from a GPU: masters and their gradients in page-locked memory.
  bool pinned_offload() const;
  // An fp32 tensor where the masters live (page-locked under pinned_offload).
  torch::Tensor host_buffer(at::IntArrayRef sizes) const;

  Options o_;
  std::unique_ptr<GradBuckets> buckets_;
  std::vector<torch::Tensor> held_shards_;  // per bucket; undefined where the parameters are whole
  std::vector<std::vector<Piece>> pieces_;  // per bucket
  std::vector<Piece*> piece_of_;            // per parameter; null where this rank owns none of it
  bool has_data_ = true;
  std::unique_ptr<OffloadStream> offload_;
};

}  // namespace trlx::dist
