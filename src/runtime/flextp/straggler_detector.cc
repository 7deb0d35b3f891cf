#include "runtime/flextp/straggler_detector.h"

#include <algorithm>
#include <numeric>

namespace motley {
namespace {

double Mean(const std::vector<double>& v) {
  return v.empty() ? 0 : std::accumulate(v.begin(), v.end(), 0.0) / static_cast<double>(v.size());
}

}  // namespace

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
