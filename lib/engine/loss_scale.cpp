// Dynamic loss scaling for fp16 mixed precision, as torch.amp.GradScaler does it.
#include "engine/loss_scale.hpp"

#include <cmath>

#include <nlohmann/json.hpp>

#include "core/error.hpp"

namespace trlx::engine {

void LossScale::update(bool overflow) {
  if (overflow) {
    scale_ *= 0.5;
    growth_tracker_ = 0;
    ++skipped_;
    return;
  }
  if (++growth_tracker_ == growth_interval_) {
    if (std::isfinite(scale_ * 2.0)) scale_ *= 2.0;
    growth_tracker_ = 0;
  }
}

nlohmann::ordered_json LossScale::state() const {
  return {{"scale", scale_}, {"growth_tracker", growth_tracker_}, {"skipped_updates", skipped_}};
}

void LossScale::load(const nlohmann::json& state, const std::string& where) {
  try {
    const double scale = state.at("scale").get<double>();
    const int64_t tracker = state.at("growth_tracker").get<int64_t>();
    const int64_t skipped = state.at("skipped_updates").get<int64_t>();
    if (!(scale >= kMinScale) || !std::isfinite(scale) || tracker < 0 || tracker >= growth_interval_ || skipped < 0)
      fail_input("{}: loss_scale {} is out of range (scale a finite number >= {}, growth_tracker in [0, {}), "
                 "skipped_updates >= 0)",
                 where, state.dump(), kMinScale, growth_interval_);
    scale_ = scale;
    growth_tracker_ = tracker;
    skipped_ = skipped;
  } catch (const nlohmann::json::exception& e) {
    fail_input("{}: loss_scale is not what trlx saves ({}): {}", where, e.what(), state.dump());
  }
}

}  // namespace trlx::engine
