// ZeRO stages 1 and 2: every rank holds the whole model for forward and
// backward; the optimizer state (stage 2: the reduced gradients too) is split
// across ranks as ShardedOptimizer lays it out, over buckets of
// bucket_cap_mb as DDP's.
#include <fmt/format.h>

#include "core/error.hpp"
#include "dist/strategy/sharded_optimizer.hpp"

namespace trlx::dist {

namespace {

class ZeroOptimizerSharding final : public ShardedOptimizer {
 public:
  ZeroOptimizerSharding(std::shared_ptr<Communicator> comm, const ZeroOptions& o)
      : ShardedOptimizer(std::move(comm), {.shard_gradients = o.stage == 2,
                                           .find_unused_parameters = o.find_unused_parameters,
                                           .sum_gradients = o.sum_gradients,
                                           .offload_optimizer_device = o.offload_optimizer_device,
                                           .name = fmt::format("zero{}", o.stage),
                                           .groups = o.groups}),
        bucket_cap_mb_(o.bucket_cap_mb) {}

  void setup(const std::vector<NamedParam>& trainable) override {
    params_ = trainable;
    agree_and_broadcast(*comm_, params_);
    shard_buckets(std::make_unique<GradBuckets>(params_, bucket_cap_mb_, launcher()));
  }

 private:
  double bucket_cap_mb_;
};

}  // namespace

std::unique_ptr<Strategy> make_zero_strategy(std::shared_ptr<Communicator> comm, const ZeroOptions& options) {
  if (options.stage != 1 && options.stage != 2)
    throw Error(fmt::format("make_zero_strategy builds ZeRO stages 1 and 2, not {} (stage 3 is "
                            "make_parameter_sharding_strategy)",
                            options.stage));
  return std::make_unique<ZeroOptimizerSharding>(std::move(comm), options);
}

}  // namespace trlx::dist
