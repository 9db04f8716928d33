// What every strategy shares (gradient clipping, the gradient sync check, sums over ranks) and the single-process one.
#include "dist/strategy/strategy.hpp"

#include <fmt/format.h>

#include "core/error.hpp"
#include "dist/comm/host_values.hpp"
#include "model/decoder.hpp"

namespace trlx::dist {

namespace {

// An exact fingerprint of a tensor's bytes: its bits as integers, weighted by
// position so that permutations differ too.
int64_t fingerprint(const torch::Tensor& t) {
  auto c = t.detach().contiguous().view({-1});
  torch::Tensor bits;
  switch (c.element_size()) {
    case 8: bits = c.view(torch::kInt64); break;
    case 4: bits = c.view(torch::kInt32).to(torch::kInt64); break;
    case 2: bits = c.view(torch::kInt16).to(torch::kInt64); break;
    default: bits = c.view(torch::kUInt8).to(torch::kInt64); break;
  }
  auto w = torch::arange(bits.numel(), bits.options()).remainder(1000003) + 1;
  return (bits * w).sum().item<int64_t>();
}

class SingleStrategy : public Strategy {
 public:
  using Strategy::Strategy;
  std::string name() const override { return "single"; }
  void setup(const std::vector<NamedParam>& trainable) override { params_ = trainable; }
  void begin_backward(bool, bool) override {}
  void end_backward() override {}
};

}  // namespace

double Strategy::clip_grad_norm(double max_norm, double inv_scale) {
  std::vector<torch::Tensor> ps;
  for (const auto& p : params_)
    if (p.param.grad().defined()) ps.push_back(p.param);
  if (inv_scale != 1.0) {
    torch::NoGradGuard ng;
    for (auto& p : ps) p.mutable_grad().mul_(inv_scale);
  }
  return torch::nn::utils::clip_grad_norm_(ps, max_norm);
}

void Strategy::check_grads_in_sync() {
  std::vector<int64_t> mine;
  for (const auto& p : params_) {
    const auto& g = p.param.grad();
    mine.push_back(g.defined() ? fingerprint(g) : 0);
  }
  const auto all = all_gather_values(*comm_, mine);
  for (size_t i = 0; i < mine.size(); ++i)
    for (int r = 1; r < world_size(); ++r)
      if (all[static_cast<size_t>(r)][i] != all[0][i])
        throw Error(fmt::format("gradients are out of sync across ranks: parameter {} differs between rank 0 and "
                                "rank {} after reduction (debug_check_grad_sync_steps). Every forward that feeds "
                                "the loss must go through the engine.",
                                params_[i].name, r));
}

void Strategy::write_parameters(model::LanguageModelImpl& model,
                                const std::function<void(const std::string& name, torch::Tensor& param)>& fill) {
  torch::NoGradGuard ng;
  for (auto& p : model.named_parameters(true)) fill(p.key(), p.value());
}

void Strategy::lerp_by_name(model::LanguageModelImpl& dst, model::LanguageModelImpl& src, double alpha,
                            const std::function<bool(const torch::Tensor&)>& skip) {
  torch::NoGradGuard ng;
  auto from = src.named_parameters(true);
  for (auto& p : dst.named_parameters(true)) {
    if (skip && skip(p.value())) continue;
    const auto* s = from.find(p.key());
    if (!s) continue;
    p.value().mul_(1.0 - alpha).add_(s->to(p.value().device(), p.value().scalar_type()), alpha);
  }
}

void Strategy::sum_across_ranks(std::vector<double>& values) { all_reduce_values(*comm_, values, ReduceOp::Sum); }
torch::Tensor Strategy::sum_across_ranks(const torch::Tensor& t) {
  if (comm_->backend() == "single") return t;
  // Already on the communicator's device (the model's): reduced there. Any
  // other tensor goes through the host, as host values do.
  const bool on_device = t.device() == comm_->device();
  auto x = on_device ? t.contiguous().clone() : comm_->host_to_device(t.to(torch::kCPU).contiguous());
  comm_->all_reduce(x, ReduceOp::Sum)->wait();
  return on_device ? x : comm_->device_to_host(x).to(t.device());
}

void Strategy::max_across_ranks(std::vector<double>& values) { all_reduce_values(*comm_, values, ReduceOp::Max); }
std::vector<std::vector<double>> Strategy::gather_across_ranks(const std::vector<double>& mine) {
  return all_gather_doubles(*comm_, mine);
}

std::unique_ptr<Strategy> make_single_strategy(std::shared_ptr<Communicator> comm) {
  return std::make_unique<SingleStrategy>(std::move(comm));
}

}  // namespace trlx::dist
