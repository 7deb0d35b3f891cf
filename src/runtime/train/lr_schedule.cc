#include "runtime/train/lr_schedule.h"

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <numbers>

namespace motley {

double LearningRate(const OptimizerConfig& opt, const LrScheduleConfig& schedule, int64_t step,
                    int64_t total_steps) {
  const double peak = opt.lr;
  if (step < schedule.warmup_steps) return peak * static_cast<double>(step + 1) / schedule.warmup_steps;
  if (schedule.decay == "constant") return peak;
  const double floor = peak * schedule.min_lr_ratio;
  const int64_t decay_steps = std::max<int64_t>(1, total_steps - 1 - schedule.warmup_steps);
  const double progress =
      std::clamp(static_cast<double>(step - schedule.warmup_steps) / decay_steps, 0.0, 1.0);
  const double shape =
      schedule.decay == "linear" ? 1 - progress : 0.5 * (1 + std::cos(std::numbers::pi * progress));
  return floor + (peak - floor) * shape;
}

}  // namespace motley
