// StragglerMonitor: names the ranks that slow down during a run, in every kind of plan (data
// parallelism, pipelines, tensor-parallel teams). Each step every rank's compute seconds are
// compared with that rank's own norm — the median of its first measured steps after a warm-up
// step — so a slower kind of device is not a straggler for being slower; a rank beyond
// `threshold` for `persist_steps` steps in a row is straggling, and recovers after as many steps
// back within it. Fed the figures every rank already gathers (distributed_trainer.cc); no torch.
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
    double slowdown = 1;  // its compute this step over its norm
    bool straggling = false;  // true: it began; false: it recovered
  };
  /// One step's compute seconds of every rank (indexed by rank). Returns the changes.
  std::vector<Change> Observe(const std::vector<double>& compute_s);

  /// A rank's compute at the last step over its norm (1 before the norm is known).
  double slowdown(int rank) const { return ranks_[rank].slowdown; }
  bool straggling(int rank) const { return ranks_[rank].straggling; }
  bool has_norm() const { return observed_ > config_.baseline_steps; }

 private:
  struct RankState {
    std::vector<double> early;  // the baseline steps' compute seconds
    double norm_s = 0;
    double slowdown = 1;
    bool straggling = false;
    int64_t run = 0;  // consecutive steps on the other side of the threshold
  };
  StragglerDetectionConfig config_;
  std::vector<RankState> ranks_;
  int64_t observed_ = 0;  // steps observed, the warm-up included
};

}  // namespace motley
