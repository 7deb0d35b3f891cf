#include "sim/replan.h"

#include <algorithm>
#include <cmath>
#include <limits>
#include <map>
#include <vector>

#include <fmt/format.h>

#include "plan/zorse_planner.h"
#include "sim/cost_model.h"
#include "sim/plan_evaluator.h"
#include "sim/routing_costs.h"

namespace motley {
namespace {

// The device of each rank: groups in order, their devices in order (the lowering's numbering).
std::vector<int> RankDevices(const Plan& plan) {
  std::vector<int> out;
  for (const GroupPlan& g : plan.groups)
    for (const DevicePlan& d : g.devices) out.push_back(d.device);
  return out;
}

// A one-group plan's devices put in `order` (the same set), with their per-device figures.
bool Reorder(Plan* plan, const std::vector<int>& order) {
  if (plan->groups.size() != 1) return false;
  GroupPlan& g = plan->groups[0];
  if (g.tp_degree != 1 || !g.routing.empty() || g.devices.size() != order.size()) return false;
  std::map<int, size_t> at;
  for (size_t i = 0; i < g.devices.size(); ++i) at[g.devices[i].device] = i;
  std::vector<DevicePlan> devices;
  std::vector<double> shares;
  for (int d : order) {
    auto it = at.find(d);
    if (it == at.end()) return false;
    devices.push_back(g.devices[it->second]);
    if (!g.state_shares.empty()) shares.push_back(g.state_shares[it->second]);
  }
  g.devices = std::move(devices);
  g.state_shares = std::move(shares);
  return true;
}

std::string Batches(const Plan& plan) {
  std::string out;
  for (const GroupPlan& g : plan.groups)
    for (const DevicePlan& d : g.devices)
      out += fmt::format("{}{}:{}", out.empty() ? "" : " ", d.device, d.sequences());
  return out;
}

std::string Layers(const Plan& plan) {
  std::string out;
  for (const GroupPlan& g : plan.groups) out += fmt::format("{}{}", out.empty() ? "" : "/", g.num_layers());
  return out;
}

}  // namespace

Result<Replanned> ReplanInPlace(const Plan& current, const Cluster& measured, const ModelSpec& model,
                                const Profile* profile, const PlanRequest& request) {
  const CostModel costs(measured, model, profile, request.seq_len, request.precision,
                        request.activation_checkpointing);
  const PlanEvaluator evaluate = SimulationEvaluator(measured, model, costs);
  const std::vector<int> ranks = RankDevices(current);
  Replanned out;
  MOTLEY_ASSIGN_OR_RETURN(const PlanEvaluation now, evaluate(current, EvaluateBound{}));
  out.current_step_s = now.step_time_s;

  if (current.groups.size() == 1) {
    // Data parallelism: the batch (and the state) by the devices' measured speeds.
    PlanRequest r = request;
    r.devices = ranks;
    std::sort(r.devices.begin(), r.devices.end());
    r.leave_devices_out = false;
    const std::string strategy = current.strategy == "cephalo" ? "cephalo" : "poplar";
    StrategyOutcome o = PlanWithStrategy(strategy, measured, model, costs, r, evaluate);
    if (!o.status.ok())
      return Status::Infeasible(fmt::format("no {} plan: {}", strategy, o.status.message()));
    if (!Reorder(&o.plan, ranks))
      return Status::Infeasible(fmt::format("the {} plan does not keep every rank on its device", strategy));
    out.plan = o.plan;
    out.predicted_step_s = o.evaluation.step_time_s;
    out.why = fmt::format("{}, ZeRO-{}, sequences per device {} (were {})", strategy, o.plan.zero_stage,
                          Batches(o.plan), Batches(current));
  } else {
    // A pipeline: the same groups, their layers and microbatches again.
    std::vector<std::vector<int>> groups;
    for (const GroupPlan& g : current.groups) {
      groups.emplace_back();
      for (const DevicePlan& d : g.devices) groups.back().push_back(d.device);
    }
    ZorseRequest z = ZorseRequestFor(request);
    z.offload = current.offload_params;
    z.schedule = current.schedule;
    z.devices = ranks;
    z.keep_group_order = true;
    std::vector<ZorseCandidate> candidates = ZorseCandidatesForGroups(measured, model, costs, z, groups);
    std::sort(candidates.begin(), candidates.end(), [](const ZorseCandidate& a, const ZorseCandidate& b) {
      return a.model_step_s < b.model_step_s;
    });
    double best = std::numeric_limits<double>::infinity();
    int judged = 0;
    for (ZorseCandidate& c : candidates) {
      if (judged >= z.candidates_to_evaluate) break;
      if (RankDevices(c.plan) != ranks) continue;  // a rank would change device
      ++judged;
      Result<PlanEvaluation> e = evaluate(c.plan, EvaluateBound{});
      if (!e.ok() || !e->fits_memory || e->step_time_s >= best) continue;
      best = e->step_time_s;
      out.plan = c.plan;
    }
    if (judged == 0 || !std::isfinite(best))
      return Status::Infeasible(fmt::format("no plan for the same {} groups fits", groups.size()));
    out.plan.strategy = current.strategy;
    out.predicted_step_s = best;
    out.why = fmt::format("the same {} groups, layers {} (were {}), microbatches of {}", groups.size(),
                          Layers(out.plan), Layers(current), out.plan.groups[0].devices[0].microbatch_size);
  }
  out.plan.model = current.model;
  out.plan.cluster = current.cluster;
  FillZorseRouting(&out.plan, costs);
  return out;
}

}  // namespace motley
