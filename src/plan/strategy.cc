#include "plan/strategy.h"

namespace motley {

const std::vector<StrategyInfo>& Strategies() {
  static const std::vector<StrategyInfo> strategies = {
      {"auto", "any", "the best plan over every family below (motley's default)"},
      {"zorse", "pipeline", "pipeline across GPU groups, ZeRO-2 inside, interleaved ministages with offload"},
      {"poplar", "data-parallel", "ZeRO 0-3 with a batch size per GPU from its measured speed curve"},
      {"torchtitan-het", "pipeline", "baseline: symmetric PP x DP (ZeRO-2) x TP mesh, uneven layer split"},
      {"hexiscale", "pipeline", "baseline: asymmetric PP + ZeRO-2 + TP, no offload or ministages"},
      {"cephalo", "data-parallel", "baseline: ZeRO-3 over all GPUs, batch by speed, state shards by memory"},
      {"deepspeed-even", "data-parallel", "baseline: ZeRO with the same batch on every GPU"},
      {"fastest-only", "data-parallel", "baseline: only the fastest GPU type, homogeneous"},
  };
  return strategies;
}

}  // namespace motley
