// Learning-rate schedules, step for step those of transformers' Trainer.
#include "engine/schedule.hpp"

#include <algorithm>
#include <cmath>

#include "core/error.hpp"

namespace trlx::engine {

double Schedule::factor(int64_t step) const {
  const double s = static_cast<double>(step);
  const double warm = static_cast<double>(warmup_steps);
  if (type == "constant") return 1.0;
  if (step < warmup_steps) return s / std::max(1.0, warm);
  if (type == "constant_with_warmup") return 1.0;
  const double span = std::max(1.0, static_cast<double>(total_steps - warmup_steps));
  if (type == "linear") return std::max(0.0, static_cast<double>(total_steps - step) / span);
  const double progress = (s - warm) / span;
  double f = 0.5 * (1.0 + std::cos(M_PI * num_cycles * 2.0 * progress));
  if (type == "cosine") return std::max(0.0, f);
  if (type == "cosine_with_min_lr") return std::max(0.0, f * (1 - min_lr_rate) + min_lr_rate);
  throw Error(fmt::format("internal: unknown schedule {}", type));
}

int64_t warmup_steps_for(double warmup_steps, std::optional<double> warmup_ratio, int64_t total_steps) {
  if (warmup_ratio) return static_cast<int64_t>(std::ceil(static_cast<double>(total_steps) * *warmup_ratio));
  if (warmup_steps >= 1) return static_cast<int64_t>(warmup_steps);
  return static_cast<int64_t>(std::ceil(static_cast<double>(total_steps) * warmup_steps));
}

}  // namespace trlx::engine
