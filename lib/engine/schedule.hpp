#pragma once
// Learning-rate schedules, step for step those of transformers' Trainer: the
// optimizer step k (0-based) runs at base_lr * factor(k).
#include <cstdint>
#include <optional>
#include <string>

namespace trlx::engine {

struct Schedule {
  std::string type = "linear";  // linear | cosine | cosine_with_min_lr | constant | constant_with_warmup
  double base_lr = 0;
  int64_t total_steps = 0;
  int64_t warmup_steps = 0;
  double num_cycles = 0.5;
  double min_lr_rate = 0;  // cosine_with_min_lr

  double factor(int64_t step) const;
  double lr(int64_t step) const { return base_lr * factor(step); }
};

// Warmup as the Trainer resolves it: a count when >= 1, else a fraction of
// all steps (rounded up). `warmup_ratio` is the older spelling of a fraction.
int64_t warmup_steps_for(double warmup_steps, std::optional<double> warmup_ratio, int64_t total_steps);

}  // namespace trlx::engine
