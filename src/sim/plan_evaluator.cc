#include "sim/plan_evaluator.h"

#include "plan/lower.h"
#include "sim/routing_costs.h"
#include "sim/simulator.h"

namespace motley {

PlanEvaluator SimulationEvaluator(const Cluster& cluster, const ModelSpec& model, const CostModel& costs) {
  return [&cluster, &model, &costs](const Plan& given) -> Result<PlanEvaluation> {
    Plan plan = given;
    FillZorseRouting(&plan, costs);
    MOTLEY_ASSIGN_OR_RETURN(Schedule s, LowerPlan(plan, cluster, model));
    MOTLEY_ASSIGN_OR_RETURN(SimResult r, Simulate(s, cluster, costs, {.check_buffers = false}));
    PlanEvaluation e;
    e.step_time_s = r.step_time_s;
    e.fits_memory = r.fits_memory;
    e.tflops = r.tflops;
    e.hfu = r.hfu;
    e.oom = r.oom_message;
    return e;
  };
}

}  // namespace motley
