#include "runtime/train/straggler_monitor.h"

#include <algorithm>

#include "core/check.h"

namespace motley {

StragglerMonitor::StragglerMonitor(const StragglerDetectionConfig& config, int ranks)
    : config_(config), ranks_(static_cast<size_t>(ranks)) {}

std::vector<StragglerMonitor::Change> StragglerMonitor::Observe(const std::vector<double>& compute_s) {
  MOTLEY_CHECK_EQ(compute_s.size(), ranks_.size());
  std::vector<Change> changes;
  ++observed_;
  if (observed_ == 1) return changes;  // the first step warms up (allocations, caches)
  if (observed_ <= config_.baseline_steps + 1) {
    for (size_t k = 0; k < ranks_.size(); ++k) {
      RankState& r = ranks_[k];
      r.early.push_back(compute_s[k]);
      if (observed_ == config_.baseline_steps + 1) {
        std::vector<double> v = r.early;
        std::nth_element(v.begin(), v.begin() + static_cast<std::ptrdiff_t>(v.size() / 2), v.end());
        r.norm_s = v[v.size() / 2];
      }
    }
    return changes;
  }
  for (size_t k = 0; k < ranks_.size(); ++k) {
    RankState& r = ranks_[k];
    if (r.norm_s <= 0) continue;  // a rank that computes nothing
    r.slowdown = compute_s[k] / r.norm_s;
    // Slower than the norm by the threshold; for a norm measured slow, not yet faster than it by
    // the threshold.
    const bool beyond =
        r.slow_norm ? r.slowdown > 1 / (1 + config_.threshold) : r.slowdown > 1 + config_.threshold;
    if (beyond != r.straggling) {
      r.run.push_back(r.slowdown);
    } else {
      r.run.clear();
    }
    if (static_cast<int64_t>(r.run.size()) >= config_.persist_steps) {
      r.straggling = beyond;
      std::vector<double> v = r.run;
      std::nth_element(v.begin(), v.begin() + static_cast<std::ptrdiff_t>(v.size() / 2), v.end());
      r.run.clear();
      changes.push_back({static_cast<int>(k), v[v.size() / 2], beyond});
    }
  }
  return changes;
}

void StragglerMonitor::Restart(const std::vector<bool>& slow) {
  MOTLEY_CHECK_EQ(slow.size(), ranks_.size());
  observed_ = 0;
  for (size_t k = 0; k < ranks_.size(); ++k) {
    ranks_[k] = RankState();
    ranks_[k].straggling = ranks_[k].slow_norm = slow[k];
  }
}

}  // namespace motley
