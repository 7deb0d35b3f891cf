// State shares: how a group's ZeRO state is split among its data-parallel replicas, apart from
// how its batch is (Cephalo: a GPU's share of the parameters, gradients and AdamW moments follows
// its memory, its share of the microbatches its speed). A plan gives them per device
// (GroupPlan::state_shares; a tensor-parallel team's members alike); without them every replica
// holds an even, padded shard as ZeRO does.
//
// The lowering sizes each rank's state and the collectives by the shares, the simulator times an
// uneven collective by its largest piece, and the runtime splits each ministage's flat buffer by
// SplitState — the one rule every rank applies alike.
#pragma once

#include <cstdint>
#include <vector>

namespace motley {

struct GroupPlan;

/// A group's state shares per data-parallel replica (its tensor-parallel teams, in order), summing
/// to 1; empty when the plan gives none (even shards).
std::vector<double> ReplicaStateShares(const GroupPlan& group);

/// Where each replica's shard lies in a flat buffer of `numel` elements.
struct StateSplit {
  std::vector<int64_t> begin, numel;  // per replica
  int64_t padded_numel = 0;           // the flat buffer: even shards pad it to a multiple of the replicas
  bool even = true;
};

/// Even (`shares` empty): `dp` shards of ceil(numel / dp) elements, the flat buffer padded to fill
/// them. Uneven: replica i holds [round(numel * s_0..i-1), round(numel * s_0..i)) — no padding,
/// every element owned once. REQUIRES: shares empty or dp of them, each > 0.
StateSplit SplitState(int64_t numel, int dp, const std::vector<double>& shares);

/// An uneven collective over the replicas moves its pieces ring-wise, each step paced by the largest:
/// its time is an even one's over this many times the bytes (1 for even shares).
double UnevenCollectiveFactor(const std::vector<double>& shares);

}  // namespace motley
