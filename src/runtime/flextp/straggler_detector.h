// Straggler detection for tensor parallelism (FlexTP §III-A, §IV-C). Every step the ranks of a
// tensor-parallel team all-gather their compute times; a rank slower than the team's average by more
// than a threshold is a straggler (§III-A: "compare the locally recorded runtime of task-i with the
// average of all tasks"). SEMI-migration serves the stragglers heaviest skew first (§IV-C); what a
// straggler catches up with — the normal ranks' mean, the stragglers removed from the list — and
// how (Eq. 1's pruning ratio, migration) is the FlexTpBalancer's (flextp_balancer.h), which also
// re-decides only when a rank's time moved by `recheck_change` (FlexTP updates the reference on
// demand). Torch-free: the caller does the all-gather.
#pragma once

#include <utility>
#include <vector>

namespace motley {

/// The ranks slower than the team's average by more than `threshold`, heaviest skew first (the
/// order SEMI-migration serves them in, FlexTP §IV-C), with their skew T_i / T_avg.
std::vector<std::pair<int, double>> StragglersBySkew(const std::vector<double>& compute_s, double threshold);

}  // namespace motley
