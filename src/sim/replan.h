// Live rebalancing's planner (#25): the plan a running job switches to when some devices turn out
// slower (or faster) than it was planned for. Every rank keeps its device — the runtime switches at
// a step boundary and moves the state between the same processes, it does not restart them:
//
//  * one group (data parallelism): each device's batch and share of the state again (Poplar, or
//    Cephalo when the plan was Cephalo's; any ZeRO stage);
//  * several groups (a pipeline): the same groups of devices, their layer split, microbatch size
//    and ministages again (Zorse's search for a fixed grouping).
//
// The measured speeds enter through Cluster::measured_slowdown; the simulator judges, as when the
// run was first planned.
#pragma once

#include <string>

#include "core/cluster.h"
#include "core/model.h"
#include "core/status.h"
#include "plan/baselines.h"
#include "plan/plan.h"
#include "sim/profile.h"

namespace motley {

struct Replanned {
  Plan plan;
  double predicted_step_s = 0;  // the new plan's step on the cluster as measured
  double current_step_s = 0;    // the current plan's, on the same
  std::string why;              // what changed, in a line
};

/// `measured`: the run's cluster with the measured slowdowns. `request`: the job's batch, sequence
/// length, precision, checkpointing and clipping (its `devices` are ignored). `profile` may be
/// null (roofline times). An error when no plan keeps every rank on its device, or none fits.
Result<Replanned> ReplanInPlace(const Plan& current, const Cluster& measured, const ModelSpec& model,
                                const Profile* profile, const PlanRequest& request);

}  // namespace motley
