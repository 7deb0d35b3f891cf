// What `motley simulate` computes, apart from how it prints: a plan (a file, or one already read),
// the cluster and model it runs on, stragglers and FlexTP's mode to try, and the simulated step —
// as JSON the `--json` output, which the Python module (python/) returns as a dict.
#pragma once

#include <optional>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "api/plan_inputs.h"
#include "core/status.h"
#include "plan/schedule.h"
#include "sim/region_traffic.h"
#include "sim/simulator.h"

namespace motley {

struct SimulateQuery {
  std::string plan_path;                // a plan file, unless `plan` is given
  std::optional<Plan> plan;             // a plan already read (its references relative to the working folder)
  std::string cluster, model;           // override the plan's ("" = the plan's own)
  std::string profile;                  // measured layer times ("" = roofline)
  std::vector<std::string> stragglers;  // "DEVICE=FACTOR", each
  std::string flextp_mode;              // "" = the plan's
  bool record_trace = false;
};

struct SimulateAnswer {
  PlanInputs
      in;  // the plan as simulated (routing filled, mode set), its cluster (stragglers applied) and model
  int routed = 0;  // groups whose cross-stage routing was computed
  Schedule schedule;
  std::string schedule_hash;  // ScheduleHash(schedule)
  SimResult result;
  /// Between regions: the step's bytes by pair, and how long the busiest pair's take over their one
  /// link (the step's time cannot be shorter; sim/region_traffic.h).
  std::vector<RegionBytes> traffic;
  double region_link_bound_s = 0;
};

Result<SimulateAnswer> AnswerSimulateQuery(const SimulateQuery& query);

/// `motley simulate --json`.
nlohmann::json SimulateAnswerJson(const SimulateAnswer& answer);

/// A FlexTP team's predicted compute a step: block by block under its balance, or its slowest rank's
/// when the balance moved and pruned nothing (its all-reduces wait for that rank).
double FlexTpTeamComputeS(const FlexTpTeamPrediction& team);

}  // namespace motley
