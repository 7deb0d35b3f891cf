// The simulator as the planners' judge: lowers a plan, runs its step, reports time and memory.
#pragma once

#include "plan/zorse_planner.h"
#include "sim/cost_model.h"

namespace motley {

/// REQUIRES: the arguments outlive the evaluator. Fills in Zorse routing for pipeline plans that
/// have none.
PlanEvaluator SimulationEvaluator(const Cluster& cluster, const ModelSpec& model, const CostModel& costs);

}  // namespace motley
