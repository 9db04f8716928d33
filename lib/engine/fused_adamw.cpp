// AdamW's update through ATen's fused kernel, one pass per tensor group.
#include "engine/fused_adamw.hpp"

#include <map>
#include <tuple>

namespace trlx::engine {

void fused_adamw_step(torch::optim::AdamW& optimizer) {
  torch::NoGradGuard no_grad;
  for (auto& group : optimizer.param_groups()) {
    auto& o = static_cast<torch::optim::AdamWOptions&>(group.options());
    TORCH_CHECK(!o.amsgrad(), "fused_adamw_step: amsgrad is not supported");
    // The kernel takes tensors of one device and dtype at a time.
    struct Lists {
      std::vector<torch::Tensor> params, grads, exp_avgs, exp_avg_sqs, steps;
    };
    std::map<std::pair<std::string, int>, Lists> by_kind;
    for (auto& p : group.params()) {
      if (!p.grad().defined()) continue;
      auto& slot = optimizer.state()[p.unsafeGetTensorImpl()];
      if (!slot) {
        auto fresh = std::make_unique<torch::optim::AdamWParamState>();
        fresh->step(0);
        fresh->exp_avg(torch::zeros_like(p, torch::MemoryFormat::Preserve));
        fresh->exp_avg_sq(torch::zeros_like(p, torch::MemoryFormat::Preserve));
        slot = std::move(fresh);
      }
      auto& s = static_cast<torch::optim::AdamWParamState&>(*slot);
      s.step(s.step() + 1);
      auto& l = by_kind[{p.device().str(), static_cast<int>(p.scalar_type())}];
      l.params.push_back(p);
      l.grads.push_back(p.grad());
      l.exp_avgs.push_back(s.exp_avg());
      l.exp_avg_sqs.push_back(s.exp_avg_sq());
      l.steps.push_back(torch::full({}, static_cast<double>(s.step()),
                                    torch::TensorOptions().dtype(torch::kFloat32).device(p.device())));
    }
    const auto [beta1, beta2] = o.betas();
    for (auto& [kind, l] : by_kind)
      at::_fused_adamw_(l.params, l.grads, l.exp_avgs, l.exp_avg_sqs, {}, l.steps, o.lr(), beta1, beta2,
                        o.weight_decay(), o.eps(), /*amsgrad=*/false, /*maximize=*/false);
  }
}

}  // namespace trlx::engine
