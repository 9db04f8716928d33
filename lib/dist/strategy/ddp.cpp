// Data parallel: gradients all-reduced in buckets as backward produces them.
//
// The bucketing and hooks are GradBuckets' (shared with ZeRO): a bucket whose
// parameters are all ready is copied into one flat buffer and its all-reduce
// starts while backward goes on.
#include "core/error.hpp"
#include "dist/strategy/grad_buckets.hpp"
#include "dist/strategy/strategy.hpp"

namespace trlx::dist {

namespace {

class DDPStrategy : public Strategy {
 public:
  DDPStrategy(std::shared_ptr<Communicator> comm, DDPOptions o) : Strategy(std::move(comm)), o_(o) {}
  std::string name() const override { return "ddp"; }

  void setup(const std::vector<NamedParam>& trainable) override {
    params_ = trainable;
    agree_and_broadcast(*comm_, params_);
    buckets_ = std::make_unique<GradBuckets>(params_, o_.bucket_cap_mb, [this](GradBucket& b) {
      b.flat = buckets_->flatten(b);
      b.work = comm_->all_reduce(b.flat, o_.sum_gradients ? ReduceOp::Sum : ReduceOp::Avg);
    });
  }

  void begin_backward(bool sync, bool has_data) override {
    has_data_ = has_data;
    buckets_->begin(sync);
  }

  void end_backward() override {
    if (!buckets_->active()) return;
    auto unused = buckets_->finish();
    for (auto& b : buckets_->buckets()) {
      buckets_->unflatten(b, b.flat);
      b.flat = torch::Tensor();
    }
    if (!unused.empty() && has_data_ && !o_.find_unused_parameters) fail_unused_parameters(unused, "DDP");
  }

 private:
  DDPOptions o_;
  std::unique_ptr<GradBuckets> buckets_;
  bool has_data_ = true;
};

}  // namespace

std::unique_ptr<Strategy> make_ddp_strategy(std::shared_ptr<Communicator> comm, const DDPOptions& options) {
  return std::make_unique<DDPStrategy>(std::move(comm), options);
}

}  // namespace trlx::dist
