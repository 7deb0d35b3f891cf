// What `motley simulate --island-plan P0 --island-plan P1 ...` computes: islands, each running its own
// plan on its own devices of one cluster, that meet every H inner steps for an outer round
// (plan/outer_round.h) — each island's step, the round, the period, tokens/s and what crosses between
// regions (sim/islands_sim.h) — as JSON the `--json` output.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "api/simulate_query.h"
#include "core/status.h"
#include "sim/islands_sim.h"

namespace motley {

struct IslandsQuery {
  std::vector<std::string> plan_paths;  // one an island, in island order
  std::string cluster, model;           // override the plans' ("" = the plans' own, alike)
  std::string profile;                  // measured layer times ("" = roofline)
  // H: every island's (one value) or each island's (one an island); with by_speed, the slowest island's.
  std::vector<int64_t> inner_steps = {50};
  bool inner_steps_by_speed = false;  // a faster island takes more inner steps in the same time
  std::string compression = "none";   // what crosses between islands: none, fp16, int8, int4
  int64_t overlap_steps = 0;          // the inner steps a round's exchange overlaps (a job's overlap_steps)
  int32_t fragments = 1;              // streaming fragments (a job's [islands] fragments): one round each
};

struct IslandsAnswer {
  std::vector<SimulateAnswer> islands;  // each island's plan, inputs and simulated step
  std::vector<Schedule> rounds;         // one a streaming fragment (plan/outer_round.h: LowerOuterRounds)
  IslandsSimResult result;
  const Schedule& round() const { return rounds.front(); }  // the first fragment's (the report draws it)
};

Result<IslandsAnswer> AnswerIslandsQuery(const IslandsQuery& query);

/// `motley simulate --island-plan ... --json`.
nlohmann::json IslandsAnswerJson(const IslandsAnswer& answer);

}  // namespace motley
