// UnitPriority: which of a rank's own MLP units ZERO-resizing prunes in one layer (FlexTP §III-B) —
// or, given AttentionFeatureRows, which hidden features of its attention projections.
//   - Priority pruning: the units whose weights moved least since the last refresh go first (a
//     unit's variation: the mean |change| of its gate row, up row and down column); ties take turns
//     (round-robin from a point that moves each step).
//   - Incremental refresh: every `stats_interval_steps` the variations are measured again — except
//     for units pruned since the last refresh, which keep their variation and their snapshot: a
//     pruned unit's zero-imputed gradient leaves it unchanged, and measured afresh it would look idle
//     and be pruned forever (the paper's "endless loop").
//   - Lineage: Keep() returns the kept units in order — the layer's entry of the lineage table,
//     by which the pruned units' gradients are imputed (zeros) and the rest land on their own rows
//     (layer_work.h).
// CPU tensors, fp64 statistics; no communication.
#pragma once

#include <cstdint>

#include <torch/torch.h>

namespace motley {

class UnitPriority {
 public:
  /// Measures the variations against the last snapshot (`unit_rows`: [units, 3 * hidden], UnitRows);
  /// the first call only takes the snapshot (every variation 0).
  void Refresh(const torch::Tensor& unit_rows, int64_t step);
  bool refreshed() const { return refreshed_step_ >= 0; }
  int64_t refreshed_step() const { return refreshed_step_; }

  /// The kept units of the first `own` (the others are computed elsewhere this step) when `prune`
  /// of them are pruned at `step`, ascending; marks the pruned ones. REQUIRES: refreshed().
  std::vector<int64_t> Keep(int64_t own, int64_t prune, int64_t step);

  const torch::Tensor& variation() const { return variation_; }  // [units] fp64
  double mean_variation() const { return mean_variation_; }
  bool pruned_since_refresh(int64_t unit) const { return pruned_since_[unit].item<bool>(); }

 private:
  torch::Tensor previous_;      // [units, 3 * hidden] fp64: each unit's weights at its last measurement
  torch::Tensor variation_;     // [units] fp64
  torch::Tensor pruned_since_;  // [units] bool
  double mean_variation_ = 0;
  int64_t refreshed_step_ = -1;
};

}  // namespace motley
