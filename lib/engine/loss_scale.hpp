#pragma once
// Dynamic loss scaling for fp16 mixed precision, update for update that of
// torch.amp.GradScaler with its defaults (transformers' Trainer under
// `fp16: true`): the loss is multiplied by the scale before backward, so
// small gradients survive fp16; an update whose gradients overflow is
// skipped and the scale halves; after `growth_interval` clean updates in a
// row it doubles.
#include <cstdint>
#include <string>

#include <nlohmann/json_fwd.hpp>

namespace trlx::engine {

class LossScale {
 public:
  explicit LossScale(double init_scale = 65536.0, int64_t growth_interval = 2000)
      : scale_(init_scale), growth_interval_(growth_interval) {}

  double scale() const { return scale_; }
  // Updates skipped so far (overflowed gradients).
  int64_t skipped() const { return skipped_; }

  // After an update's gradients were checked: `overflow` when their norm was
  // not finite (the update is skipped).
  void update(bool overflow);

  // The smallest scale trlx goes down to. Gradients that overflow at a scale
  // of 1 overflow unscaled: the loss or the model is broken, not the
  // precision, and the run stops instead of halving forever.
  static constexpr double kMinScale = 1.0;

  // For checkpoints: the scale, the clean updates in a row and the skipped
  // count, so a resumed run scales as the uninterrupted one would.
  nlohmann::ordered_json state() const;
  // InputError naming `where` when `state` is not one state() wrote.
  void load(const nlohmann::json& state, const std::string& where);

 private:
  double scale_;
  int64_t growth_interval_;
  int64_t growth_tracker_ = 0;
  int64_t skipped_ = 0;
};

}  // namespace trlx::engine
