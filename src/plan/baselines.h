// Every planning strategy motley offers (strategy.h), on the same cost models: motley's own
// (zorse, poplar) and the baselines of the Zorse and Poplar evaluations, each as a Plan.
//
//  * deepspeed-even: ZeRO with the same batch on every device (the lowest stage that fits).
//  * cephalo: ZeRO-3 over all devices, an uneven batch by speed and gradient accumulation.
//  * fastest-only: Poplar on the homogeneous subset of the fastest GPU type.
//  * hexiscale: asymmetric pipeline + ZeRO-2 (+ tensor-parallel pairs inside NVLink nodes), 1F1B,
//    no offload, no ministages.
//  * torchtitan-het: a symmetric mesh — pipeline stages of equal size x data parallel (ZeRO-2) x
//    tensor parallel — with layers split by stage speed, 1F1B; best over every valid mesh.
//  * auto: the best plan of all of the above.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "plan/zorse_planner.h"

namespace motley {

struct PlanRequest {
  int64_t global_batch_sequences = 0;
  int64_t seq_len = 1024;
  Precision precision = Precision::kBf16;
  bool activation_checkpointing = true;
  bool gradient_clipping = true;  // the job clips to a global norm: every plan is judged with it (Plan::gradient_clipping)
};

struct StrategyOutcome {
  std::string strategy;
  Status status;  // why it has no plan, when it has none
  Plan plan;
  PlanEvaluation evaluation;
  std::string explain;
};

/// One strategy by name ("auto" included). The outcome's status says when it found nothing.
StrategyOutcome PlanWithStrategy(const std::string& strategy, const Cluster& cluster, const ModelSpec& model,
                                 const PlannerCosts& costs, const PlanRequest& request,
                                 const PlanEvaluator& evaluate);

/// Every strategy but "auto", in the order of StrategyNames().
std::vector<StrategyOutcome> PlanEveryStrategy(const Cluster& cluster, const ModelSpec& model,
                                               const PlannerCosts& costs, const PlanRequest& request,
                                               const PlanEvaluator& evaluate);

}  // namespace motley
