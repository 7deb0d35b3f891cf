// PlanEvaluation: what judging a plan says of it (its step, whether it fits), and the evaluator
// every planner takes to judge its candidates — the simulator (sim/plan_evaluator.h) in motley,
// a formula in planner tests.
#pragma once

#include <functional>
#include <limits>
#include <string>

#include "core/status.h"
#include "cost/money.h"
#include "plan/plan.h"

namespace motley {

/// What the simulator says of a plan: its step time and whether it fits. An evaluator fills in a
/// pipeline plan's routing when it has none (Zorse's, routing.h).
struct PlanEvaluation {
  double step_time_s = 0;
  bool fits_memory = true;
  double tflops = 0;
  double hfu = 0;
  std::string oom;  // which device runs out, when one does
  // The evaluation stopped at the bound it was given (EvaluateBound): the step is longer than that
  // bound, and step_time_s (where it stopped) is only a lower bound of it.
  bool stopped = false;
  // What a step sends between regions (sim/region_traffic.h): what its egress costs. Empty in one
  // region, and for a stopped evaluation.
  std::vector<RegionBytes> region_traffic;
};
/// What a search already has: a plan stepping in `stop_after_s`. An evaluation may stop once it
/// knows the plan steps slower (auto, after its first strategies: the others' candidates are
/// simulated only as far as that step). Infinity: evaluate fully.
struct EvaluateBound {
  double stop_after_s = std::numeric_limits<double>::infinity();
};
using PlanEvaluator = std::function<Result<PlanEvaluation>(const Plan&, const EvaluateBound&)>;

}  // namespace motley
