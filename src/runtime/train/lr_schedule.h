// The learning rate at each step: linear warm-up to the peak, then cosine or linear decay to
// min_lr_ratio x peak at the last step (or constant). Torch-free.
#pragma once

#include <cstdint>

#include "core/job.h"

namespace motley {

/// `step` counts from 0; `total_steps` is the run's length.
double LearningRate(const OptimizerConfig& opt, const LrScheduleConfig& schedule, int64_t step,
                    int64_t total_steps);

}  // namespace motley
