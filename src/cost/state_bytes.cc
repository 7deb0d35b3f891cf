#include "cost/state_bytes.h"

#include "core/model.h"

namespace motley {

RankStateBytes ZeroStateBytes(double params, double dp, int zero_stage, Precision precision,
                              StatePlacement placement) {
  const StateBytesPerParam s = StateBytes(precision);
  const double shard = params / dp;
  switch (placement) {
    case StatePlacement::kHost:
      return {0, shard * (s.params + s.optimizer)};
    case StatePlacement::kResidentShard:
      return {shard * (s.params + s.optimizer), 0};
    case StatePlacement::kDevice:
      break;
  }
  RankStateBytes out;
  out.device += (zero_stage >= 3 ? shard : params) * s.params;
  out.device += (zero_stage >= 2 ? shard : params) * s.grads;
  out.device += (zero_stage >= 1 ? shard : params) * s.optimizer;
  return out;
}

double GlooReduceScatterBytes(double full_grad_bytes, int group_size, bool gloo) {
  return gloo && group_size >= 2 ? full_grad_bytes : 0;
}

}  // namespace motley
