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
  // ZeRO-1 keeps the full gradients and, beside them, the shard they are reduced into for the
  // update (both resident between steps: plan/lower_passes.cc; from ZeRO-2 the shard is the state;
  // over one rank the shard is the gradients themselves).
  if (zero_stage == 1 && dp > 1) out.device += shard * s.grads;
  return out;
}

double GlooReduceScatterBytes(double full_grad_bytes, int group_size, bool gloo) {
  return gloo && group_size >= 2 ? full_grad_bytes : 0;
}

}  // namespace motley
