#include "sim/islands_sim.h"

#include <algorithm>
#include <cmath>
#include <map>

#include <fmt/format.h>

#include "sim/region_traffic.h"

namespace motley {
namespace {

// Rank r's outer state held through the inner steps, over every fragment's round: each fragment's anchor
// and momentum, and where rounds overlap inner steps, one fragment's values in flight at a time (an
// overlapped round's static bytes are half anchor and momentum, half what it holds in flight).
double OuterStateBytes(const std::vector<const Schedule*>& rounds, size_t r) {
  double sum = 0, widest = 0;
  for (const Schedule* round : rounds) {
    const double bytes = round->programs.at(r).static_device_bytes;
    sum += bytes;
    widest = std::max(widest, bytes);
  }
  return rounds.front()->outer_overlap_steps > 0 ? sum / 2 + widest / 2 : sum;
}

// The part of `round` the islands wait for (IslandsSimResult::round_exposed_s), its result `r`.
double ExposedSeconds(const Schedule& round, const SimResult& r, double slowest_s, int64_t most_steps) {
  if (round.outer_overlap_steps <= 0 || most_steps <= 0) return r.step_time_s;
  // The exchange (every outer_reduce and fragment all_reduce, first in each program) ends when the
  // last of them does, or when the slow link has carried its bytes; what follows lands after it.
  double sent_s = 0, end_s = 0;
  for (const TraceEvent& e : r.trace) {
    const OpKind kind = round.programs[static_cast<size_t>(e.rank)].ops[static_cast<size_t>(e.op)].kind;
    if (kind == OpKind::kOuterReduce || kind == OpKind::kAllReduce) sent_s = std::max(sent_s, e.end_s);
    end_s = std::max(end_s, e.end_s);
  }
  const double landing_s = std::max(0.0, end_s - sent_s);
  const double exchange_s = std::max(sent_s, r.region_link_bound_s);
  const double window_s =
      slowest_s * static_cast<double>(round.outer_overlap_steps) / static_cast<double>(most_steps);
  return std::max(0.0, exchange_s - window_s) + landing_s;
}

}  // namespace

Result<IslandsSimResult> SimulateIslands(const std::vector<const Schedule*>& islands,
                                         const std::vector<int64_t>& inner_steps,
                                         const std::vector<const Schedule*>& rounds, const Cluster& cluster,
                                         const CostModel& costs, const SimConfig& config) {
  if (islands.empty() || inner_steps.size() != islands.size())
    return Status::InvalidArgument(
        fmt::format("{} islands but {} inner step counts", islands.size(), inner_steps.size()));
  if (rounds.empty()) return Status::InvalidArgument("islands meet in one outer round or more");
  IslandsSimResult out;
  out.inner_steps = inner_steps;
  std::map<std::pair<int, int>, double> traffic;
  size_t first_rank = 0;
  double slowest_s = 0;
  for (size_t i = 0; i < islands.size(); ++i) {
    if (inner_steps[i] < 1)
      return Status::InvalidArgument(fmt::format("island {}: inner steps must be >= 1", i));
    // The island's ranks hold the outer state (anchor, momentum) through their steps.
    Schedule step = *islands[i];
    for (Program& p : step.programs)
      p.static_device_bytes += OuterStateBytes(rounds, first_rank + static_cast<size_t>(p.rank));
    first_rank += step.programs.size();
    MOTLEY_ASSIGN_OR_RETURN(SimResult r, Simulate(step, cluster, costs, config));
    const double h = static_cast<double>(inner_steps[i]);
    slowest_s = std::max(slowest_s, h * r.step_time_s);
    out.tokens_per_period += h * static_cast<double>(step.global_batch_tokens);
    if (!r.fits_memory) {
      out.fits_memory = false;
      out.oom_message +=
          fmt::format("{}island {}: {}", out.oom_message.empty() ? "" : "; ", i, r.oom_message);
    }
    for (const RegionBytes& b : RegionTraffic(step, cluster))
      traffic[{b.from_region, b.to_region}] += h * b.bytes;
    out.islands.push_back(std::move(r));
  }
  const int64_t most_steps = *std::max_element(inner_steps.begin(), inner_steps.end());
  for (const Schedule* round : rounds) {
    SimConfig round_config = config;
    round_config.record_trace = config.record_trace || round->outer_overlap_steps > 0;
    MOTLEY_ASSIGN_OR_RETURN(SimResult r, Simulate(*round, cluster, costs, round_config));
    // Every rank's exchange crosses the one link between two regions at once: the simulator bounds the
    // round by its bytes over that link (SimResult::region_link_bound_s).
    for (const RegionBytes& b : RegionTraffic(*round, cluster))
      traffic[{b.from_region, b.to_region}] += b.bytes;
    out.round_exposed_s += ExposedSeconds(*round, r, slowest_s, most_steps);
    out.rounds_s += r.step_time_s;
    if (!config.record_trace) r.trace.clear();
    if (round == rounds.front()) out.round = std::move(r);
  }
  out.period_s = slowest_s + out.round_exposed_s;
  out.tokens_per_s = out.period_s > 0 ? out.tokens_per_period / out.period_s : 0;
  double cross = 0;
  for (const auto& [pair, bytes] : traffic) {
    out.traffic.push_back({pair.first, pair.second, bytes});
    cross += bytes;
  }
  out.cross_region_bytes_per_token = out.tokens_per_period > 0 ? cross / out.tokens_per_period : 0;
  return out;
}

Result<IslandsSimResult> SimulateIslands(const std::vector<const Schedule*>& islands,
                                         const std::vector<int64_t>& inner_steps, const Schedule& round,
                                         const Cluster& cluster, const CostModel& costs,
                                         const SimConfig& config) {
  return SimulateIslands(islands, inner_steps, std::vector<const Schedule*>{&round}, cluster, costs, config);
}

std::vector<int64_t> InnerStepsBySpeed(const std::vector<double>& step_s, int64_t inner_steps) {
  const double slowest = step_s.empty() ? 0 : *std::max_element(step_s.begin(), step_s.end());
  std::vector<int64_t> out;
  for (double s : step_s)
    out.push_back(
        s > 0 ? std::max<int64_t>(1, static_cast<int64_t>(std::floor(inner_steps * slowest / s + 1e-9)))
              : inner_steps);
  return out;
}

}  // namespace motley
