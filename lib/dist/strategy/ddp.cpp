// Data parallel: gradients all-reduced in buckets as backward produces them.
//
// Buckets hold parameters in reverse order (backward produces the last
// layers' gradients first) up to bucket_cap_mb each. A hook after each
// parameter's gradient accumulation marks it ready; a bucket whose
// parameters are all ready is copied into one flat buffer and its all-reduce
// starts while backward goes on. Buckets start strictly in order so that
// every rank issues the same collectives in the same order, whatever order
// its hooks fire in.
#include <fmt/format.h>
#include <fmt/ranges.h>
#include <torch/csrc/autograd/function_hook.h>

#include "core/error.hpp"
#include "core/log.hpp"
#include "dist/strategy/strategy.hpp"

namespace trlx::dist {

namespace {

struct Bucket {
  std::vector<size_t> members;  // indices into params_
  std::vector<int64_t> offsets;
  int64_t numel = 0;
  torch::ScalarType dtype = torch::kFloat32;
  torch::Device device{torch::kCPU};
  size_t pending = 0;
  bool launched = false;
  torch::Tensor flat;
  WorkPtr work;
};

class DDPStrategy;

struct ReadyHook : torch::autograd::FunctionPostHook {
  ReadyHook(DDPStrategy* s, size_t index) : owner(s), param(index) {}
  torch::autograd::variable_list operator()(const torch::autograd::variable_list& outputs,
                                            const torch::autograd::variable_list& /*inputs*/) override;
  DDPStrategy* owner;
  size_t param;
};

class DDPStrategy : public Strategy {
 public:
  DDPStrategy(std::shared_ptr<Communicator> comm, DDPOptions o) : Strategy(std::move(comm)), o_(o) {}
  std::string name() const override { return "ddp"; }

  void setup(const std::vector<NamedParam>& trainable) override {
    params_ = trainable;
    agree_on_parameters();
    {
      // Every rank starts from rank 0's weights.
      torch::NoGradGuard ng;
      std::vector<WorkPtr> works;
      for (auto& p : params_) {
        auto t = p.param.detach();
        works.push_back(comm_->broadcast(t, 0));
      }
      for (auto& w : works) w->wait();
    }
    build_buckets();
    bucket_of_.assign(params_.size(), 0);
    for (size_t b = 0; b < buckets_.size(); ++b)
      for (size_t m : buckets_[b].members) bucket_of_[m] = b;
    ready_.assign(params_.size(), false);
    for (size_t i = 0; i < params_.size(); ++i) {
      auto acc = torch::autograd::impl::grad_accumulator(params_[i].param);
      acc->add_post_hook(std::make_unique<ReadyHook>(this, i));
      accumulators_.push_back(std::move(acc));
    }
  }

  void begin_backward(bool sync, bool has_data) override {
    sync_ = sync;
    has_data_ = has_data;
    if (!sync_) return;
    std::fill(ready_.begin(), ready_.end(), false);
    for (auto& b : buckets_) {
      b.pending = b.members.size();
      b.launched = false;
      b.work.reset();
    }
    next_ = 0;
  }

  void mark_ready(size_t i) {
    if (!sync_ || ready_[i]) return;
    ready_[i] = true;
    auto& b = buckets_[bucket_of_[i]];
    if (--b.pending == 0) launch_ready();
  }

  void end_backward() override {
    if (!sync_) return;
    std::vector<std::string> unused;
    for (size_t i = 0; i < params_.size(); ++i) {
      if (ready_[i]) continue;
      // A parameter that got no gradient this step: a rank without data,
      // or a part of the model the loss did not reach.
      if (has_data_ && !o_.find_unused_parameters) unused.push_back(params_[i].name);
      ready_[i] = true;
      auto& b = buckets_[bucket_of_[i]];
      --b.pending;
    }
    // Every rank issues every bucket, in order, even after finding unused
    // parameters, so that no rank is left waiting in a collective.
    launch_ready();
    for (auto& b : buckets_) {
      b.work->wait();
      unflatten(b);
    }
    sync_ = false;
    if (!unused.empty())
      fail_input("{} parameter(s) received no gradient in this step under DDP, e.g. {}: the loss does not depend on "
                 "them. Set ddp_find_unused_parameters: true to train anyway (they are reduced as zeros).",
                 unused.size(), unused.front());
  }

  double clip_grad_norm(double max_norm) override {
    std::vector<torch::Tensor> ps;
    for (const auto& p : params_)
      if (p.param.grad().defined()) ps.push_back(p.param);
    return torch::nn::utils::clip_grad_norm_(ps, max_norm);
  }

 private:
  void agree_on_parameters() {
    // Ranks must train the same parameters in the same order, or bucket
    // contents would not line up.
    std::string desc;
    for (const auto& p : params_) desc += fmt::format("{}:{};", p.name, fmt::join(p.param.sizes(), "x"));
    auto mine = torch::tensor({static_cast<int64_t>(std::hash<std::string>{}(desc)), static_cast<int64_t>(params_.size())},
                              torch::kInt64);
    auto all = torch::zeros({2 * world_size()}, torch::kInt64);
    comm_->all_gather(mine, all)->wait();
    auto* a = all.data_ptr<int64_t>();
    for (int r = 1; r < world_size(); ++r)
      if (a[2 * r] != a[0] || a[2 * r + 1] != a[1])
        throw Error(fmt::format("rank {} trains different parameters than rank 0 ({} vs {} tensors, or different "
                                "names/shapes): every rank must load the same model with the same settings",
                                r, a[2 * r + 1], a[1]));
  }

  void build_buckets() {
    const double cap = std::max(1.0, o_.bucket_cap_mb * 1024 * 1024);
    Bucket cur;
    double bytes = 0;
    auto close = [&] {
      if (!cur.members.empty()) buckets_.push_back(std::move(cur));
      cur = Bucket{};
      bytes = 0;
    };
    for (size_t k = params_.size(); k-- > 0;) {
      const auto& p = params_[k].param;
      if (!cur.members.empty() && (p.scalar_type() != cur.dtype || p.device() != cur.device)) close();
      if (cur.members.empty()) {
        cur.dtype = p.scalar_type();
        cur.device = p.device();
      }
      cur.offsets.push_back(cur.numel);
      cur.members.push_back(k);
      cur.numel += p.numel();
      bytes += static_cast<double>(p.numel() * p.element_size());
      if (bytes >= cap) close();
    }
    close();
  }

  void launch_ready() {
    while (next_ < buckets_.size() && buckets_[next_].pending == 0) {
      auto& b = buckets_[next_++];
      torch::NoGradGuard ng;
      b.flat = torch::empty({b.numel}, torch::TensorOptions().dtype(b.dtype).device(b.device));
      for (size_t j = 0; j < b.members.size(); ++j) {
        const auto& p = params_[b.members[j]].param;
        auto dst = b.flat.narrow(0, b.offsets[j], p.numel());
        if (p.grad().defined())
          dst.copy_(p.grad().reshape({-1}));
        else
          dst.zero_();
      }
      b.work = comm_->all_reduce(b.flat, o_.sum_gradients ? ReduceOp::Sum : ReduceOp::Avg);
      b.launched = true;
    }
  }

  void unflatten(Bucket& b) {
    torch::NoGradGuard ng;
    for (size_t j = 0; j < b.members.size(); ++j) {
      auto& p = params_[b.members[j]].param;
      auto src = b.flat.narrow(0, b.offsets[j], p.numel()).view(p.sizes());
      if (p.grad().defined())
        p.mutable_grad().copy_(src);
      else
        p.mutable_grad() = src.clone();
    }
    b.flat = torch::Tensor();
  }

  DDPOptions o_;
  std::vector<Bucket> buckets_;
  std::vector<size_t> bucket_of_;
  std::vector<bool> ready_;
  std::vector<c10::intrusive_ptr<torch::autograd::Node>> accumulators_;
  size_t next_ = 0;
  bool sync_ = false, has_data_ = true;
};

torch::autograd::variable_list ReadyHook::operator()(const torch::autograd::variable_list& outputs,
                                                     const torch::autograd::variable_list&) {
  owner->mark_ready(param);
  return outputs;
}

}  // namespace

std::unique_ptr<Strategy> make_ddp_strategy(std::shared_ptr<Communicator> comm, const DDPOptions& options) {
  return std::make_unique<DDPStrategy>(std::move(comm), options);
}

}  // namespace trlx::dist
