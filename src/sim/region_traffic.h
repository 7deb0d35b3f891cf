// The bytes a schedule's step sends between regions, by pair of regions: what its egress costs
// (cost/money.h). Sends count their bytes; a collective counts what a ring in its members' order moves
// over each hop between two regions (an all-reduce 2(n-1)/n of its payload a hop, a reduce-scatter or
// an all-gather (n-1)/n) — the traffic of NCCL's ring, the algorithm GPUs across regions run.
#pragma once

#include <vector>

#include "core/cluster.h"
#include "cost/money.h"
#include "plan/schedule.h"

namespace motley {

/// One entry a pair of regions that exchanges anything, ascending by (from, to); empty in one region.
std::vector<RegionBytes> RegionTraffic(const Schedule& schedule, const Cluster& cluster);

}  // namespace motley
