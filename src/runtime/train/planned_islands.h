// A run of islands across processes (issue #52): the launched ranks are the islands' ranks, one
// island after another, each island running its own plan as a world of its own
// (Communicator::Within) on its share of every step's global batch; every `inner_steps` steps and at
// the end, each rank averages its pieces' pseudo-gradients with the other islands' (island_exchange.h:
// weighted by the tokens each island trained on) — with the ranks that hold the same pieces, or, where
// the islands' plans differ in shape, fragment by fragment through a lead an island — and takes the
// outer step (outer_optimizer.h), as the outer round's ops (plan/outer_round.h) say. Island 0's rank 0
// reports, validates and writes checkpoints.
#pragma once

#include "core/job.h"
#include "core/status.h"
#include "runtime/train/trainer.h"

namespace motley {

/// Trains `job` ([islands] count > 1) as this process's rank of a run of islands, the islands' plans
/// in options.planned.island_plans. The observer is called on island 0's rank 0 only.
Result<TrainSummary> TrainIslandsWithPlans(const JobSpec& job, const TrainOptions& options,
                                           TrainObserver* observer);

}  // namespace motley
