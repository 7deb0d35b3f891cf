#include "api/islands_query.h"

#include <algorithm>
#include <optional>

#include <fmt/format.h>

#include "plan/outer_round.h"
#include "sim/cost_model.h"

namespace motley {

Result<IslandsAnswer> AnswerIslandsQuery(const IslandsQuery& query) {
  if (query.plan_paths.empty()) return Status::InvalidArgument("--island-plan: give one plan an island");
  const std::vector<int64_t>& h = query.inner_steps;
  if (h.empty() || *std::min_element(h.begin(), h.end()) < 1)
    return Status::InvalidArgument("--inner-steps: give 1 or more steps");
  if (h.size() != 1 && (h.size() != query.plan_paths.size() || query.inner_steps_by_speed))
    return Status::InvalidArgument(fmt::format(
        "--inner-steps: {} values for {} islands; give one for every island, or one an island in order "
        "(without --inner-steps-by-speed)",
        h.size(), query.plan_paths.size()));
  if (query.overlap_steps < 0 || query.overlap_steps >= h.front())
    return Status::InvalidArgument(fmt::format(
        "--overlap-steps {}: a round overlaps 0 or more inner steps, fewer than --inner-steps ({}): lower it",
        query.overlap_steps, h.front()));
  if (query.fragments < 1 || h.front() % query.fragments != 0 ||
      (query.fragments > 1 && query.overlap_steps >= h.front() / query.fragments))
    return Status::InvalidArgument(fmt::format(
        "--fragments {}: streaming fragments divide --inner-steps ({}), and each fragment's round overlaps "
        "fewer steps than separate two fragments (--overlap-steps {} < {} / {})",
        query.fragments, h.front(), query.overlap_steps, h.front(), query.fragments));
  IslandsAnswer a;
  for (const std::string& path : query.plan_paths) {
    SimulateQuery q;
    q.plan_path = path;
    q.cluster = query.cluster;
    q.model = query.model;
    q.profile = query.profile;
    MOTLEY_ASSIGN_OR_RETURN(SimulateAnswer island, AnswerSimulateQuery(q));
    if (!a.islands.empty()) {
      const PlanInputs& first = a.islands.front().in;
      if (island.in.cluster.name != first.cluster.name || island.in.model.name != first.model.name ||
          island.in.plan.precision != first.plan.precision)
        return Status::InvalidArgument(fmt::format(
            "{}: island plans must share a cluster, a model and a precision: this one is {} on {} in {}, the "
            "first ({}) {} on {} in {}; give --cluster and --model, or plans made for the same job",
            path, island.in.model.name, island.in.cluster.name, PrecisionName(island.in.plan.precision),
            query.plan_paths.front(), first.model.name, first.cluster.name,
            PrecisionName(first.plan.precision)));
    }
    a.islands.push_back(std::move(island));
  }
  std::vector<const Schedule*> steps;
  std::vector<double> step_s;
  for (const SimulateAnswer& island : a.islands) {
    steps.push_back(&island.schedule);
    step_s.push_back(island.result.step_time_s);
  }
  const PlanInputs& in = a.islands.front().in;
  OuterRoundOptions round;
  round.compression = query.compression;
  round.overlap_steps = query.overlap_steps;
  round.master_bytes = BytesPerElement(MasterPrecision(in.plan.precision));
  round.fragments = query.fragments;
  SetFragmentSizes(in.model, round);
  Result<std::vector<Schedule>> lowered = LowerOuterRounds(steps, round);
  if (!lowered.ok())
    return Status::InvalidArgument(fmt::format("--island-plan: {}", lowered.status().message()));
  a.rounds = std::move(*lowered);
  std::vector<const Schedule*> rounds;
  for (const Schedule& r : a.rounds) rounds.push_back(&r);
  std::optional<Profile> profile;
  if (!query.profile.empty()) {
    MOTLEY_ASSIGN_OR_RETURN(profile, LoadAnyProfile(query.profile));
  }
  const CostModel costs(in.cluster, in.model, profile ? &*profile : nullptr, in.plan.seq_len,
                        in.plan.precision, in.plan.activation_checkpointing);
  const std::vector<int64_t> inner = query.inner_steps_by_speed ? InnerStepsBySpeed(step_s, h.front())
                                     : h.size() == 1 ? std::vector<int64_t>(steps.size(), h.front())
                                                     : h;
  MOTLEY_ASSIGN_OR_RETURN(a.result, SimulateIslands(steps, inner, rounds, in.cluster, costs));
  return a;
}

nlohmann::json IslandsAnswerJson(const IslandsAnswer& answer) {
  const IslandsSimResult& r = answer.result;
  const Cluster& cluster = answer.islands.front().in.cluster;
  size_t round_ops = 0;
  for (const Schedule& round : answer.rounds) round_ops += round.num_ops();
  nlohmann::json islands = nlohmann::json::array();
  for (size_t i = 0; i < answer.islands.size(); ++i) {
    nlohmann::json island = SimulateAnswerJson(answer.islands[i]);
    // Its memory with the outer state held, as the run holds it.
    island["fits_memory"] = r.islands[i].fits_memory;
    island["oom"] = r.islands[i].oom_message;
    for (size_t d = 0; d < r.islands[i].devices.size(); ++d)
      island["devices"][d]["peak_memory_bytes"] = r.islands[i].devices[d].peak_memory_bytes;
    island["inner_steps"] = r.inner_steps[i];
    islands.push_back(std::move(island));
  }
  nlohmann::json traffic = nlohmann::json::array();
  for (const RegionBytes& b : r.traffic)
    traffic.push_back({{"from", cluster.regions.at(static_cast<size_t>(b.from_region))},
                       {"to", cluster.regions.at(static_cast<size_t>(b.to_region))},
                       {"bytes_per_period", b.bytes}});
  return {{"islands", islands},
          {"round_s", r.rounds_s},
          {"round_exposed_s", r.round_exposed_s},
          {"overlap_steps", answer.round().outer_overlap_steps},
          {"fragments", answer.rounds.size()},
          {"round_ops", round_ops},
          {"round_schedule_hash", SchedulesHash(answer.rounds)},
          {"period_s", r.period_s},
          {"tokens_per_period", r.tokens_per_period},
          {"tokens_per_s", r.tokens_per_s},
          {"fits_memory", r.fits_memory},
          {"oom", r.oom_message},
          {"traffic_between_regions", traffic},
          {"cross_region_bytes_per_token", r.cross_region_bytes_per_token}};
}

}  // namespace motley
