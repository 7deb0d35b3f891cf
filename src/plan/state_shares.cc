#include "plan/state_shares.h"

#include <algorithm>
#include <cmath>
#include <numeric>

#include "core/check.h"
#include "plan/plan.h"

namespace motley {

std::vector<double> ReplicaStateShares(const GroupPlan& group) {
  if (group.state_shares.empty()) return {};
  std::vector<double> out;
  for (size_t i = 0; i < group.state_shares.size(); i += static_cast<size_t>(group.tp_degree))
    out.push_back(group.state_shares[i]);
  const double sum = std::accumulate(out.begin(), out.end(), 0.0);
  for (double& s : out) s /= sum;  // a file's rounding (0.333 three times) is not an error
  return out;
}

StateSplit SplitState(int64_t numel, int dp, const std::vector<double>& shares) {
  MOTLEY_CHECK_GE(dp, 1);
  StateSplit s;
  if (shares.empty()) {
    const int64_t each = (numel + dp - 1) / dp;
    for (int i = 0; i < dp; ++i) {
      s.begin.push_back(i * each);
      s.numel.push_back(each);
    }
    s.padded_numel = each * dp;
    return s;
  }
  MOTLEY_CHECK_EQ(static_cast<int>(shares.size()), dp);
  s.even = false;
  const double total = std::accumulate(shares.begin(), shares.end(), 0.0);
  double cumulative = 0;
  int64_t at = 0;
  for (int i = 0; i < dp; ++i) {
    MOTLEY_CHECK_GT(shares[i], 0.0);
    cumulative += shares[i];
    const int64_t end =
        i + 1 == dp ? numel : std::min<int64_t>(numel, std::llround(numel * cumulative / total));
    s.begin.push_back(at);
    s.numel.push_back(std::max<int64_t>(0, end - at));
    at = std::max(at, end);
  }
  s.padded_numel = numel;
  return s;
}

double UnevenCollectiveFactor(const std::vector<double>& shares) {
  if (shares.empty()) return 1;
  const double total = std::accumulate(shares.begin(), shares.end(), 0.0);
  return *std::max_element(shares.begin(), shares.end()) / total * static_cast<double>(shares.size());
}

}  // namespace motley
