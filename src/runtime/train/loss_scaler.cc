#include "runtime/train/loss_scaler.h"

namespace motley {

bool LossScaler::UnscaleAndUpdate(std::vector<ParamShard>& shards) {
  torch::NoGradGuard no_grad;
  bool finite = true;
  for (auto& s : shards) {
    if (!s.grad.defined()) continue;
    s.grad.div_(scale_);
    finite = finite && torch::isfinite(s.grad).all().item<bool>();
  }
  Update(finite);
  return finite;
}

void LossScaler::Update(bool finite) {
  if (!finite) {
    scale_ *= config_.backoff_factor;
    good_steps_ = 0;
  } else if (++good_steps_ >= config_.growth_interval) {
    scale_ *= config_.growth_factor;
    good_steps_ = 0;
  }
}

}  // namespace motley
