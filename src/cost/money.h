// What a plan costs in money: the devices it uses at their prices an hour, and the traffic its step
// sends between regions at their egress prices (core/prices.h), over the step's tokens — the figures
// `motley plan` prints beside a plan's speed and the objectives of a search over offers judge by.
#pragma once

#include <vector>

#include "core/cluster.h"

namespace motley {

/// Bytes one step sends from one region to another (the simulator's schedule counts them:
/// sim/region_traffic.h).
struct RegionBytes {
  int from_region = 0;  // Cluster::regions indices
  int to_region = 0;
  double bytes = 0;
};

struct PlanMoney {
  double tokens_per_s = 0;
  double compute_usd_per_hour = 0;  // the plan's devices, on demand
  double egress_usd_per_hour = 0;   // its traffic between regions
  double usd_per_hour = 0;          // the two together
  double usd_per_million_tokens = 0;
  double inter_region_bytes_per_step = 0;
};

/// REQUIRES: cluster.priced(), step_s > 0. `devices`: the plan's (the ones it leaves out are not
/// rented).
PlanMoney PriceOfPlan(const Cluster& cluster, const std::vector<int>& devices, double step_s,
                      double tokens_per_step, const std::vector<RegionBytes>& traffic);

/// The devices' price an hour, on demand. REQUIRES: cluster.priced().
double DevicesUsdPerHour(const Cluster& cluster, const std::vector<int>& devices);

}  // namespace motley
