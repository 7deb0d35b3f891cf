#include "sim/flextp_choice.h"

#include <fmt/format.h>

#include "core/units.h"
#include "plan/lower.h"
#include "sim/cost_model.h"
#include "sim/routing_costs.h"
#include "sim/simulator.h"

namespace motley {
namespace {

// The plan's step with `probe` straggling, its teams under `mode`.
Result<double> StragglingStepS(Plan plan, const Cluster& cluster, const ModelSpec& model,
                               const Profile* profile, const StragglerProbe& probe, const std::string& mode,
                               const TensorParallelConfig& config) {
  Cluster slowed = cluster;
  slowed.measured_slowdown[probe.device] = cluster.measured_slowdown.count(probe.device) > 0
                                               ? cluster.measured_slowdown.at(probe.device) * probe.factor
                                               : probe.factor;
  plan.flextp_mode = mode;
  const CostModel costs(slowed, model, profile, plan.seq_len, plan.precision, plan.activation_checkpointing);
  FillZorseRouting(&plan, costs);
  MOTLEY_ASSIGN_OR_RETURN(Schedule schedule, LowerPlan(plan, slowed, model));
  SimConfig sim;
  sim.tensor_parallel = config;
  MOTLEY_ASSIGN_OR_RETURN(SimResult r, Simulate(schedule, slowed, costs, sim));
  return r.step_time_s;
}

}  // namespace

Result<FlexTpChoice> ChooseFlexTpMode(const Plan& plan, const Cluster& cluster, const ModelSpec& model,
                                      const Profile* profile, const std::string& requested,
                                      std::optional<StragglerProbe> probe,
                                      const TensorParallelConfig& config) {
  FlexTpChoice choice;
  const GroupPlan* team = nullptr;
  for (const GroupPlan& g : plan.groups)
    if (g.tp_degree > 1 && team == nullptr) team = &g;
  if (probe) {
    choice.probe = *probe;
  } else if (team != nullptr) {
    choice.probe.device = team->devices.front().device;
  } else {
    return choice;  // nothing to choose, no straggler to judge
  }
  std::vector<std::string> modes;
  if (team == nullptr)
    modes = {"off"};
  else if (requested == "auto")
    modes = {"off", "migrate"};
  else
    modes = {requested};
  for (const std::string& m : modes) {
    MOTLEY_ASSIGN_OR_RETURN(double step,
                            StragglingStepS(plan, cluster, model, profile, choice.probe, m, config));
    choice.step_s.push_back({m, step});
  }
  const std::string slow = fmt::format("device {} {:g}x slower", choice.probe.device, choice.probe.factor);
  choice.straggling_step_s = choice.step_s.front().second;
  if (team == nullptr) {
    choice.why = fmt::format("no tensor-parallel team; with {} the step is predicted {}", slow,
                             FormatDuration(choice.straggling_step_s));
    return choice;
  }
  choice.mode = choice.step_s.front().first;
  if (requested == "auto") {
    const double off = choice.step_s[0].second, migrate = choice.step_s[1].second;
    if (migrate < off * 0.99) {
      choice.mode = "migrate";
      choice.straggling_step_s = migrate;
    }
    choice.why = fmt::format(
        "FlexTP {}: with {} its team's step is predicted {} migrating the straggler's units (exact), {} "
        "waiting for "
        "it (off){}",
        choice.mode, slow, FormatDuration(migrate), FormatDuration(off),
        choice.mode == "off" ? ": migration's traffic costs what it saves" : "");
  } else {
    choice.why = fmt::format("FlexTP {} (asked for): with {} the step is predicted {}", choice.mode, slow,
                             FormatDuration(choice.straggling_step_s));
  }
  return choice;
}

Result<StragglerProbe> ParseStragglerProbe(const std::string& text, const Cluster& cluster,
                                           const std::string& flag) {
  const size_t eq = text.find('=');
  StragglerProbe p{-1, 0};
  try {
    size_t used = 0;
    if (eq != std::string::npos) p.device = std::stoi(text.substr(0, eq), &used);
    if (eq != std::string::npos && used == eq) p.factor = std::stod(text.substr(eq + 1), &used);
    if (used != text.size() - eq - 1) p.factor = 0;
  } catch (const std::exception&) {
    p.factor = 0;
  }
  if (p.device < 0 || p.device >= cluster.num_devices() || !(p.factor >= 1) || p.factor > 1000)
    return Status::InvalidArgument(
        fmt::format("{} {}: give DEVICE=FACTOR, a device of cluster {} (0..{}) and how many times slower it "
                    "computes (1 to "
                    "1000), e.g. {} 1=4",
                    flag, text, cluster.name, cluster.num_devices() - 1, flag));
  return p;
}

}  // namespace motley
