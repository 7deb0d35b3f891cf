// Islands beside synchronous plans (issue #52 item 3, a first step): where a cluster's regions hold
// alike nodes, one island a region — the best plan for the first region's devices on its share of the
// batch, the same plan on each other region's devices — meeting every H inner steps for an outer round
// (plan/outer_round.h), simulated with the islands' steps (sim/islands_sim.h). `motley plan --compare`
// and `--explain` list it beside the synchronous plans; the planner does not choose it (its loss at
// equal tokens is worse: bench/reports/islands_loss.md).
#pragma once

#include <cstdint>
#include <optional>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "api/plan_answer.h"
#include "sim/islands_sim.h"

namespace motley {

struct IslandCandidate {
  std::string strategy;     // the plan each island runs
  std::vector<Plan> plans;  // one a region, in region order
  int64_t inner_steps = 0;  // H, every island's
  std::string compression;  // what crosses between the islands
  IslandsSimResult result;
};

/// The inner steps tried, fewest first: the first whose outer round takes at most a tenth of its
/// period is taken (the largest, where none does).
inline constexpr int64_t kIslandInnerSteps[] = {10, 25, 50, 100, 250, 500};

/// Islands one a region of `answer`'s cluster, or nullopt with `*why` saying why there are none (one
/// region; regions of unlike nodes; a batch the regions do not share evenly; no plan fits a region).
std::optional<IslandCandidate> IslandsByRegion(const PlanAnswer& answer, std::string* why);

/// One line for `motley plan --compare`: the islands, their speed against the chosen synchronous plan's
/// and their bytes between regions a token.
std::string IslandCandidateLine(const IslandCandidate& islands, const PlanAnswer& answer);
nlohmann::json IslandCandidateJson(const IslandCandidate& islands);

}  // namespace motley
