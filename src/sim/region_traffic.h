// The bytes a schedule's step sends between regions, by pair of regions: what its egress costs
// (cost/money.h). Sends count their bytes; a collective counts what a ring in its members' order moves
// over each hop between two regions (an all-reduce 2(n-1)/n of its payload a hop, a reduce-scatter or
// an all-gather (n-1)/n) — the traffic of NCCL's ring, the algorithm GPUs across regions run.
#pragma once

#include <vector>

#include "core/cluster.h"
#include "cost/money.h"
#include "plan/schedule.h"
#include "sim/cost_model.h"

namespace motley {

/// One entry a pair of regions that exchanges anything, ascending by (from, to); empty in one region.
std::vector<RegionBytes> RegionTraffic(const Schedule& schedule, const Cluster& cluster);

/// How long the busiest pair of regions' bytes take over the one link between them: a bound on the
/// time of whatever moves them (the simulator lets concurrent transfers and collectives each have a
/// link of their own; all of them cross that one link). 0 in one region.
double RegionLinkBoundS(const std::vector<RegionBytes>& traffic, const Cluster& cluster,
                        const CostModel& costs);

}  // namespace motley
