#include "sim/profile_calibration.h"

#include <cmath>
#include <map>
#include <optional>

#include <fmt/format.h>

#include "plan/lower.h"
#include "sim/cost_model.h"
#include "sim/routing_costs.h"

namespace motley {

Result<std::vector<TypeCalibration>> CalibrateProfile(Profile* profile, const SimResult& simulated,
                                                      const std::vector<double>& measured_compute_s,
                                                      const ModelSpec& model, int64_t seq_len, Precision precision) {
  if (measured_compute_s.size() != simulated.devices.size())
    return Status::InvalidArgument(fmt::format("the run has {} ranks and the plan {}: the metrics are not of this plan",
                                               measured_compute_s.size(), simulated.devices.size()));
  std::map<std::string, TypeCalibration> by_type;
  for (const DeviceSimReport& d : simulated.devices) {
    if (d.compute_source != "profile" || d.compute_busy_s <= 0 || measured_compute_s[d.rank] <= 0) continue;
    TypeCalibration& c = by_type[d.device_type];
    c.device_type = d.device_type;
    c.ranks += 1;
    c.measured_compute_s += measured_compute_s[d.rank];
    c.simulated_compute_s += d.compute_busy_s;
  }
  if (by_type.empty())
    return Status::InvalidArgument("no rank's compute came from the profile: nothing to calibrate");
  // Every type is checked before any entry changes: a failed calibration leaves the profile alone.
  std::vector<TypeCalibration> out;
  std::vector<ProfileEntry*> entries;
  for (auto& [type, c] : by_type) {
    c.scale = c.measured_compute_s / c.simulated_compute_s;
    if (c.scale > 5 || c.scale < 0.2)
      return Status::InvalidArgument(fmt::format(
          "{}: the run measured {:.1f} ms of compute a step where the plan predicts {:.1f} ms ({:.2f}x): the metrics "
          "are not of a run of this plan on this cluster",
          type, 1e3 * c.measured_compute_s, 1e3 * c.simulated_compute_s, c.scale));
    const ProfileEntry* found = profile->Find(type, model, seq_len, precision);
    if (found == nullptr)
      return Status::InvalidArgument(fmt::format("{}: the profile has no entry for this model, sequence length and "
                                                 "precision; calibrate with the profile the plan was simulated with",
                                                 type));
    entries.push_back(&profile->entries[static_cast<size_t>(found - profile->entries.data())]);
    out.push_back(c);
  }
  for (size_t i = 0; i < out.size(); ++i) {
    ProfileEntry& e = *entries[i];
    const double k = out[i].scale;
    for (ProfilePoint& p : e.points) p.forward_ms *= k, p.backward_ms *= k;
    for (ProfilePoint& p : e.head_points) p.forward_ms *= k, p.backward_ms *= k;
    for (auto& [tp, points] : e.tp_points)
      for (ProfilePoint& p : points) p.forward_ms *= k, p.backward_ms *= k;
    for (std::optional<LinearFit>* fit : {&e.forward_fit, &e.backward_fit})
      if (fit->has_value()) (*fit)->slope_ms *= k, (*fit)->intercept_ms *= k;
    e.optimizer_ms_per_mparam *= k;
  }
  return out;
}

Result<std::vector<TypeCalibration>> CalibrateToRun(Profile* profile, const Plan& plan, const Cluster& cluster,
                                                    const ModelSpec& model, const std::vector<double>& measured_compute_s) {
  Profile calibrated = *profile;
  std::vector<TypeCalibration> first;
  std::map<std::string, double> scale;
  for (int round = 0; round < 5; ++round) {
    CostModel costs(cluster, model, &calibrated, plan.seq_len, plan.precision, plan.activation_checkpointing);
    Plan routed = plan;
    FillDefaultRouting(&routed, cluster, model);  // the routing the run had
    MOTLEY_ASSIGN_OR_RETURN(Schedule schedule, LowerPlan(routed, cluster, model));
    MOTLEY_ASSIGN_OR_RETURN(SimResult sim, Simulate(schedule, cluster, costs));
    MOTLEY_ASSIGN_OR_RETURN(std::vector<TypeCalibration> c,
                            CalibrateProfile(&calibrated, sim, measured_compute_s, model, plan.seq_len, plan.precision));
    if (round == 0) first = c;
    bool settled = true;
    for (const TypeCalibration& k : c) {
      scale[k.device_type] = (round == 0 ? 1.0 : scale[k.device_type]) * k.scale;
      settled = settled && std::abs(k.scale - 1) < 1e-4;
    }
    if (settled) break;
  }
  for (TypeCalibration& k : first) k.scale = scale[k.device_type];
  *profile = std::move(calibrated);
  return first;
}

}  // namespace motley
