// Distributed training: every rank of a launched run (motley launch, torchrun, srun, mpirun)
// executes its program of the plan's schedule (executor.h) step after step. Rank 0 reports,
// validates and writes checkpoints; the others only compute and communicate. Same data order,
// loss weighting and optimizer as the single-process trainer, so a lossless plan trains the same
// model (docs/design.md, "The correctness contract").
#pragma once

#include "core/job.h"
#include "core/status.h"
#include "plan/plan.h"
#include "runtime/train/trainer.h"

namespace motley {

/// Trains `job` as this process's rank of `plan` (read from options.plan_path). The observer is
/// called on rank 0 only.
Result<TrainSummary> TrainWithPlan(const JobSpec& job, const TrainOptions& options, TrainObserver* observer);

}  // namespace motley
