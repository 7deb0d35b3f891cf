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
#include "cost/flextp_balancer.h"
#include "plan/schedule.h"
#include "sim/cost_model.h"

namespace motley {

/// One tensor-parallel team as the simulator predicts FlexTP balances it.
struct FlexTpTeamPrediction {
  std::vector<int32_t> ranks;   // team order
  std::vector<double> alone_s;  // each rank's tensor-parallel compute a step at its own share, at its speed
  TeamBalance balance;          // the balancer's decision; balance.any() false: nothing moved or pruned
};

/// The schedule's tensor-parallel teams with slow ranks, under its FlexTP mode (none with mode "off").
std::vector<FlexTpTeamPrediction> PredictFlexTpTeams(const Schedule& schedule, const CostModel& costs,
                                                     const TensorParallelConfig& config);

/// Each rank's compute stretch (by rank; 1 outside tensor-parallel teams and in teams that moved
/// and pruned nothing).
std::vector<double> FlexTpComputeFactors(const Schedule& schedule,
                                         const std::vector<FlexTpTeamPrediction>& teams);
inline std::vector<double> FlexTpComputeFactors(const Schedule& schedule, const CostModel& costs,
                                                const TensorParallelConfig& config) {
  return FlexTpComputeFactors(schedule, PredictFlexTpTeams(schedule, costs, config));
}

}  // namespace motley
