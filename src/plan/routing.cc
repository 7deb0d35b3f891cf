#include "plan/routing.h"

#include <algorithm>
#include <cstdint>
#include <numeric>

#include "core/check.h"

namespace motley {

std::vector<std::vector<int>> ZorseRouting(const Plan& plan, const MicrobatchTime& time) {
  const int64_t num_mb = plan.groups.front().num_microbatches();
  std::vector<std::vector<int>> routing(plan.groups.size(), std::vector<int>(num_mb, -1));
  std::vector<double> ready(num_mb, 0.0);  // when each microbatch's input is available to the group
  for (size_t g = 0; g < plan.groups.size(); ++g) {
    const auto& devices = plan.groups[g].devices;
    const size_t n = devices.size();
    std::vector<int64_t> left(n);
    std::vector<double> per(n), free_at(n, 0.0);
    for (size_t i = 0; i < n; ++i) {
      left[i] = plan.groups[g].is_tp_leader(i) ? devices[i].num_microbatches : 0;
      per[i] = time(static_cast<int>(g), devices[i].device);
    }
    // The order microbatches become available: by the previous group's finish times.
    std::vector<int64_t> order(num_mb);
    std::iota(order.begin(), order.end(), 0);
    std::stable_sort(order.begin(), order.end(), [&](int64_t a, int64_t b) { return ready[a] < ready[b]; });
    std::vector<double> finish(num_mb, 0.0);
    for (int64_t m : order) {
      size_t best = n;
      for (size_t i = 0; i < n; ++i) {
        if (left[i] == 0) continue;
        if (best == n) {
          best = i;
          continue;
        }
        if (g == 0) {
          // Earliest finish for this microbatch.
          if (std::max(free_at[i], ready[m]) + per[i] < std::max(free_at[best], ready[m]) + per[best])
            best = i;
        } else if (left[i] * per[i] > left[best] * per[best]) {
          best = i;  // most remaining work first
        }
      }
      MOTLEY_CHECK_LT(best, n);
      routing[g][m] = devices[best].device;
      --left[best];
      free_at[best] = std::max(free_at[best], ready[m]) + per[best];
      finish[m] = free_at[best];
    }
    ready = finish;
  }
  return routing;
}

}  // namespace motley
