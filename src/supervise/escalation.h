// Escalation at run time (issue #23): a rank that runs out of memory in a step says so in a
// failure report (TrainOptions::failure_report_dir); the `motley train` that launched the ranks
// reads the reports, plans again with each such device's memory capped below what the failed plan
// was predicted to use on it — so the planner must find a more frugal layout: a higher ZeRO stage
// or smaller per-device batches (Poplar), more ministages or offload (Zorse), whichever family
// fits best — and relaunches every rank under the new plan from the same state.
//
// "The same state": the ranks are separate processes and a failed one takes its state with it, so
// the retry resumes from the last checkpoint this run wrote (or the run's start) and replays the
// steps since under the new plan — the same data in the same order from the same weights, so no
// sample is skipped or counted twice; the replay costs time, not data.
#pragma once

#include <string>
#include <vector>

#include "core/cluster.h"
#include "core/model.h"
#include "core/status.h"
#include "plan/baselines.h"
#include "plan/plan.h"
#include "sim/profile.h"

namespace motley {

/// What a rank that failed wrote (runtime/train/planned_run_train.cc).
struct RankFailure {
  int rank = -1;
  int device = -1;   // cluster device id
  int64_t step = 0;  // the step it failed in (from 1)
  bool out_of_memory = false;
  bool diverged = false;  // the run diverged ([divergence]): nothing to restart or replan
  std::string message;
};

/// The reports in `dir` (rank-R.json), in rank order; a file that cannot be read is skipped.
std::vector<RankFailure> ReadFailureReports(const std::string& dir);

struct EscalationConfig {
  // A device that ran out is planned with at most this share of what the failed plan was predicted
  // to use on it (and of its capacity): the prediction was short by at least the difference.
  double cap_fraction = 0.9;
  int max_escalations = 3;  // retries in one run before giving up
};

struct Escalation {
  Plan plan;
  std::string strategy;
  std::string why;      // which devices ran out, what the failed plan predicted, the caps
  std::string changes;  // what differs from the failed plan
};

/// The plan to retry with after `failures` (out of memory) under `failed`. `cluster` carries the
/// caps learnt so far (Cluster::memory_cap_bytes) and gets the new ones. An error when no plan of
/// `strategy` fits under the caps.
Result<Escalation> PlanMoreFrugally(const Plan& failed, const std::vector<RankFailure>& failures,
                                    const std::string& strategy, const PlanRequest& request,
                                    const ModelSpec& model, const Profile& profile, Cluster* cluster,
                                    const EscalationConfig& config = {});

/// One line per difference between two plans of the same cluster, e.g. "ZeRO-2 -> ZeRO-3",
/// "device 0: 1 x 26 sequences -> 2 x 13". "" when they are the same.
std::string DescribePlanChange(const Plan& before, const Plan& after);

}  // namespace motley
