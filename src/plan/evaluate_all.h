// Evaluating many candidate plans at once: the planners' re-ranking spends most of its time in
// the evaluator (lowering and simulating each plan), and the plans are independent, so they are
// evaluated on as many threads as the machine has cores.
#pragma once

#include <cstddef>
#include <functional>
#include <limits>
#include <vector>

#include "plan/plan_evaluation.h"

namespace motley {

/// fn(i) for every i in [0, n), on as many threads as the machine has cores (at most max_threads); returns
/// when all have run. An exception in one is thrown here, after every thread has stopped. REQUIRES: fn may
/// run on several threads at once.
void ForEachOnEveryCore(size_t n, const std::function<void(size_t)>& fn,
                        size_t max_threads = std::numeric_limits<size_t>::max());

/// evaluate(plans[i], bound) for every i, in parallel; the answers in the plans' order. REQUIRES:
/// `evaluate` may be called from several threads at once (SimulationEvaluator may).
std::vector<Result<PlanEvaluation>> EvaluateAll(const std::vector<Plan>& plans, const PlanEvaluator& evaluate,
                                                const EvaluateBound& bound = {});

}  // namespace motley
