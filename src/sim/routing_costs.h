// Filling in a pipeline plan's cross-stage routing from the cost model, for plans written without
// one (the planner writes its own).
#pragma once

#include "plan/plan.h"
#include "sim/cost_model.h"

namespace motley {

/// Gives every group of a pipeline plan that has no routing Zorse's routing (routing.h), timing a
/// microbatch on a device as the forward and backward of its group's layers. Returns how many
/// groups it filled. REQUIRES: a plan that passed ValidatePlan.
int FillZorseRouting(Plan* plan, const CostModel& costs);

/// The routing a plan without one gets wherever it is loaded — `motley schedule`, `simulate`
/// (whatever --profile it is given) and `train --plan` alike, so that all three lower the same
/// schedule: Zorse's, timed by the roofline from the cluster's catalog and emulation (never a
/// profile). Planners write their own routing into the plans they choose. Returns how many groups
/// it filled. REQUIRES: a plan that passed ValidatePlan.
int FillDefaultRouting(Plan* plan, const Cluster& cluster, const ModelSpec& model);

}  // namespace motley
