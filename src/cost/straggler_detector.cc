#include "cost/straggler_detector.h"

#include <algorithm>
#include <numeric>

namespace motley {

double ReferenceTime(const std::vector<double>& compute_s, StragglerReference reference) {
  if (compute_s.empty()) return 0;
  if (reference == StragglerReference::kFastest) return *std::min_element(compute_s.begin(), compute_s.end());
  return std::accumulate(compute_s.begin(), compute_s.end(), 0.0) / static_cast<double>(compute_s.size());
}

std::vector<std::pair<int, double>> StragglersBySkew(const std::vector<double>& compute_s, double threshold,
                                                     StragglerReference reference) {
  const double t = ReferenceTime(compute_s, reference);
  std::vector<std::pair<int, double>> out;
  for (size_t r = 0; r < compute_s.size(); ++r)
    if (t > 0 && compute_s[r] > t * (1 + threshold)) out.push_back({static_cast<int>(r), compute_s[r] / t});
  std::stable_sort(out.begin(), out.end(), [](const auto& a, const auto& b) { return a.second > b.second; });
  return out;
}

}  // namespace motley
