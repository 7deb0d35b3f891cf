// Islands beside synchronous plans (issue #52 item 3): one island a region (the regions are the
// cluster's slowest cuts), each the best plan `auto` finds for its region's devices on its share of the
// batch (regions of the same nodes: region 0's plan on every region's matching devices); islands of
// unlike plans exchange whole fragments (plan/outer_round.h); with unlike devices the fastest island
// first and each island's inner steps by its predicted speed — meeting every H
// inner steps for an outer round (plan/outer_round.h), simulated with the islands' steps
// (sim/islands_sim.h). `motley plan` judges them against the best synchronous plan by the predicted time
// to the same loss: the islands' tokens/s times the tokens they need more, an estimate
// (plan/island_loss_model.h), and chooses them when that is sooner (`--islands auto`), or always
// (`--islands N`), or never considers them (`--islands off`).
#pragma once

#include <cstdint>
#include <optional>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "api/plan_answer.h"
#include "plan/island_loss_model.h"
#include "sim/islands_sim.h"

namespace motley {

struct IslandCandidate {
  std::string strategy;     // the plan each island runs ("a | b | c": island by island, where they differ)
  std::vector<Plan> plans;  // one a region (fastest first where their devices differ)
  std::string left_out;     // the regions no plan fits, left out, and why ("": none)
  int64_t inner_steps = 0;  // H: island 0's (the run's clock), every island's unless below
  // Islands of unlike devices: each island's H_i (island 0's the largest; a faster island trains more
  // inner steps in the time a slower one takes for fewer); empty when every island takes inner_steps.
  std::vector<int64_t> inner_steps_each;
  std::string compression;    // what crosses between the islands
  int64_t overlap_steps = 0;  // the inner steps each round overlaps (IslandsConfig::overlap_steps)
  int64_t fragments = 1;      // streaming fragments, each its own round (IslandsConfig::fragments)
  OuterConfig outer;          // the outer optimizer: the measured settings estimated to lose least
  IslandsSimResult result;
  // The judgement (JudgeIslands).
  IslandLossEstimate loss;
  bool chosen = false;
  std::string why;  // chosen or not, and why
};

/// The inner steps tried, fewest first: the first whose outer round the islands wait for at most a
/// tenth of its period is taken (the largest, where none does) — waiting for all of it, or where that
/// is more, overlapping the fewest of kIslandOverlapSteps next inner steps that brings it within — the
/// whole model's round, or streamed in the fewest of kIslandFragments fragments (dividing H, each
/// overlapping fewer than H / F steps), each exchange a fragment's.
inline constexpr int64_t kIslandInnerSteps[] = {10, 25, 50, 100, 250, 500};
inline constexpr int64_t kIslandOverlapSteps[] = {1, 2, 5};
inline constexpr int64_t kIslandFragments[] = {2, 5};

/// Islands one a region of `answer`'s cluster, or nullopt with `*why` saying why there are none (one
/// region; fewer sequences than regions; no plan fits two regions).
std::optional<IslandCandidate> IslandsByRegion(const PlanAnswer& answer, std::string* why);

/// Judges `islands` against `answer`'s chosen synchronous plan by the predicted time to the same loss
/// (with `train_tokens` > 0: the synchronous run's time for them, and the islands' to the same loss);
/// `forced` (--islands N) chooses them whatever it says.
void JudgeIslands(IslandCandidate& islands, const PlanAnswer& answer, bool forced, double train_tokens);

/// `motley plan --islands FLAG` ("off", "auto" or a count of islands, one a region so far): the islands
/// considered beside `answer`'s synchronous plans, judged (JudgeIslands with the query's tokens), or
/// nullopt with `*none` saying why there are none (empty: not considered). A count that cannot be
/// islands is an error.
Result<std::optional<IslandCandidate>> ConsiderIslands(const std::string& flag, const PlanAnswer& answer,
                                                       std::string* none);
/// `islands` and `islands_refused` of a plan's JSON.
void AddIslandsJson(const std::optional<IslandCandidate>& islands, const std::string& none,
                    nlohmann::json* j);

/// One line for `motley plan --compare`: the islands, their speed against the chosen synchronous plan's
/// and their bytes between regions a token.
std::string IslandCandidateLine(const IslandCandidate& islands, const PlanAnswer& answer);
nlohmann::json IslandCandidateJson(const IslandCandidate& islands);

}  // namespace motley
