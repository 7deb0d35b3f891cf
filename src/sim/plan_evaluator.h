// The simulator as the planners' judge: lowers a plan, runs its step, reports time and memory.
#pragma once

#include <cstdint>
#include <vector>

#include "plan/zorse_planner.h"
#include "sim/cost_model.h"

namespace motley {

/// Where an evaluator's time went (`motley plan --explain --json` reports it).
struct EvaluationStats {
  int evaluations = 0;  // plans lowered and simulated
  int cached = 0;       // plans asked for again (another strategy, or another device subset, made the same)
  int stopped = 0;      // simulations stopped once slower than a plan already found (EvaluateBound)
  double lower_s = 0;   // summed over the threads that evaluate (evaluate_all.h)
  double simulate_s = 0;
};

/// Each device's class: devices of one class cost alike in the simulator — their compute (type,
/// profile, slowdown, peak), host link and memory (LowerOptions::device_class).
std::vector<int64_t> DeviceCostClasses(const Cluster& cluster, const CostModel& costs);

/// REQUIRES: the arguments outlive the evaluator. Fills in Zorse routing for pipeline plans that
/// have none. Remembers what it has evaluated: the same plan (whichever strategy made it) is
/// simulated once; alike ranks on alike devices share one program (LowerOptions::device_class). May
/// be called from several threads at once. `stats`, when given, is filled as it goes.
PlanEvaluator SimulationEvaluator(const Cluster& cluster, const ModelSpec& model, const CostModel& costs,
                                  EvaluationStats* stats = nullptr);

}  // namespace motley
