#include "runtime/flextp/straggler_detector.h"

#include <algorithm>
#include <cmath>
#include <numeric>

namespace motley {
namespace {

double Mean(const std::vector<double>& v) {
  return v.empty() ? 0 : std::accumulate(v.begin(), v.end(), 0.0) / static_cast<double>(v.size());
}

}  // namespace

StragglerVerdict StragglerDetector::Observe(const std::vector<double>& compute_s, int me, double matmul_s) {
  const double mine = compute_s.at(static_cast<size_t>(me));
  const bool due = checked_at_s_ <= 0 || std::abs(mine - checked_at_s_) > config_.recheck_change * checked_at_s_;
  verdict_.rechecked = due;
  if (!due) return verdict_;
  checked_at_s_ = mine;
  const double reference = Mean(compute_s);
  verdict_.reference_s = reference;
  verdict_.straggler = reference > 0 && mine > reference * (1 + config_.threshold);
  verdict_.gap_s = verdict_.straggler ? mine - reference : 0;
  verdict_.prune_ratio =
      verdict_.straggler && matmul_s > 0 ? std::min(config_.max_prune_ratio, verdict_.gap_s / matmul_s) : 0;
  return verdict_;
}

std::vector<std::pair<int, double>> StragglersBySkew(const std::vector<double>& compute_s, double threshold) {
  const double reference = Mean(compute_s);
  std::vector<std::pair<int, double>> out;
  for (size_t r = 0; r < compute_s.size(); ++r)
    if (reference > 0 && compute_s[r] > reference * (1 + threshold))
      out.push_back({static_cast<int>(r), compute_s[r] / reference});
  std::stable_sort(out.begin(), out.end(), [](const auto& a, const auto& b) { return a.second > b.second; });
  return out;
}

}  // namespace motley
