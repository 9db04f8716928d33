// Gradient buckets for DDP and ZeRO: ready hooks, and each bucket's reduction launched as backward fills it.
#include "dist/strategy/grad_buckets.hpp"

#include <fmt/format.h>
#include <fmt/ranges.h>
#include <torch/csrc/autograd/function_hook.h>

#include "core/error.hpp"
#include "dist/comm/host_values.hpp"

namespace trlx::dist {

namespace {

struct ReadyHook : torch::autograd::FunctionPostHook {
  ReadyHook(GradBuckets* b, size_t index) : owner(b), param(index) {}
  torch::autograd::variable_list operator()(const torch::autograd::variable_list& outputs,
                                            const torch::autograd::variable_list& /*inputs*/) override {
    owner->mark_ready(param);
    return outputs;
  }
  GradBuckets* owner;
  size_t param;
};

}  // namespace

void agree_on_parameters(Communicator& comm, const std::vector<NamedParam>& params) {
  // Ranks must train the same parameters in the same order, or bucket
  // contents (and shards) would not line up.
  std::string desc;
  for (const auto& p : params) desc += fmt::format("{}:{};", p.name, fmt::join(p.param.sizes(), "x"));
  const int world = comm.world_size();
  const auto all = all_gather_values(
      comm, {static_cast<int64_t>(std::hash<std::string>{}(desc)), static_cast<int64_t>(params.size())});
  for (size_t r = 1; r < static_cast<size_t>(world); ++r)
    if (all[r] != all[0])
      throw Error(fmt::format("rank {} trains different parameters than rank 0 ({} vs {} tensors, or different "
                              "names/shapes): every rank must load the same model with the same settings",
                              r, all[r][1], all[0][1]));
}

void broadcast_from_rank0(Communicator& comm, const std::vector<torch::Tensor>& tensors) {
  torch::NoGradGuard ng;
  std::vector<WorkPtr> works;
  for (const auto& p : tensors) {
    auto t = p.detach();
    works.push_back(comm.broadcast(t, 0));
  }
  for (auto& w : works) w->wait();
}

void agree_and_broadcast(Communicator& comm, const std::vector<NamedParam>& params) {
  agree_on_parameters(comm, params);
  // Every rank starts from rank 0's weights.
  std::vector<torch::Tensor> ts;
  for (const auto& p : params) ts.push_back(p.param);
  broadcast_from_rank0(comm, ts);
}

GradBuckets::GradBuckets(const std::vector<NamedParam>& params, double cap_mb, LaunchFn launch)
    : params_(params), launch_(std::move(launch)) {
  const double cap = std::max(1.0, cap_mb * 1024 * 1024);
  GradBucket cur;
  double bytes = 0;
  auto close = [&] {
    if (!cur.members.empty()) buckets_.push_back(std::move(cur));
    cur = GradBucket{};
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
  install_hooks();
}

GradBuckets::GradBuckets(const std::vector<NamedParam>& params, const std::vector<std::vector<size_t>>& groups,
                         LaunchFn launch, std::optional<torch::ScalarType> reduce_dtype)
    : params_(params), launch_(std::move(launch)) {
  for (const auto& g : groups) {
    if (g.empty()) continue;
    GradBucket b;
    const auto dtype = params_[g.front()].param.scalar_type();
    const bool low = dtype == torch::kBFloat16 || dtype == torch::kHalf;
    b.dtype = reduce_dtype && low ? *reduce_dtype : dtype;
    b.device = params_[g.front()].param.device();
    for (size_t k : g) {
      const auto& p = params_[k].param;
      if (p.scalar_type() != dtype || p.device() != b.device)
        throw Error(fmt::format("gradient bucket mixes dtypes or devices ({} and {})", params_[g.front()].name,
                                params_[k].name));
      b.offsets.push_back(b.numel);
      b.members.push_back(k);
      b.numel += p.numel();
    }
    buckets_.push_back(std::move(b));
  }
  install_hooks();
}

void GradBuckets::install_hooks() {
  bucket_of_.assign(params_.size(), 0);
  std::vector<bool> placed(params_.size(), false);
  for (size_t b = 0; b < buckets_.size(); ++b)
    for (size_t m : buckets_[b].members) bucket_of_[m] = b, placed[m] = true;
  for (size_t i = 0; i < params_.size(); ++i)
    if (!placed[i]) throw Error(fmt::format("parameter {} is in no gradient bucket", params_[i].name));
  ready_.assign(params_.size(), false);
  for (size_t i = 0; i < params_.size(); ++i) {
    auto acc = torch::autograd::impl::grad_accumulator(params_[i].param);
    acc->add_post_hook(std::make_unique<ReadyHook>(this, i));
    accumulators_.push_back(std::move(acc));
  }
}

void GradBuckets::reattach_hooks() {
  for (size_t i = 0; i < params_.size(); ++i) {
    auto acc = torch::autograd::impl::grad_accumulator(params_[i].param);
    if (acc.get() == accumulators_[i].get()) continue;
    acc->add_post_hook(std::make_unique<ReadyHook>(this, i));
    accumulators_[i] = std::move(acc);
  }
}

void GradBuckets::begin(bool active) {
  active_ = active;
  if (!active_) return;
  std::fill(ready_.begin(), ready_.end(), false);
  for (auto& b : buckets_) {
    b.pending = b.members.size();
    b.work.reset();
  }
  next_ = 0;
}

void GradBuckets::mark_ready(size_t i) {
  if (!active_ || ready_[i]) return;
  ready_[i] = true;
  if (--buckets_[bucket_of_[i]].pending == 0) launch_ready();
}

std::vector<std::string> GradBuckets::finish() {
  std::vector<std::string> unused;
  if (!active_) return unused;
  for (size_t i = 0; i < params_.size(); ++i) {
    if (ready_[i]) continue;
    // A parameter that got no gradient this step: a rank without data, or a
    // part of the model the loss did not reach.
    unused.push_back(params_[i].name);
    ready_[i] = true;
    --buckets_[bucket_of_[i]].pending;
  }
  // Every rank issues every bucket, in order, so that no rank is left
  // waiting in a collective.
  launch_ready();
  for (auto& b : buckets_) b.work->wait();
  active_ = false;
  return unused;
}

torch::Tensor GradBuckets::flatten(const GradBucket& b) const {
  torch::NoGradGuard ng;
  auto flat = torch::empty({b.numel}, torch::TensorOptions().dtype(b.dtype).device(b.device));
  for (size_t j = 0; j < b.members.size(); ++j) {
    const auto& p = params_[b.members[j]].param;
    auto dst = flat.narrow(0, b.offsets[j], p.numel());
    if (p.grad().defined())
      dst.copy_(p.grad().reshape({-1}));
    else
      dst.zero_();
  }
  return flat;
}

void GradBuckets::unflatten(const GradBucket& b, const torch::Tensor& flat) const {
  torch::NoGradGuard ng;
  for (size_t j = 0; j < b.members.size(); ++j) {
    auto p = params_[b.members[j]].param;
    auto src = flat.narrow(0, b.offsets[j], p.numel()).view(p.sizes());
    if (p.grad().defined())
      p.mutable_grad().copy_(src);
    else
      p.mutable_grad() = src.clone();
  }
}

void GradBuckets::launch_ready() {
  while (next_ < buckets_.size() && buckets_[next_].pending == 0) launch_(buckets_[next_++]);
}

void fail_unused_parameters(const std::vector<std::string>& unused, const std::string& strategy) {
  fail_input("{} parameter(s) received no gradient in this step under {}, e.g. {}: the loss does not depend on "
             "them. Set ddp_find_unused_parameters: true to train anyway (they are reduced as zeros).",
             unused.size(), strategy, unused.front());
}

}  // namespace trlx::dist
