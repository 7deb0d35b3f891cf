// motley schedule --plan P [--cluster C] [--model M] [--json]: the per-rank op programs.
#include <fmt/format.h>

#include "api/plan_inputs.h"
#include "cli/args.h"
#include "cli/command.h"
#include "plan/lower.h"
#include "sim/routing_costs.h"

namespace motley::cli {

int RunSchedule(const std::vector<std::string>& args) {
  CLI::App app(
      "Lower a plan to its schedule: one op program per rank, each op with its stream, work, "
      "memory effects and dependencies.",
      "motley schedule");
  std::string plan_path, cluster, model;
  bool json = false;
  app.add_option("--plan", plan_path, "a plan file (.toml or .json)")->required();
  app.add_option("--cluster", cluster, "the cluster (default: the plan's)");
  app.add_option("--model", model, "the model (default: the plan's)");
  app.add_flag("--json", json, "print the schedule as JSON");
  if (auto rc = ParseArgs(app, args)) return *rc;

  Result<PlanInputs> in = LoadPlanInputs(plan_path, cluster, model);
  if (!in.ok()) {
    fmt::print(stderr, "{}\n", in.status().message());
    return kExitFailure;
  }
  FillDefaultRouting(&in->plan, in->cluster, in->model);  // as simulate and train do
  Result<Schedule> s = LowerPlan(in->plan, in->cluster, in->model);
  if (!s.ok()) {
    fmt::print(stderr, "{}\n", s.status().message());
    return kExitFailure;
  }
  if (json) {
    fmt::print("{}\n", ScheduleToJson(*s).dump(1));
  } else {
    fmt::print("{}schedule {}\n", ScheduleListing(*s), ScheduleHash(*s));
  }
  return kExitOk;
}

}  // namespace motley::cli
