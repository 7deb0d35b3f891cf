// Dynamic loss scaling for fp16 training: the loss is multiplied by `scale` before backward so
// small gradients survive fp16; after backward the gradients are unscaled and checked. A step with
// an inf/NaN gradient is skipped and the scale halved; after `growth_interval` clean steps in a
// row the scale doubles. (The scheme of torch.cuda.amp.GradScaler, with its defaults.)
#pragma once

#include <cstdint>
#include <vector>

#include "runtime/optim/adamw.h"

namespace motley {

struct LossScalerConfig {
  double initial_scale = 65536.0;  // 2^16
  double growth_factor = 2.0;
  double backoff_factor = 0.5;
  int64_t growth_interval = 2000;  // clean steps before the scale grows
};

class LossScaler {
 public:
  explicit LossScaler(LossScalerConfig config = {}) : config_(config), scale_(config.initial_scale) {}

  double scale() const { return scale_; }
  int64_t good_steps() const { return good_steps_; }
  void Restore(double scale, int64_t good_steps) {
    scale_ = scale;
    good_steps_ = good_steps;
  }
  /// Divides the gradients by the scale; returns false (skip this step) when any is inf or NaN.
  /// Updates the scale either way.
  bool UnscaleAndUpdate(std::vector<ParamShard>& shards);
  /// The scale's update after a step whose gradients were finite (`finite`) or not — what
  /// UnscaleAndUpdate does after its check, for a step whose check was made elsewhere (the
  /// multi-process runtime: one collective decides for every rank).
  void Update(bool finite);

 private:
  LossScalerConfig config_;
  double scale_;
  int64_t good_steps_ = 0;
};

}  // namespace motley
