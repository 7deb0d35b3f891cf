// Straggler detection for tensor parallelism (FlexTP §III-A; issue #9 §2). Every step the ranks of
// a tensor-parallel group all-gather their compute times (one number each); each rank compares its
// own with the reference — the group's average — and is a straggler when it is slower by more than
// a threshold. Its pruning ratio (FlexTP's Eq. 1) is what closes the gap: the fraction of its
// matrix-multiplication time equal to its lead over the reference, (T_i - T_ref) / M_i, capped.
//
// A rank re-checks only when its own time has moved by more than `recheck_change` (10%) since it
// last checked (FlexTP updates the reference on demand, not every step), so a verdict holds while
// the rank's speed holds and small jitter does not flip it. Torch-free: the caller does the
// all-gather.
#pragma once

#include <vector>

namespace motley {

struct StragglerConfig {
  double threshold = 0.05;       // slower than the reference by more than this fraction: a straggler
  double recheck_change = 0.10;  // re-check when this rank's own time moved by more than this fraction
  double max_prune_ratio = 0.5;  // never prune more than this fraction of a straggler's columns
};

struct StragglerVerdict {
  bool straggler = false;
  double reference_s = 0;   // the group's average compute time when last checked
  double gap_s = 0;         // this rank's lead over the reference (0 when not a straggler)
  double prune_ratio = 0;   // FlexTP's Eq. 1, capped; 0 when not a straggler
  bool rechecked = false;   // this step re-checked (else the previous verdict stands)
};

class StragglerDetector {
 public:
  explicit StragglerDetector(StragglerConfig config = {}) : config_(config) {}

  /// One step: every rank's compute time (the all-gather's result, in rank order), this rank's index
  /// in it, and this rank's time in matrix multiplications (the work pruning can save).
  StragglerVerdict Observe(const std::vector<double>& compute_s, int me, double matmul_s);

  const StragglerVerdict& verdict() const { return verdict_; }

 private:
  StragglerConfig config_;
  StragglerVerdict verdict_;
  double checked_at_s_ = -1;  // this rank's time when it last checked
};

/// The ranks slower than the group's average by more than `threshold`, heaviest skew first (the
/// order SEMI-migration serves them in, FlexTP §IV-C), with their skew T_i / T_avg.
std::vector<std::pair<int, double>> StragglersBySkew(const std::vector<double>& compute_s, double threshold);

}  // namespace motley
