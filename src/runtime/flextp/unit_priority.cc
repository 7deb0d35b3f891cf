#include "runtime/flextp/unit_priority.h"

#include <algorithm>
#include <numeric>
#include <vector>

#include "core/check.h"

namespace motley {

void UnitPriority::Refresh(const torch::Tensor& unit_rows, int64_t step) {
  torch::NoGradGuard no_grad;
  torch::Tensor now = unit_rows.to(torch::kCPU, torch::kFloat64);
  if (!previous_.defined()) {
    previous_ = now;
    variation_ = torch::zeros({now.size(0)}, torch::kFloat64);
    pruned_since_ = torch::zeros({now.size(0)}, torch::kBool);
  } else {
    // Incremental: a unit pruned since the last refresh keeps its variation and its snapshot.
    torch::Tensor fresh = (now - previous_).abs().mean(1);
    variation_ = torch::where(pruned_since_, variation_, fresh);
    previous_ = torch::where(pruned_since_.unsqueeze(1), previous_, now);
    pruned_since_.zero_();
  }
  mean_variation_ = variation_.mean().item<double>();
  refreshed_step_ = step;
}

std::vector<int64_t> UnitPriority::Keep(int64_t own, int64_t prune, int64_t step) {
  MOTLEY_CHECK(refreshed());
  const int64_t units = variation_.size(0);
  MOTLEY_CHECK_LE(own, units);
  prune = std::clamp<int64_t>(prune, 0, own);
  // The smallest variation first; equal ones round-robin from a point that moves each step.
  const double* var = variation_.data_ptr<double>();
  std::vector<int64_t> order(static_cast<size_t>(own));
  std::iota(order.begin(), order.end(), 0);
  std::stable_sort(order.begin(), order.end(), [&](int64_t a, int64_t b) {
    if (var[a] != var[b]) return var[a] < var[b];
    return (a + units - step % units) % units < (b + units - step % units) % units;
  });
  bool* pruned = pruned_since_.data_ptr<bool>();
  for (int64_t i = 0; i < prune; ++i) pruned[order[i]] = true;
  std::vector<int64_t> keep(order.begin() + prune, order.end());
  std::sort(keep.begin(), keep.end());
  return keep;
}

}  // namespace motley
