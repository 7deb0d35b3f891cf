#include "api/simulate_query.h"

#include <algorithm>
#include <future>
#include <thread>

#include <fmt/format.h>

#include "plan/lower.h"
#include "sim/cost_model.h"
#include "sim/flextp_choice.h"
#include "sim/routing_costs.h"

namespace motley {

Result<SimulateAnswer> AnswerSimulateQuery(const SimulateQuery& query) {
  SimulateAnswer a;
  Result<PlanInputs> in_or = query.plan ? PlanInputsFor(*query.plan, "plan", query.cluster, query.model)
                                        : LoadPlanInputs(query.plan_path, query.cluster, query.model);
  MOTLEY_ASSIGN_OR_RETURN(a.in, std::move(in_or));
  PlanInputs& in = a.in;
  for (const std::string& s : query.stragglers) {
    MOTLEY_ASSIGN_OR_RETURN(StragglerProbe p, ParseStragglerProbe(s, in.cluster, "--straggler"));
    in.cluster.measured_slowdown[p.device] = p.factor;
  }
  if (!query.flextp_mode.empty()) {
    if (query.flextp_mode != "off" && query.flextp_mode != "migrate" && query.flextp_mode != "resize" &&
        query.flextp_mode != "semi")
      return Status::InvalidArgument(
          fmt::format("FlexTP mode \"{}\": use off, migrate, resize or semi", query.flextp_mode));
    in.plan.flextp_mode = query.flextp_mode;
  }
  std::optional<Profile> profile;
  if (!query.profile.empty()) {
    MOTLEY_ASSIGN_OR_RETURN(profile, LoadAnyProfile(query.profile));
    MOTLEY_RETURN_IF_ERROR(ApplyMeasuredReserves(*profile, query.profile, &in.cluster));
  }
  const CostModel costs(in.cluster, in.model, profile ? &*profile : nullptr, in.plan.seq_len,
                        in.plan.precision, in.plan.activation_checkpointing);
  a.routed = FillDefaultRouting(&in.plan, in.cluster, in.model);
  // One lowering and one simulation someone waits for: the lowering's passes take every core, and
  // the schedule's fingerprint and its traffic between regions are read beside the simulation.
  LowerOptions lower;
  lower.threads = std::max(1u, std::thread::hardware_concurrency());
  MOTLEY_ASSIGN_OR_RETURN(a.schedule, LowerPlan(in.plan, in.cluster, in.model, lower));
  SimConfig config;
  config.record_trace = query.record_trace;
  std::future<void> beside = std::async(std::launch::async, [&a] {
    a.schedule_hash = ScheduleHash(a.schedule);
    a.traffic = RegionTraffic(a.schedule, a.in.cluster);
  });
  Result<SimResult> result = Simulate(a.schedule, in.cluster, costs, config);
  beside.get();
  MOTLEY_ASSIGN_OR_RETURN(a.result, std::move(result));
  a.region_link_bound_s = RegionLinkBoundS(a.traffic, in.cluster, costs);
  return a;
}

nlohmann::json SimulateAnswerJson(const SimulateAnswer& answer) {
  const SimResult* r = &answer.result;
  const Schedule* s = &answer.schedule;
  nlohmann::json devices = nlohmann::json::array();
  for (const auto& d : r->devices) {
    devices.push_back({{"rank", d.rank},
                       {"device", d.device},
                       {"device_type", d.device_type},
                       {"compute_source", d.compute_source},
                       {"busy_fraction", d.busy_fraction},
                       {"idle_fraction", d.idle_fraction},
                       {"compute_busy_s", d.compute_busy_s},
                       {"comm_busy_s", d.comm_busy_s},
                       {"peak_memory_bytes", d.peak_memory_bytes},
                       {"capacity_bytes", d.capacity_bytes},
                       {"out_of_memory", d.out_of_memory},
                       {"peak_host_bytes", d.peak_host_bytes}});
  }
  nlohmann::json out = {{"step_time_s", r->step_time_s},
                        {"tokens_per_s", r->tokens_per_s},
                        {"tflops", r->tflops},
                        {"hfu", r->hfu},
                        {"mfu", r->mfu},
                        {"fits_memory", r->fits_memory},
                        {"oom", r->oom_message},
                        {"num_ops", s->num_ops()},
                        {"schedule_hash", answer.schedule_hash},
                        {"global_batch_tokens", s->global_batch_tokens},
                        {"flextp_mode", s->flextp_mode},
                        {"devices", devices}};
  // FlexTP's balance in each team it acts in: what each rank gives, takes and prunes, and the
  // compute the cost model expects of it (as a run's metrics report them per rank and step).
  nlohmann::json teams = nlohmann::json::array();
  for (const FlexTpTeamPrediction& t : r->flextp_teams) {
    nlohmann::json members = nlohmann::json::array();
    for (size_t i = 0; i < t.ranks.size(); ++i) {
      const FlexTpRankLoad l = RankLoad(t.balance, static_cast<int>(i));
      members.push_back({{"rank", t.ranks[i]},
                         {"alone_compute_s", t.alone_s[i]},
                         {"predicted_compute_s", l.predicted_s},
                         {"prune_ratio", l.prune_ratio},
                         {"units_given", l.units_given},
                         {"heads_given", l.heads_given},
                         {"units_received", l.units_received},
                         {"heads_received", l.heads_received},
                         {"lend_projections", l.lend_projections}});
    }
    teams.push_back({{"team_compute_s", FlexTpTeamComputeS(t)}, {"ranks", members}});
  }
  out["flextp_teams"] = teams;
  double crossing = 0;
  nlohmann::json traffic = nlohmann::json::array();
  for (const RegionBytes& b : answer.traffic) {
    traffic.push_back({{"from", answer.in.cluster.regions.at(static_cast<size_t>(b.from_region))},
                       {"to", answer.in.cluster.regions.at(static_cast<size_t>(b.to_region))},
                       {"bytes_per_step", b.bytes}});
    crossing += b.bytes;
  }
  out["traffic_between_regions"] = traffic;
  out["cross_region_bytes_per_token"] =
      s->global_batch_tokens > 0 ? crossing / static_cast<double>(s->global_batch_tokens) : 0.0;
  out["region_link_bound_s"] = answer.region_link_bound_s;
  return out;
}

double FlexTpTeamComputeS(const FlexTpTeamPrediction& team) {
  return team.balance.any() ? team.balance.team_s
                            : *std::max_element(team.alone_s.begin(), team.alone_s.end());
}

}  // namespace motley
