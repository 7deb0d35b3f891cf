// motley schedule --plan P [--cluster C] [--model M] [--json]: the per-rank op programs.
#include <fmt/format.h>

#include "cli/args.h"
#include "cli/command.h"
#include "cli/plan_inputs.h"
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
  // Plans without a routing get Zorse's, timed by the roofline (simulate uses the profile too).
  CostModel costs(in->cluster, in->model, nullptr, in->plan.seq_len, in->plan.precision,
                  in->plan.activation_checkpointing);
  FillZorseRouting(&in->plan, costs);
  Result<Schedule> s = LowerPlan(in->plan, in->cluster, in->model);
  if (!s.ok()) {
    fmt::print(stderr, "{}\n", s.status().message());
    return kExitFailure;
  }
  fmt::print("{}", json ? ScheduleToJson(*s).dump(1) + "\n" : ScheduleListing(*s));
  return kExitOk;
}

}  // namespace motley::cli
