// The global order of a pipeline's work that every rank's program follows (lower.h): serial
// sequences of forward and backward tasks (GPipe/interleaved: per group, its ministages one after
// another over all microbatches; 1F1B: per device of a group, one forward one backward of its own
// microbatches after a warm-up of its own), timed by a unit-cost run of the whole pipeline and
// sorted by start time. Sends never block and each rank's
// program is a subsequence of this one order, so no lowered schedule can deadlock.
#pragma once

#include <cstdint>
#include <vector>

#include "plan/plan.h"

namespace motley {

/// One unit of work of a group: the forward or backward of a ministage on one microbatch.
struct Task {
  bool backward = false;
  int v = 0;      // ministage
  int64_t m = 0;  // microbatch (global index)
};

/// REQUIRES: `ministages` = MinistagesByLayer(plan); microbatches 0..num_microbatches-1.
/// `worker_of[g][m]`: which of group g's workers (devices, or tensor-parallel runs: any id) runs
/// microbatch m; empty: one worker per group.
std::vector<Task> PipelineOrder(const Plan& plan, const std::vector<PlacedMinistage>& ministages,
                                int64_t num_microbatches,
                                const std::vector<std::vector<int>>& worker_of = {});

}  // namespace motley
