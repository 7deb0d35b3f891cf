// ZERO-resizing's own cost (and migration's borrowed compute, below), measured as FlexTP's pre-test does
// (Algorithm 2, line 1): one rank's MLP slice run forward and backward pruned at a few ratios against
// unpruned. What pruning a share p of the units really saves is p of the MLP's time less this overhead
// (allocating the reduced submatrices, extracting the kept units, imputing the pruned ones' gradients). A
// semi team runs it before its first step (FlexTpTeam::Pretest); `motley profile` records it per device type
// (ProfileEntry::resize_overhead), so the simulator prices resizing as the runtime will.
#pragma once

#include <cstdint>
#include <utility>
#include <vector>

#include <torch/torch.h>

namespace motley {

/// (ratio, the pruned pass's time beyond (1 - ratio) of the unpruned one's, as a fraction of the
/// unpruned one's) for each of `ratios`, on an MLP of `units` units of width `hidden` over `tokens`
/// tokens in `dtype` on `device`: the fastest of three passes each, after a warm-up. Not negative.
std::vector<std::pair<double, double>> TimeResizeOverhead(int64_t units, int64_t hidden, int64_t tokens,
                                                          torch::Device device, torch::Dtype dtype,
                                                          const std::vector<double>& ratios = {0.125, 0.25,
                                                                                               0.5});

/// Migration's borrowed compute, measured the same way: an MLP slice of `units` own units forward
/// and backward with `units / 2` more borrowed (as a receiver computes a straggler's, LayerWork),
/// against the slice alone and against half of it — what a borrowed unit costs over an own one
/// (1: the same). The fastest of three passes each, after a warm-up. Between 0.1 and 100 (what a
/// profile file accepts); 1 where three tries found the own half's time below the machine's noise.
double TimeBorrowedCost(int64_t units, int64_t hidden, int64_t tokens, torch::Device device,
                        torch::Dtype dtype);

}  // namespace motley
