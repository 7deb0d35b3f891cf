// StragglerMonitor: names the ranks that slow down during a run, in every kind of plan (data
// parallelism, pipelines, tensor-parallel teams). Each step every rank's compute seconds are
// compared with that rank's own norm — the median of its first measured steps after a warm-up
// step — so a slower kind of device is not a straggler for being slower; a rank beyond
// `threshold` for `persist_steps` steps in a row is straggling, and recovers after as many steps
// back within it. Fed the figures every rank already gathers (planned_run.cc); no torch.
// After a live rebalance (Restart) the norms are measured again under the new plan; a rank whose
// device the new plan was made slow for recovers when it runs faster than that norm by the
// threshold.
#pragma once

#include <cstdint>
#include <vector>

#include "core/job.h"

namespace motley {

class StragglerMonitor {
 public:
  StragglerMonitor(const StragglerDetectionConfig& config, int ranks);

  /// A rank that began or stopped straggling at this step.
  struct Change {
    int rank = 0;
    double slowdown = 1;      // its compute over its norm: the median of the steps that decided the change
    bool straggling = false;  // true: it began; false: it recovered
  };
  /// One step's compute seconds of every rank (indexed by rank). Returns the changes.
  std::vector<Change> Observe(const std::vector<double>& compute_s);

  /// A rank's compute at the last step over its norm (1 before the norm is known).
  double slowdown(int rank) const { return ranks_[rank].slowdown; }
  bool straggling(int rank) const { return ranks_[rank].straggling; }
  bool has_norm() const { return observed_ > config_.baseline_steps; }

  /// A new plan from the next step: every norm is measured again (a warm-up step, then the
  /// baseline steps). `slow[r]`: the plan was made for rank r's device slowed — the rank stays
  /// straggling, and recovers (a change with slowdown < 1) when its compute falls below its new
  /// norm / (1 + threshold) for persist_steps steps.
  void Restart(const std::vector<bool>& slow);

 private:
  struct RankState {
    std::vector<double> early;  // the baseline steps' compute seconds
    double norm_s = 0;
    double slowdown = 1;
    bool straggling = false;
    bool slow_norm = false;   // the norm was measured while straggling (Restart)
    std::vector<double> run;  // the slowdowns of the consecutive steps on the other side of the threshold
  };
  StragglerDetectionConfig config_;
  std::vector<RankState> ranks_;
  int64_t observed_ = 0;  // steps observed, the warm-up included
};

}  // namespace motley
