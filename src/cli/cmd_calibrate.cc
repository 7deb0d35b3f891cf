// motley calibrate --profile P --plan PLAN --metrics M.jsonl [--from-step N] -o OUT
//
// Online profiling (issue #7 §4, Poplar): scales each device type's compute times in a profile by
// what a real run of a plan measured (`motley train --plan PLAN --metrics M.jsonl`) against what
// the simulator predicts for that plan with that profile. Plans simulated with the calibrated
// profile then carry what the devices do when they all run at once.
#include <algorithm>
#include <cmath>
#include <fstream>
#include <map>

#include <fmt/format.h>
#include <nlohmann/json.hpp>

#include "cli/args.h"
#include "cli/command.h"
#include "cli/plan_inputs.h"
#include "cli/table_printer.h"
#include "core/file_io.h"
#include "plan/lower.h"
#include "sim/profile_calibration.h"
#include "sim/routing_costs.h"

namespace motley::cli {
namespace {

// Each rank's median compute time per step over the steps from `from_step` on.
Result<std::vector<double>> MeasuredCompute(const std::string& path, int from_step) {
  std::ifstream in(path);
  if (!in) return Status::NotFound(fmt::format("{}: cannot read the metrics", path));
  std::map<int, std::vector<double>> by_rank;
  int line_no = 0;
  for (std::string line; std::getline(in, line);) {
    ++line_no;
    if (line.empty()) continue;
    nlohmann::json j = nlohmann::json::parse(line, nullptr, /*allow_exceptions=*/false);
    if (j.is_discarded())
      return Status::InvalidArgument(fmt::format("{}:{}: not a JSON line; give the file `motley train --metrics` wrote",
                                                 path, line_no));
    if (!j.contains("ranks") || !j.contains("step") || j["step"].get<int>() < from_step) continue;
    for (const auto& r : j["ranks"]) by_rank[r.value("rank", -1)].push_back(r.value("compute_s", 0.0));
  }
  if (by_rank.empty())
    return Status::InvalidArgument(fmt::format(
        "{}: no step from {} on with per-rank times; train the plan with `motley train --plan PLAN --metrics {}` for "
        "more steps (the first ones warm up)",
        path, from_step, path));
  std::vector<double> out;
  for (auto& [rank, times] : by_rank) {
    if (rank != static_cast<int>(out.size()))
      return Status::InvalidArgument(fmt::format("{}: rank {} is missing from the per-rank times", path, out.size()));
    std::sort(times.begin(), times.end());
    out.push_back(times[times.size() / 2]);
  }
  return out;
}

}  // namespace

int RunCalibrate(const std::vector<std::string>& args) {
  CLI::App app(
      "Scale a profile's compute times by device type to what a real run of a plan measured (online profiling): "
      "plans simulated with the result carry the contention and clocks the run saw.",
      "motley calibrate");
  std::string profile_path, plan_path, metrics_path, out_path;
  int from_step = 3;
  app.add_option("--profile", profile_path, "the profile the plan is simulated with (motley profile -o)")->required();
  app.add_option("--plan", plan_path, "the plan the run trained (.toml or .json)")->required();
  app.add_option("--metrics", metrics_path, "the run's metrics (motley train --plan PLAN --metrics FILE)")->required();
  app.add_option("--from-step", from_step, "ignore the steps before this one (warm-up)")->capture_default_str();
  app.add_option("-o,--output", out_path, "write the calibrated profile here")->required();
  if (auto rc = ParseArgs(app, args)) return *rc;
  auto fail = [](const Status& s) {
    fmt::print(stderr, "{}\n", s.message());
    return kExitFailure;
  };
  Result<std::vector<double>> measured = MeasuredCompute(metrics_path, from_step);
  if (!measured.ok()) return fail(measured.status());
  Result<PlanInputs> in = LoadPlanInputs(plan_path, "", "");
  if (!in.ok()) return fail(in.status());
  Result<Profile> profile = LoadAnyProfile(profile_path);
  if (!profile.ok()) return fail(profile.status());
  // Times the profile does not give (a head costed by the roofline, say) are not scaled: a few
  // rounds bring the simulated compute of the profile's part to what was measured.
  Profile calibrated = *profile;
  std::vector<TypeCalibration> first;
  std::map<std::string, double> scale;
  for (int round = 0; round < 5; ++round) {
    CostModel costs(in->cluster, in->model, &calibrated, in->plan.seq_len, in->plan.precision,
                    in->plan.activation_checkpointing);
    Plan plan = in->plan;
    FillZorseRouting(&plan, costs);
    Result<Schedule> s = LowerPlan(plan, in->cluster, in->model);
    if (!s.ok()) return fail(s.status());
    Result<SimResult> sim = Simulate(*s, in->cluster, costs);
    if (!sim.ok()) return fail(sim.status());
    Result<std::vector<TypeCalibration>> c =
        CalibrateProfile(&calibrated, *sim, *measured, in->model, in->plan.seq_len, in->plan.precision);
    if (!c.ok())
      return fail(Status::InvalidArgument(fmt::format("{} against {}: {}", metrics_path, plan_path, c.status().message())));
    if (round == 0) first = *c;
    bool settled = true;
    for (const TypeCalibration& k : *c) {
      scale[k.device_type] = (round == 0 ? 1.0 : scale[k.device_type]) * k.scale;
      settled = settled && std::abs(k.scale - 1) < 1e-4;
    }
    if (settled) break;
  }
  if (Status w = AtomicWriteFile(out_path, ProfileToJson(calibrated).dump(2) + "\n"); !w.ok()) return fail(w);
  TablePrinter t({"device type", "ranks", "measured compute", "simulated", "scale"});
  t.AlignRight({1, 2, 3, 4});
  for (const TypeCalibration& k : first)
    t.AddRow({k.device_type, std::to_string(k.ranks), fmt::format("{:.1f} ms", 1e3 * k.measured_compute_s),
              fmt::format("{:.1f} ms", 1e3 * k.simulated_compute_s), fmt::format("{:.3f}x", scale[k.device_type])});
  fmt::print("{}calibrated profile: {}\n", t.ToString(), out_path);
  return kExitOk;
}

}  // namespace motley::cli
