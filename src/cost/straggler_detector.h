// Straggler detection for tensor parallelism (FlexTP §III-A, §IV-B). Every step the ranks of a
// tensor-parallel team all-gather their compute times; a rank slower than the team's reference by
// more than a threshold is a straggler. The reference is the paper's:
//   - for resizing (and migration alone), the average of all tasks (§III-A: "compare the locally
//     recorded runtime of task-i with the average of all tasks" — a compromise, since a strict
//     criterion makes many ranks prune);
//   - for SEMI-migration, the paper takes the fastest task (§IV-B: "we can use the most strict
//     criterion, i.e., the minimum runtime among all tasks", migration being loss-free): its
//     `semi_reference = "fastest"`; the default stays the average (core/job.h says why).
// SEMI serves the stragglers heaviest skew first. What a straggler catches up with and how (Eq. 1's
// pruning ratio, migration) is the FlexTpBalancer's (flextp_balancer.h), which also re-decides only
// when a rank's time moved by `recheck_change` (FlexTP updates the reference on demand).
// Torch-free: the caller does the all-gather.
#pragma once

#include <utility>
#include <vector>

namespace motley {

enum class StragglerReference { kAverage, kFastest };

/// The team's reference time: the mean of all ranks, or the fastest rank's.
double ReferenceTime(const std::vector<double>& compute_s, StragglerReference reference);

/// The ranks slower than the reference by more than `threshold`, heaviest skew first (the order
/// SEMI-migration serves them in), with their skew T_i / T_reference.
std::vector<std::pair<int, double>> StragglersBySkew(
    const std::vector<double>& compute_s, double threshold,
    StragglerReference reference = StragglerReference::kAverage);

}  // namespace motley
