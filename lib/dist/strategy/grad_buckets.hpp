#pragma once
// The gradient-reduction machinery DDP and ZeRO share: parameters grouped in
// buckets, hooks that mark a parameter ready once its gradient is
// accumulated, and buckets handed to the strategy strictly in order as they
// fill, so every rank issues the same collectives in the same order whatever
// order its hooks fire in. What a bucket's reduction is (an all-reduce for
// DDP and ZeRO-1, a reduce-scatter where gradients are sharded) is the
// strategy's.
#include <functional>
#include <optional>
#include <string>
#include <vector>

#include <torch/torch.h>

#include "dist/strategy/strategy.hpp"

namespace trlx::dist {

struct GradBucket {
  std::vector<size_t> members;  // indices into the parameters, in bucket order
  std::vector<int64_t> offsets;  // of each member in the flat bucket
  int64_t numel = 0;
  torch::ScalarType dtype = torch::kFloat32;
  torch::Device device{torch::kCPU};
  size_t pending = 0;
  torch::Tensor flat;  // the bucket's gradients while its reduction runs
  torch::Tensor out;   // ZeRO: this rank's slice of the reduced (or, after the step, updated) bucket
  WorkPtr work;
};

// Checks that every rank trains the same parameters (names, shapes, order),
// then makes them equal to rank 0's values.
void agree_and_broadcast(Communicator& comm, const std::vector<NamedParam>& params);
void agree_on_parameters(Communicator& comm, const std::vector<NamedParam>& params);
void broadcast_from_rank0(Communicator& comm, const std::vector<torch::Tensor>& tensors);

class GradBuckets {
 public:
  // Starts a bucket's reduction (its members' gradients are final).
  using LaunchFn = std::function<void(GradBucket&)>;

  // Buckets of up to `cap_mb` hold parameters in reverse order (backward
  // produces the last layers' gradients first), one dtype and device each.
  // Installs a hook on each parameter's gradient accumulator; `params` and
  // this object must outlive the hooks' use (the strategy owns both).
  GradBuckets(const std::vector<NamedParam>& params, double cap_mb, LaunchFn launch);
  // Buckets given explicitly (indices into `params`, in launch order; each
  // one dtype and device): sharded units reduce one unit per bucket.
  // `reduce_dtype`: buckets of 16-bit parameters flatten and reduce their
  // gradients in this dtype instead (float32 for bf16 compute copies of
  // float32 masters).
  GradBuckets(const std::vector<NamedParam>& params, const std::vector<std::vector<size_t>>& groups, LaunchFn launch,
              std::optional<torch::ScalarType> reduce_dtype = std::nullopt);

  // Before a backward whose gradients are reduced (`active`) or only
  // accumulated locally.
  void begin(bool active);
  bool active() const { return active_; }
  // After backward: parameters that got no gradient count as zeros, every
  // remaining bucket is launched in order, and every reduction is waited for.
  // Returns the names of the parameters that got no gradient.
  std::vector<std::string> finish();

  std::vector<GradBucket>& buckets() { return buckets_; }

  // A new flat tensor holding the bucket's gradients (zeros where a member
  // has none).
  torch::Tensor flatten(const GradBucket& b) const;
  // The reverse: each member's gradient becomes its part of `flat`.
  void unflatten(const GradBucket& b, const torch::Tensor& flat) const;

  void mark_ready(size_t i);
  // After a parameter's data changed dtype (set_data), LibTorch gives it a
  // new gradient accumulator: this hooks the new ones.
  void reattach_hooks();

 private:
  void install_hooks();
  void launch_ready();

  const std::vector<NamedParam>& params_;
  LaunchFn launch_;
  std::vector<GradBucket> buckets_;
  std::vector<size_t> bucket_of_;
  std::vector<bool> ready_;
  // (A node handle as this LibTorch gives it: intrusive from 2.15, shared before.)
  std::vector<decltype(torch::autograd::impl::grad_accumulator(std::declval<const torch::autograd::Variable&>()))>
      accumulators_;
  size_t next_ = 0;
  bool active_ = false;
};

// The message for parameters that got no gradient under a strategy that
// expects every one to (`strategy`: the name the run reports, "DDP", "zero2", ...).
[[noreturn]] void fail_unused_parameters(const std::vector<std::string>& unused, const std::string& strategy);

}  // namespace trlx::dist
