#pragma once
// bf16 or fp16 autocast for the duration of a scope, as mixed precision
// does: matmuls in the low precision, reductions and the weights in fp32. Used by the engine's forwards
// and by checkpoint recomputation, which must run under the same precision as
// the forward it repeats.
#include <optional>

#include <ATen/autocast_mode.h>

namespace trlx::engine {

//
// `cache`: autocast keeps the bf16 copy of each weight until the outermost
// scope ends, which under parameter sharding holds a copy of every gathered
// layer for the whole forward; sharded runs turn it off, so each copy goes
// with the op that made it (or is kept for its backward by the op that
// saves it). Under bf16 parameter sharding the gathered weights are bf16
// already (ParameterShardingOptions::compute_dtype): no copy is made.
class Autocast {
 public:
  // `dtype`: the precision the scope computes in; none: the scope does nothing.
  Autocast(std::optional<at::ScalarType> dtype, c10::DeviceType device, bool cache = true)
      : on_(dtype.has_value()), device_(device) {
    if (!on_) return;
    prev_ = at::autocast::is_autocast_enabled(device_);
    prev_dtype_ = at::autocast::get_autocast_dtype(device_);
    prev_cache_ = at::autocast::is_autocast_cache_enabled();
    at::autocast::set_autocast_enabled(device_, true);
    at::autocast::set_autocast_dtype(device_, *dtype);
    at::autocast::set_autocast_cache_enabled(cache);
    at::autocast::increment_nesting();
  }
  ~Autocast() {
    if (!on_) return;
    if (at::autocast::decrement_nesting() == 0) at::autocast::clear_cache();
    at::autocast::set_autocast_enabled(device_, prev_);
    at::autocast::set_autocast_dtype(device_, prev_dtype_);
    at::autocast::set_autocast_cache_enabled(prev_cache_);
  }
  Autocast(const Autocast&) = delete;
  Autocast& operator=(const Autocast&) = delete;

 private:
  bool on_;
  c10::DeviceType device_;
  bool prev_ = false;
  bool prev_cache_ = true;
  at::ScalarType prev_dtype_ = at::kBFloat16;
};

}  // namespace trlx::engine
