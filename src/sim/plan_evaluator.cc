#include "sim/plan_evaluator.h"

#include <chrono>
#include <map>
#include <memory>
#include <mutex>
#include <string>

#include "plan/lower.h"
#include "plan/plan_io.h"
#include "sim/routing_costs.h"
#include "sim/simulator.h"

namespace motley {
namespace {

double SecondsSince(std::chrono::steady_clock::time_point t) {
  return std::chrono::duration<double>(std::chrono::steady_clock::now() - t).count();
}

}  // namespace

PlanEvaluator SimulationEvaluator(const Cluster& cluster, const ModelSpec& model, const CostModel& costs,
                                  EvaluationStats* stats) {
  struct Memory {
    std::mutex mutex;  // the evaluator is called from several threads (evaluate_all.h)
    std::map<std::string, PlanEvaluation> seen;
  };
  auto memory = std::make_shared<Memory>();
  return [&cluster, &model, &costs, stats, memory](const Plan& given) -> Result<PlanEvaluation> {
    Plan plan = given;
    // What the plan runs, not who made it or for which files.
    plan.strategy.clear();
    plan.model.clear();
    plan.cluster.clear();
    // Checked before the routing, which takes time and memory in proportion to the microbatches.
    MOTLEY_RETURN_IF_ERROR(ValidatePlan(plan, cluster, model));
    FillZorseRouting(&plan, costs);
    std::string key = PlanToJson(plan).dump();
    {
      std::lock_guard lock(memory->mutex);
      if (auto it = memory->seen.find(key); it != memory->seen.end()) {
        if (stats != nullptr) ++stats->cached;
        return it->second;
      }
    }
    auto start = std::chrono::steady_clock::now();
    MOTLEY_ASSIGN_OR_RETURN(Schedule s, LowerPlan(plan, cluster, model, {.check = false}));
    const double lower_s = SecondsSince(start);
    start = std::chrono::steady_clock::now();
    MOTLEY_ASSIGN_OR_RETURN(SimResult r, Simulate(s, cluster, costs, {.check_buffers = false}));
    const double simulate_s = SecondsSince(start);
    std::lock_guard lock(memory->mutex);
    if (stats != nullptr) {
      ++stats->evaluations;
      stats->lower_s += lower_s;
      stats->simulate_s += simulate_s;
    }
    PlanEvaluation e;
    e.step_time_s = r.step_time_s;
    e.fits_memory = r.fits_memory;
    e.tflops = r.tflops;
    e.hfu = r.hfu;
    e.oom = r.oom_message;
    memory->seen.emplace(std::move(key), e);
    return e;
  };
}

}  // namespace motley
