// The Cephalo planner (Guo et al., "Cephalo: Harnessing Heterogeneous GPU Clusters for Training
// Transformer Models", 2024): ZeRO-3 data parallelism over every device in which a device's share
// of the batch follows its speed and its share of the training state (parameter shard, gradient
// shard, AdamW moments) follows the memory its batch leaves free — the two decoupled, where Poplar
// gives every device an even shard and so caps a fast, small GPU's batch by the state it holds.
//
//  1. Each device's largest microbatch with no state at all (activations, two gathered layers and
//     their gradients only).
//  2. Batches by speed under those caps (poplar_allocator.h: gradient accumulation, a speed curve
//     per device).
//  3. State by memory: with the batch placed, each device has room for some share of the state;
//     shares are made as even as that room allows (water-filling: the fewer bytes the largest
//     piece, the faster each gather), so a cluster with room everywhere gets even shards.
//  4. Where the room does not hold the state, or holds it only unevenly, the largest microbatches
//     shrink (more accumulation steps, less activation memory) and 2-3 repeat: each plan that fits
//     is a candidate (a faster compute split against slower uneven gathers), and so is Poplar's
//     ZeRO-3 (microbatches capped for even shards). The simulator judges them.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "core/cluster.h"
#include "core/model.h"
#include "core/status.h"
#include "plan/plan.h"
#include "plan/planner_costs.h"

namespace motley {

struct CephaloRequest {
  int64_t global_batch_sequences = 0;
  int64_t seq_len = 1024;
  Precision precision = Precision::kBf16;
  bool activation_checkpointing = true;
  std::vector<int> devices;      // empty = every device of the cluster
  int64_t max_microbatch = 256;  // search limit per device
};

struct CephaloPlan {
  Plan plan;  // its group's state_shares empty when even
  std::string explain;
};

/// The room a device has for state: the share of the state that fits beside its microbatch.
/// Shares as even as the rooms allow, summing to 1 (water-filling); empty when the rooms together
/// hold less than the whole state.
std::vector<double> FillStateShares(const std::vector<double>& room_shares);

/// Cephalo's candidates, each a plan that fits by the memory model: microbatches capped for even
/// shards (Poplar's ZeRO-3), then up to four with the state placed by memory as the microbatches
/// shrink; the simulator picks among them (baselines.cc).
Result<std::vector<CephaloPlan>> PlanCephalo(const Cluster& cluster, const ModelSpec& model,
                                             const PlannerCosts& costs, const CephaloRequest& request);

}  // namespace motley
