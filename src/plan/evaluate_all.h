// Evaluating many candidate plans at once: the planners' re-ranking spends most of its time in
// the evaluator (lowering and simulating each plan), and the plans are independent, so they are
// evaluated on as many threads as the machine has cores.
#pragma once

#include <vector>

#include "plan/zorse_planner.h"

namespace motley {

/// evaluate(plans[i], bound) for every i, in parallel; the answers in the plans' order. REQUIRES:
/// `evaluate` may be called from several threads at once (SimulationEvaluator may).
std::vector<Result<PlanEvaluation>> EvaluateAll(const std::vector<Plan>& plans, const PlanEvaluator& evaluate,
                                                const EvaluateBound& bound = {});

}  // namespace motley
