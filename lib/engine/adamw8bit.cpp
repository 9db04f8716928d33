// AdamW with 8-bit blockwise moments (bitsandbytes' AdamW8bit).
#include "engine/adamw8bit.hpp"

#include <cmath>
#include <map>
#include <string>

#include "model/quant4.hpp"

namespace trlx::engine {

namespace {

constexpr int64_t kBlock = 256;
constexpr int64_t kMin8bit = 4096;

struct Maps {
  torch::Tensor m, v;  // signed, unsigned
};

const Maps& maps_on(const torch::Device& device) {
  static thread_local std::map<std::string, Maps> cache;
  auto& slot = cache[device.str()];
  if (!slot.m.defined()) {
    slot.m = model::dynamic_map_8bit(true).to(device);
    slot.v = model::dynamic_map_8bit(false).to(device);
  }
  return slot;
}

}  // namespace

bool is_adamw_8bit(const std::string& optim) {
  return optim == "adamw_8bit" || optim == "paged_adamw_8bit" || optim == "adamw_bnb_8bit";
}

void adamw_8bit_step(torch::optim::AdamW& optimizer) {
  torch::NoGradGuard no_grad;
  for (auto& group : optimizer.param_groups()) {
    auto& o = static_cast<torch::optim::AdamWOptions&>(group.options());
    const auto [beta1, beta2] = o.betas();
    const double lr = o.lr(), wd = o.weight_decay(), eps = o.eps();
    for (auto& p : group.params()) {
      if (!p.grad().defined()) continue;
      const bool eight = p.numel() >= kMin8bit;
      auto& slot = optimizer.state()[p.unsafeGetTensorImpl()];
      if (!slot) {
        auto fresh = std::make_unique<torch::optim::AdamWParamState>();
        fresh->step(0);
        if (eight) {
          const int64_t blocks = (p.numel() + kBlock - 1) / kBlock;
          fresh->exp_avg(torch::zeros({p.numel()}, p.options().dtype(torch::kUInt8)));
          fresh->exp_avg_sq(torch::zeros({p.numel()}, p.options().dtype(torch::kUInt8)));
          fresh->max_exp_avg_sq(torch::zeros({2, blocks}, p.options().dtype(torch::kFloat32)));
        } else {
          fresh->exp_avg(torch::zeros_like(p, torch::kFloat32));
          fresh->exp_avg_sq(torch::zeros_like(p, torch::kFloat32));
        }
        slot = std::move(fresh);
      }
      auto& s = static_cast<torch::optim::AdamWParamState&>(*slot);
      s.step(s.step() + 1);
      const auto step = static_cast<double>(s.step());
      const double correction1 = 1.0 - std::pow(beta1, step);
      const double correction2 = std::sqrt(1.0 - std::pow(beta2, step));
      const auto g = p.grad().to(torch::kFloat32).reshape({-1});
      auto w = p.detach().to(torch::kFloat32).reshape({-1});
      if (!eight) {
        // bitsandbytes' 32-bit Adam: the same update, eps scaled by the
        // second correction.
        auto m = s.exp_avg().view({-1}), v = s.exp_avg_sq().view({-1});
        m.mul_(beta1).add_(g, 1.0 - beta1);
        v.mul_(beta2).addcmul_(g, g, 1.0 - beta2);
        if (wd > 0) w.mul_(1.0 - lr * wd);
        w.add_(m / (v.sqrt() + eps * correction2), -lr * correction2 / correction1);
      } else {
        const auto& maps = maps_on(p.device());
        auto absmax = s.max_exp_avg_sq();
        auto m = model::dequantize_blockwise(s.exp_avg(), absmax[0], maps.m, kBlock);
        auto v = model::dequantize_blockwise(s.exp_avg_sq(), absmax[1], maps.v, kBlock);
        m.mul_(beta1).add_(g, 1.0 - beta1);
        v.mul_(beta2).addcmul_(g, g, 1.0 - beta2);
        auto denom = (v.sqrt() / correction2).add_(eps);
        if (wd > 0) w.mul_(1.0 - lr * wd);
        w.addcdiv_(m, denom, -lr / correction1);
        auto [mq, ma] = model::quantize_blockwise(m, maps.m, kBlock);
        auto [vq, va] = model::quantize_blockwise(v, maps.v, kBlock);
        s.exp_avg().copy_(mq);
        s.exp_avg_sq().copy_(vq);
        absmax[0].copy_(ma);
        absmax[1].copy_(va);
      }
      p.detach().copy_(w.view(p.sizes()));
    }
  }
}

}  // namespace trlx::engine
