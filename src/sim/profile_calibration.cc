#include "sim/profile_calibration.h"

#include <algorithm>
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
                                                      const ModelSpec& model, int64_t seq_len,
                                                      Precision precision) {
  if (measured_compute_s.size() != simulated.devices.size())
    return Status::InvalidArgument(
        fmt::format("the run has {} ranks and the plan {}: the metrics are not of this plan",
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
    // Wide bounds: ranks that share cores (emulated devices, a busy host) legitimately run several
    // times slower than the one process the profile timed (4 ranks on 2 busy cores measured 5.97x),
    // and that is what calibration is for; only metrics that cannot be of this plan are refused.
    if (c.scale > 20 || c.scale < 0.05)
      return Status::InvalidArgument(
          fmt::format("{}: the run measured {:.1f} ms of compute a step where the plan predicts {:.1f} ms "
                      "({:.2f}x): the metrics "
                      "are not of a run of this plan on this cluster",
                      type, 1e3 * c.measured_compute_s, 1e3 * c.simulated_compute_s, c.scale));
    const ProfileEntry* found = profile->Find(type, model, seq_len, precision);
    if (found == nullptr)
      return Status::InvalidArgument(
          fmt::format("{}: the profile has no entry for this model, sequence length and "
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

namespace {

// The plan simulated with `profile`, routed as the run was.
Result<SimResult> SimulateWith(const Profile& profile, const Plan& plan, const Cluster& cluster,
                               const ModelSpec& model) {
  CostModel costs(cluster, model, &profile, plan.seq_len, plan.precision, plan.activation_checkpointing);
  Plan routed = plan;
  FillDefaultRouting(&routed, cluster, model);  // the routing the run had
  MOTLEY_ASSIGN_OR_RETURN(Schedule schedule, LowerPlan(routed, cluster, model));
  return Simulate(schedule, cluster, costs);
}

double MeanCommS(const SimResult& sim) {
  double sum = 0;
  for (const DeviceSimReport& d : sim.devices) sum += d.comm_busy_s;
  return sim.devices.empty() ? 0 : sum / static_cast<double>(sim.devices.size());
}

}  // namespace

Result<std::vector<TypeCalibration>> CalibrateToRun(Profile* profile, const Plan& plan,
                                                    const Cluster& cluster, const ModelSpec& model,
                                                    const std::vector<double>& measured_compute_s) {
  Profile calibrated = *profile;
  std::vector<TypeCalibration> first;
  std::map<std::string, double> scale;
  for (int round = 0; round < 5; ++round) {
    MOTLEY_ASSIGN_OR_RETURN(SimResult sim, SimulateWith(calibrated, plan, cluster, model));
    MOTLEY_ASSIGN_OR_RETURN(
        std::vector<TypeCalibration> c,
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

Result<CommCalibration> CalibrateCommunication(Profile* profile, const Plan& plan, const Cluster& cluster,
                                               const ModelSpec& model,
                                               const std::vector<double>& measured_comm_s) {
  MOTLEY_ASSIGN_OR_RETURN(const SimResult before, SimulateWith(*profile, plan, cluster, model));
  if (measured_comm_s.size() != before.devices.size())
    return Status::InvalidArgument(
        fmt::format("the run has {} ranks and the plan {}: the metrics are not of this plan",
                    measured_comm_s.size(), before.devices.size()));
  CommCalibration out;
  out.simulated_comm_s = MeanCommS(before);
  for (double c : measured_comm_s) out.measured_comm_s += c / static_cast<double>(measured_comm_s.size());
  if (out.measured_comm_s <= 0)
    return Status::InvalidArgument(
        "the run measured no communication (comm_s): nothing to calibrate the links by");
  Profile p = *profile;
  // Every pair of nodes the cluster joins, measured or not: a link the profile lacks is added
  // with the cluster's figures (the same link the simulator costs without it), so that its
  // collectives take the same overhead. A node of one device has no link within.
  std::vector<std::vector<int>> devices_of(cluster.nodes.size());
  for (int d = 0; d < cluster.num_devices(); ++d)
    devices_of[static_cast<size_t>(cluster.devices[d].node)].push_back(d);
  for (size_t a = 0; a < cluster.nodes.size(); ++a)
    for (size_t b = a; b < cluster.nodes.size(); ++b) {
      const std::vector<int>& da = devices_of[a];
      const std::vector<int>& db = devices_of[b];
      if (da.empty() || db.empty() || (a == b && da.size() < 2)) continue;
      const std::string& na = cluster.nodes[a].name;
      const std::string& nb = cluster.nodes[b].name;
      const bool known = std::any_of(p.links.begin(), p.links.end(), [&](const ProfileLink& l) {
        return (l.a == na && l.b == nb) || (l.a == nb && l.b == na);
      });
      if (known) continue;
      const Link l = cluster.LinkBetween(da[0], a == b ? da[1] : db[0]);
      // (Carried by the library that carried the measured ones.)
      p.links.push_back({na, nb, l.bandwidth_bytes_per_s, l.latency_s, l.collective_overhead_s,
                         p.links.empty() ? std::string() : p.links.front().library});
      ++out.links_added;
    }
  if (p.links.empty())
    return Status::InvalidArgument("the cluster has no links between devices: nothing to calibrate");
  std::vector<double> base;
  for (const ProfileLink& l : p.links) base.push_back(l.collective_overhead_s);
  const double lowest = -*std::min_element(base.begin(), base.end());
  auto comm_with = [&](double added_s) -> Result<double> {
    for (size_t i = 0; i < p.links.size(); ++i) p.links[i].collective_overhead_s = base[i] + added_s;
    MOTLEY_ASSIGN_OR_RETURN(SimResult sim, SimulateWith(p, plan, cluster, model));
    return MeanCommS(sim);
  };
  // The simulated communication grows with the overhead: bisect between the lowest it may be and
  // an amount that overshoots.
  double lo = lowest, hi = 1e-3;
  MOTLEY_ASSIGN_OR_RETURN(double at_lo, comm_with(lo));
  if (at_lo >= out.measured_comm_s) {
    out.clamped = true;
    hi = lo;
  } else {
    for (;;) {
      MOTLEY_ASSIGN_OR_RETURN(double at_hi, comm_with(hi));
      if (at_hi >= out.measured_comm_s) break;
      if (hi > 100)
        return Status::InvalidArgument(
            fmt::format("the run's communication ({:.1f} ms a step) is not in this plan's collectives: even "
                        "at {:.0f} s a call the "
                        "simulator's is {:.1f} ms; the metrics are not of a run of this plan",
                        1e3 * out.measured_comm_s, hi, 1e3 * at_hi));
      hi *= 4;
    }
    for (int i = 0; i < 60 && hi - lo > 1e-9; ++i) {
      const double mid = 0.5 * (lo + hi);
      MOTLEY_ASSIGN_OR_RETURN(double at_mid, comm_with(mid));
      (at_mid < out.measured_comm_s ? lo : hi) = mid;
    }
  }
  out.overhead_added_s = hi;
  MOTLEY_ASSIGN_OR_RETURN(out.calibrated_comm_s, comm_with(hi));
  *profile = std::move(p);
  return out;
}

}  // namespace motley
