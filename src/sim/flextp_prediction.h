// FlexTP in the simulator: what each rank of a tensor-parallel team computes under the schedule's
// FlexTP mode when the team's speeds differ (a device's Slowdown: its emulation, or a straggler
// measured or given to `motley simulate --straggler`). For each team, every rank's compute a step —
// its forward and backward ops as the cost model times them — goes to the FlexTpBalancer, the
// decision the runtime's FlexTpTeam takes from its measured times (cost/flextp_balancer.h), with the
// same costs (FlexTpCostsFor: the link between the team's devices); every rank's compute ops are then
// stretched to the team's time under that balance (TeamBalance::team_s: block by block, each
// attention and MLP block as long as its slowest rank's — its own units kept or pruned, the units it
// borrows — plus the migration's traffic) over the rank's time alone. Mode "off", or a team within
// the straggler threshold: 1 everywhere (the team's all-reduces make it wait for its slowest rank,
// as the runtime does).
#pragma once

#include <vector>

#include "core/job.h"
#include "plan/schedule.h"
#include "sim/cost_model.h"

namespace motley {

/// Each rank's compute stretch (by rank; 1 outside tensor-parallel teams).
std::vector<double> FlexTpComputeFactors(const Schedule& schedule, const CostModel& costs,
                                         const TensorParallelConfig& config);

}  // namespace motley
