#include "sim/flextp_prediction.h"

#include <algorithm>
#include <set>

#include "cost/flextp_balancer.h"

namespace motley {

std::vector<FlexTpTeamPrediction> PredictFlexTpTeams(const Schedule& schedule, const CostModel& costs,
                                                     const TensorParallelConfig& config) {
  std::vector<FlexTpTeamPrediction> out;
  if (schedule.flextp_mode == "off") return out;
  TensorParallelConfig team_config = config;
  team_config.mode = schedule.flextp_mode;
  const Cluster& cluster = costs.cluster();
  std::set<std::vector<int32_t>> teams;
  for (const Collective& c : schedule.collectives) {
    if (!c.tensor_parallel || c.ranks.size() < 2 || !teams.insert(c.ranks).second) continue;
    const int tp = static_cast<int>(c.ranks.size());
    std::vector<double> nominal;
    for (const int32_t r : c.ranks) {
      double t = 0;
      for (const Op& op : schedule.programs[r].ops)
        if ((op.kind == OpKind::kForward || op.kind == OpKind::kBackward) && op.tp_degree > 1)
          t += costs.ComputeS(schedule.programs[r].device, op);
      nominal.push_back(t);
    }
    if (*std::min_element(nominal.begin(), nominal.end()) <= 0) continue;
    // The migration's traffic a step: each layer's weights once, its gradients home once, all the
    // layers of a ministage in one exchange (as the executor counts them for the runtime's balancer).
    const Program& first = schedule.programs[c.ranks.front()];
    std::set<int> visited;
    int64_t returns = 0;
    for (const Op& op : first.ops) {
      if (op.kind == OpKind::kForward) visited.insert(op.ministage);
      if (op.kind == OpKind::kBackward && op.gradients_complete) ++returns;
    }
    int64_t layers = 0;
    for (const int v : visited)
      layers += schedule.ministages[v].layer_end - schedule.ministages[v].layer_begin;
    FlexTpCosts team_costs =
        ForTeamConfig(FlexTpCostsFor(costs.model(), tp, schedule.seq_len, cluster, first.device,
                                     schedule.programs[c.ranks.back()].device, layers, returns),
                      team_config, !cluster.emulated());
    // ZERO-resizing's own cost where the profile measured it (its pre-test points; the median over
    // the team's ranks at each ratio, as the runtime's pre-test takes it). Else resizing is free.
    SemiPretest pretest;
    std::vector<const ProfileEntry*> measured;
    for (const int32_t r : c.ranks)
      if (const ProfileEntry* e = costs.Entry(schedule.programs[r].device);
          e != nullptr && !e->resize_overhead.empty())
        measured.push_back(e);
    for (size_t i = 0; !measured.empty() && i < measured.front()->resize_overhead.size(); ++i) {
      std::vector<double> v;
      for (const ProfileEntry* e : measured)
        if (i < e->resize_overhead.size()) v.push_back(e->resize_overhead[i].second);
      std::nth_element(v.begin(), v.begin() + static_cast<int64_t>(v.size() / 2), v.end());
      pretest.resize.push_back({measured.front()->resize_overhead[i].first, v[v.size() / 2]});
    }
    team_costs = WithPretest(team_costs, pretest);
    // Migration's borrowed compute where the profile measured it (the median over the team's ranks).
    std::vector<double> borrowed;
    for (const int32_t r : c.ranks)
      if (const ProfileEntry* e = costs.Entry(schedule.programs[r].device);
          e != nullptr && e->borrowed_cost > 0)
        borrowed.push_back(e->borrowed_cost);
    if (!borrowed.empty()) {
      std::nth_element(borrowed.begin(), borrowed.begin() + static_cast<int64_t>(borrowed.size() / 2),
                       borrowed.end());
      team_costs.borrowed_cost = borrowed[borrowed.size() / 2];
    }
    FlexTpBalancer balancer(team_config, tp, team_costs);
    out.push_back({c.ranks, nominal, balancer.Update(nominal)});
  }
  return out;
}

std::vector<double> FlexTpComputeFactors(const Schedule& schedule,
                                         const std::vector<FlexTpTeamPrediction>& teams) {
  std::vector<double> factor(schedule.programs.size(), 1.0);
  for (const FlexTpTeamPrediction& t : teams) {
    if (!t.balance.any()) continue;  // the team's all-reduces wait for its slowest rank, as in mode off
    // Every rank's tensor-parallel ops last the team's time (TeamBalance::team_s): each block ends in
    // the team's all-reduce, so a rank whose step is short in all waits for the slowest in each block.
    for (size_t i = 0; i < t.ranks.size(); ++i) factor[t.ranks[i]] = t.balance.team_s / t.alone_s[i];
  }
  return factor;
}

}  // namespace motley
