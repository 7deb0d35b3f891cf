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

}  // namespace motley
