// motley calibrate --profile P --plan PLAN --metrics M.jsonl [--metrics M2.jsonl ...] [--from-step N] -o OUT
//
// Online profiling (issue #7 §4, Poplar): scales each device type's compute times in a profile by
// what a real run of a plan measured (`motley train --plan PLAN --metrics M.jsonl`) against what
// the simulator predicts for that plan with that profile, and sets the links' per-call collective
// overhead so that the plan's simulated communication is the run's. Plans simulated with the
// calibrated profile then carry what the devices and links do when they all run at once.

#include <fmt/format.h>
#include <fmt/ranges.h>

#include "api/plan_inputs.h"
#include "api/table_printer.h"
#include "cli/args.h"
#include "cli/command.h"
#include "core/file_io.h"
#include "plan/lower.h"
#include "sim/profile_calibration.h"
#include "sim/routing_costs.h"
#include "supervise/run_metrics.h"

namespace motley::cli {

int RunCalibrate(const std::vector<std::string>& args) {
  CLI::App app(
      "Scale a profile's compute times by device type, and its links' per-call collective overhead, to what "
      "a real run "
      "of a plan measured (online profiling): plans simulated with the result carry the contention, clocks "
      "and "
      "communication the run saw.",
      "motley calibrate");
  std::string profile_path, plan_path, out_path;
  std::vector<std::string> metrics_paths;
  int from_step = 3;
  app.add_option("--profile", profile_path, "the profile the plan is simulated with (motley profile -o)")
      ->required();
  app.add_option("--plan", plan_path, "the plan the run trained (.toml or .json)")->required();
  app.add_option("--metrics", metrics_paths,
                 "the run's metrics (motley train --plan PLAN --metrics FILE); repeat it for several runs of "
                 "the plan, "
                 "whose steps are pooled")
      ->required();
  app.add_option("--from-step", from_step, "ignore the steps before this one (warm-up)")
      ->capture_default_str();
  app.add_option("-o,--output", out_path, "write the calibrated profile here")->required();
  if (auto rc = ParseArgs(app, args)) return *rc;
  auto fail = [](const Status& s) {
    fmt::print(stderr, "{}\n", s.message());
    return kExitFailure;
  };
  Result<PlanInputs> in = LoadPlanInputs(plan_path, "", "");
  if (!in.ok()) return fail(in.status());
  // The schedule the plan lowers to, as a run of it does: only the steps that ran it count.
  Plan lowered_plan = in->plan;
  FillDefaultRouting(&lowered_plan, in->cluster, in->model);
  Result<Schedule> schedule = LowerPlan(lowered_plan, in->cluster, in->model);
  if (!schedule.ok()) return fail(schedule.status());
  const std::string hash = ScheduleHash(*schedule);
  Result<std::vector<double>> measured = MedianRankCompute(metrics_paths, from_step, hash);
  if (!measured.ok()) return fail(measured.status());
  Result<Profile> profile = LoadAnyProfile(profile_path);
  if (!profile.ok()) return fail(profile.status());
  Profile calibrated = *profile;
  Result<std::vector<TypeCalibration>> c =
      CalibrateToRun(&calibrated, in->plan, in->cluster, in->model, *measured);
  if (!c.ok())
    return fail(Status::InvalidArgument(
        fmt::format("{} against {}: {}", fmt::join(metrics_paths, ", "), plan_path, c.status().message())));
  // The links too, from the same run: the collectives' cost inside a step (a plan without
  // communication leaves them as they are).
  std::string links_said;
  Result<std::vector<double>> comm = MedianRankComm(metrics_paths, from_step, hash);
  Result<CommCalibration> cc =
      comm.ok() ? CalibrateCommunication(&calibrated, in->plan, in->cluster, in->model, *comm)
                : Result<CommCalibration>(comm.status());
  if (!cc.ok()) {
    links_said = fmt::format("links not calibrated: {}\n", cc.status().message());
  } else {
    links_said = fmt::format(
        "communication: measured {:.1f} ms a step (the mean over the ranks), simulated {:.1f} ms; every "
        "link's "
        "collectives {}{:.0f} us a call{} -> {:.1f} ms{}\n",
        1e3 * cc->measured_comm_s, 1e3 * cc->simulated_comm_s, cc->overhead_added_s >= 0 ? "+" : "",
        1e6 * cc->overhead_added_s,
        cc->links_added > 0 ? fmt::format(" ({} link(s) added from the cluster)", cc->links_added) : "",
        1e3 * cc->calibrated_comm_s,
        cc->clamped ? " (no lower: the run communicated less than the links allow)" : "");
  }
  if (Status w = AtomicWriteFile(out_path, ProfileToJson(calibrated).dump(2) + "\n"); !w.ok()) return fail(w);
  TablePrinter t({"device type", "ranks", "measured compute", "simulated", "scale"});
  t.AlignRight({1, 2, 3, 4});
  for (const TypeCalibration& k : *c)
    t.AddRow({k.device_type, std::to_string(k.ranks), fmt::format("{:.1f} ms", 1e3 * k.measured_compute_s),
              fmt::format("{:.1f} ms", 1e3 * k.simulated_compute_s), fmt::format("{:.3f}x", k.scale)});
  fmt::print("{}{}calibrated profile: {}\n", t.ToString(), links_said, out_path);
  return kExitOk;
}

}  // namespace motley::cli
