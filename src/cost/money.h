// What a plan costs in money: the devices it uses at their prices an hour, and the traffic its step
// sends between regions at their egress prices (core/prices.h), over the step's tokens — the figures
// `motley plan` prints beside a plan's speed and the objectives of a search over offers judge by.
#pragma once

#include <string>
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

/// What an interruption of a spot device costs a run: the work since its last checkpoint — half a
/// checkpoint interval, on average — and the time until it trains again (new capacity found, the
/// ranks relaunched, the checkpoint loaded: `motley train --max-restarts` does it, and plans again
/// for what is left). A synchronous run stops when any of its devices is interrupted.
struct InterruptionCost {
  double checkpoint_interval_s = 1800;  // how often the run checkpoints (`--checkpoint-interval`)
  double restart_s = 600;               // from an interruption to training again (`--restart-time`)
  std::string measured;  // which of the two were measured from a run, and where ("" when given)
};

struct PlanMoney {
  double tokens_per_s = 0;          // expected: the plan's speed x availability
  double compute_usd_per_hour = 0;  // the plan's devices (spot ones at their spot price)
  double egress_usd_per_hour = 0;   // its traffic between regions
  double usd_per_hour = 0;          // the two together
  double usd_per_million_tokens = 0;
  double inter_region_bytes_per_step = 0;
  // Spot devices (Node::spot): their interruptions together, an hour of training, and the share of
  // the time the run trains, 1 / (1 + interruptions x (checkpoint interval / 2 + restart)). With
  // none, availability 1 and the on-demand figures are the ones above.
  int spot_devices = 0;
  double interruptions_per_hour = 0;
  double availability = 1;
  double nominal_tokens_per_s = 0;    // between interruptions
  double on_demand_usd_per_hour = 0;  // the same devices and traffic on demand
  double on_demand_usd_per_million_tokens = 0;
};

/// REQUIRES: cluster.priced(), step_s > 0. `devices`: the plan's (the ones it leaves out are not
/// rented).
PlanMoney PriceOfPlan(const Cluster& cluster, const std::vector<int>& devices, double step_s,
                      double tokens_per_step, const std::vector<RegionBytes>& traffic,
                      const InterruptionCost& interruptions = {});

/// The devices' price an hour: spot nodes' at their spot price, unless `on_demand`.
/// REQUIRES: cluster.priced().
double DevicesUsdPerHour(const Cluster& cluster, const std::vector<int>& devices, bool on_demand = false);

/// The share of the time a run on `devices` trains (PlanMoney::availability).
double Availability(const Cluster& cluster, const std::vector<int>& devices, const InterruptionCost& cost);

}  // namespace motley
