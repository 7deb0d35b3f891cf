// Cross-stage routing of microbatches in a heterogeneous pipeline (Zorse §4.2): which device of
// each group processes each microbatch.
#pragma once

#include <functional>
#include <vector>

#include "plan/plan.h"

namespace motley {

/// Seconds one device of a group needs for one microbatch of its group's layers.
using MicrobatchTime = std::function<double(int group, int device)>;

/// Zorse's routing. Group 0: each microbatch in turn goes to the device that would finish it
/// first (within its num_microbatches). Later groups: microbatches are taken in the order the
/// previous group finishes them, and the i-th to finish goes to the device with the i-th most
/// remaining work (its unassigned microbatches times its per-microbatch time), so the slowest
/// devices get work first. Returns one routing per group (device ids, indexed by microbatch).
/// REQUIRES: a pipeline plan that passed ValidatePlan.
std::vector<std::vector<int>> ZorseRouting(const Plan& plan, const MicrobatchTime& time);

}  // namespace motley
