// The global order of a pipeline's work that every rank's program follows (lower.h): per group a
// sequence of forward and backward tasks (GPipe/interleaved: a group's ministages one after
// another over all microbatches; 1F1B: one forward one backward after a warm-up), timed by a
// unit-cost run of the whole pipeline and sorted by start time. Sends never block and each rank's
// program is a subsequence of this one order, so no lowered schedule can deadlock.
#pragma once

#include <cstdint>
#include <vector>

#include "plan/plan.h"

namespace motley {

/// One unit of work of a group: the forward or backward of a virtual stage on one microbatch.
struct Task {
  bool backward = false;
  int v = 0;      // virtual stage
  int64_t m = 0;  // microbatch (global index)
};

/// REQUIRES: `vstages` = VirtualStages(plan); microbatches 0..num_microbatches-1.
std::vector<Task> PipelineOrder(const Plan& plan, const std::vector<VirtualStage>& vstages,
                                int64_t num_microbatches);

}  // namespace motley
