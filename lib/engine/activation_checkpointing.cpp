// Activation checkpointing of decoder layers: recompute in backward instead of keeping activations.
#include "engine/activation_checkpointing.hpp"

#include <ATen/CPUGeneratorImpl.h>
#include <ATen/autocast_mode.h>

#include <mutex>
#include <optional>

#include "engine/autocast.hpp"
#include "model/quant4.hpp"

namespace trlx::engine {

namespace {

using torch::autograd::AutogradContext;
using torch::autograd::variable_list;

at::Generator generator_for(const torch::Device& device) {
  if (device.is_cpu()) return at::detail::getDefaultCPUGenerator();
  return at::globalContext().defaultGenerator(device);
}

torch::Tensor get_state(at::Generator gen) {
  std::lock_guard<std::mutex> lock(gen.mutex());
  return gen.get_state();
}

void set_state(at::Generator gen, const torch::Tensor& state) {
  std::lock_guard<std::mutex> lock(gen.mutex());
  gen.set_state(state);
}

// What the recompute needs besides tensors: the block itself and the state
// the forward ran under.
struct CheckpointState : torch::CustomClassHolder {
  BlockFn fn;
  std::vector<torch::Tensor> params;
  bool reentrant = false;
  bool x_requires_grad = false;
  torch::Device device{torch::kCPU};
  torch::Tensor cpu_rng, device_rng;  // generator states at the forward
  bool autocast = false;
  at::ScalarType autocast_dtype = at::kBFloat16;
  bool autocast_cache = true;
};

// Runs with the generators set to the forward's states, then puts back the
// states they had, so the recompute draws the same dropout masks and the
// training run's random stream is unaffected.
class ReplayRng {
 public:
  explicit ReplayRng(const CheckpointState& s) : s_(s) {
    cpu_now_ = get_state(at::detail::getDefaultCPUGenerator());
    set_state(at::detail::getDefaultCPUGenerator(), s.cpu_rng);
    if (s.device_rng.defined()) {
      dev_now_ = get_state(generator_for(s.device));
      set_state(generator_for(s.device), s.device_rng);
    }
  }
  ~ReplayRng() {
    set_state(at::detail::getDefaultCPUGenerator(), cpu_now_);
    if (dev_now_.defined()) set_state(generator_for(s_.device), dev_now_);
  }

 private:
  const CheckpointState& s_;
  torch::Tensor cpu_now_, dev_now_;
};

struct CheckpointFunction : torch::autograd::Function<CheckpointFunction> {
  static torch::Tensor forward(AutogradContext* ctx, const torch::Tensor& x, at::TensorList /*params*/,
                               c10::intrusive_ptr<CheckpointState> state) {
    // Autograd is off here: the block's activations are not kept.
    auto out = state->fn(x);
    ctx->save_for_backward({x});
    ctx->saved_data["state"] = c10::IValue::make_capsule(state);
    return out;
  }

  static variable_list backward(AutogradContext* ctx, variable_list grad_out) {
    auto state = c10::static_intrusive_pointer_cast<CheckpointState>(ctx->saved_data["state"].toCapsule());
    auto x = ctx->get_saved_variables()[0].detach();
    x.requires_grad_(state->x_requires_grad);
    torch::Tensor out;
    {
      torch::AutoGradMode grad_on(true);
      ReplayRng rng(*state);
      Autocast ac(state->autocast ? std::optional<at::ScalarType>(state->autocast_dtype) : std::nullopt, state->device.type(),
                  state->autocast_cache);
      // The backward below follows at once: 4-bit layers keep the weights
      // they dequantize for it (one layer's, until it is done).
      model::KeepDequantizedWeights keep;
      out = state->fn(x);
    }
    variable_list grads(2 + state->params.size());
    if (state->reentrant) {
      // A nested backward through the recomputed block: parameter gradients
      // accumulate where they live; only the input's is handed back.
      torch::autograd::backward({out}, {grad_out[0]});
      if (state->x_requires_grad) grads[0] = x.grad();
    } else {
      variable_list inputs;
      if (state->x_requires_grad) inputs.push_back(x);
      for (const auto& p : state->params) inputs.push_back(p);
      auto g = torch::autograd::grad({out}, inputs, {grad_out[0]}, /*retain_graph=*/false,
                                     /*create_graph=*/false, /*allow_unused=*/true);
      size_t k = 0;
      if (state->x_requires_grad) grads[0] = g[k++];
      for (size_t i = 0; i < state->params.size(); ++i) grads[1 + i] = g[k++];
    }
    return grads;
  }
};

}  // namespace

torch::Tensor checkpoint_block(const BlockFn& fn, const torch::Tensor& x, const std::vector<torch::Tensor>& params,
                               bool reentrant) {
  if (!torch::GradMode::is_enabled() || (params.empty() && !x.requires_grad())) return fn(x);
  auto state = c10::make_intrusive<CheckpointState>();
  state->fn = fn;
  state->params = params;
  state->reentrant = reentrant;
  state->x_requires_grad = x.requires_grad();
  state->device = x.device();
  state->cpu_rng = get_state(at::detail::getDefaultCPUGenerator());
  if (!x.device().is_cpu()) state->device_rng = get_state(generator_for(x.device()));
  state->autocast = at::autocast::is_autocast_enabled(x.device().type());
  state->autocast_dtype = at::autocast::get_autocast_dtype(x.device().type());
  state->autocast_cache = at::autocast::is_autocast_cache_enabled();
  return CheckpointFunction::apply(x, at::TensorList(params), state);
}

void checkpoint_layers(model::LanguageModelImpl& model, bool reentrant) {
  // Wraps whatever runs a layer now. Under sharding the model calls this
  // inside ShardingHooks::layer, whose backward gathers before the recompute.
  auto inner = model.model->run_layer;
  auto run = [inner](model::DecoderLayerImpl& layer, const torch::Tensor& x, const torch::Tensor& cos,
                     const torch::Tensor& sin, const model::LayerAttention& attn, model::KVCache* cache) {
    return inner ? inner(layer, x, cos, sin, attn, cache) : layer.forward(x, cos, sin, attn, cache);
  };
  model.model->run_layer = [run, reentrant](model::DecoderLayerImpl& layer, const torch::Tensor& x,
                                            const torch::Tensor& cos, const torch::Tensor& sin,
                                            const model::LayerAttention& attn, model::KVCache* cache) {
    if (cache || !torch::GradMode::is_enabled()) return run(layer, x, cos, sin, attn, cache);
    std::vector<torch::Tensor> params;
    for (auto& p : layer.parameters())
      if (p.requires_grad()) params.push_back(p);
    return checkpoint_block(
        [run, &layer, cos, sin, attn](const torch::Tensor& in) { return run(layer, in, cos, sin, attn, nullptr); },
        x, params, reentrant);
  };
}

}  // namespace trlx::engine
