// The Zorse planner (zorse.txt §4.3): pipeline parallelism across GPU groups with ZeRO-2 inside
// each group, interleaved ministages, parameter and activation offload.
//
//  Phase 1: the cluster's bandwidth graph (devices of a node contracted) is cut into k groups for
//  every k by SPLIT (min_k_cut.h), so fast links stay inside groups.
//  Phase 2, per partition: groups ordered by descending intra-group bandwidth; layers split in
//  proportion to group speed; every microbatch size that divides the batch x every ministage count
//  is scored with a latency model (Eq. 1) and a memory model (Eq. 2); a device's share of
//  microbatches follows its speed; plans over any device's memory are dropped.
//  Finally the best few by the latency model are re-ranked by `evaluate` (the simulator).
//  The phases, each in a file of its own, are listed in zorse_search.h.
#pragma once

#include <cstdint>
#include <functional>
#include <limits>
#include <string>
#include <vector>

#include "core/cluster.h"
#include "core/model.h"
#include "core/status.h"
#include "plan/plan.h"
#include "plan/plan_evaluation.h"
#include "plan/planner_costs.h"
#include "plan/zorse_types.h"

namespace motley {

Result<ZorsePlan> PlanZorse(const Cluster& cluster, const ModelSpec& model, const PlannerCosts& costs,
                            const ZorseRequest& request, const PlanEvaluator& evaluate);

/// Phase 2 for one fixed grouping of devices (exposed for tests and the exhaustive search):
/// every candidate (microbatch size x ministage count) that fits, scored by the models.
std::vector<ZorseCandidate> ZorseCandidatesForGroups(const Cluster& cluster, const ModelSpec& model,
                                                     const PlannerCosts& costs, const ZorseRequest& request,
                                                     std::vector<std::vector<int>> groups);

}  // namespace motley
