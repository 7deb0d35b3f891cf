// A run across islands, simulated (docs/design.md, "Islands"): each island's step schedule and the
// outer round (plan/outer_round.h) are run against the cost model, and a period — every island's
// inner steps, then the round — is what the run repeats. The islands step in parallel and meet at the
// round: the period is the slowest island's H_i steps plus the round, and a faster island waits (or
// takes more inner steps: its own H_i). A round that overlaps the next tau inner steps costs the
// period only what its exchange takes beyond them, and its landing.
#pragma once

#include <cstdint>
#include <vector>

#include "core/cluster.h"
#include "core/status.h"
#include "cost/money.h"
#include "plan/schedule.h"
#include "sim/cost_model.h"
#include "sim/simulator.h"

namespace motley {

struct IslandsSimResult {
  std::vector<SimResult> islands;    // each island's step (its memory with the outer state held)
  std::vector<int64_t> inner_steps;  // H_i
  SimResult round;      // the outer round (at least its bytes between regions over their one link:
                        // round.region_link_bound_s); with streaming fragments, the first fragment's
  double rounds_s = 0;  // every outer round's time: round's, or with fragments all of theirs
  // The part of the round the islands wait for: all of it, or with an overlapping round
  // (Schedule::outer_overlap_steps = tau) what its exchange takes beyond tau of the H steps' time
  // (max_i H_i step_i tau / H), and the outer steps and gathers that land after it; with streaming
  // fragments, each fragment's round so, summed.
  double round_exposed_s = 0;
  double period_s = 0;           // max_i H_i step_i + round_exposed_s
  double tokens_per_period = 0;  // sum_i H_i tokens_i
  double tokens_per_s = 0;
  bool fits_memory = true;
  std::string oom_message;
  /// Bytes between regions in a period: the islands' steps (H_i each) and the round.
  std::vector<RegionBytes> traffic;
  double cross_region_bytes_per_token = 0;
};

/// The same with streaming fragments (plan/outer_round.h: LowerOuterRounds): one round a fragment, in a
/// period each, fragment k's overlapping the tau steps after it (the islands hold every fragment's outer
/// state, and one fragment's values in flight at a time).
Result<IslandsSimResult> SimulateIslands(const std::vector<const Schedule*>& islands,
                                         const std::vector<int64_t>& inner_steps,
                                         const std::vector<const Schedule*>& rounds, const Cluster& cluster,
                                         const CostModel& costs, const SimConfig& config = {});

/// `islands[i]` runs on `costs[i]` (the islands' devices are the cluster's; each island's cost model
/// may carry its own profile). REQUIRES: as many inner step counts as islands, each >= 1.
Result<IslandsSimResult> SimulateIslands(const std::vector<const Schedule*>& islands,
                                         const std::vector<int64_t>& inner_steps, const Schedule& round,
                                         const Cluster& cluster, const CostModel& costs,
                                         const SimConfig& config = {});

/// Each island's inner steps so that the islands take about as long between rounds as the slowest
/// takes for `inner_steps` (at least 1 each): a faster island trains more instead of waiting.
std::vector<int64_t> InnerStepsBySpeed(const std::vector<double>& step_s, int64_t inner_steps);

}  // namespace motley
