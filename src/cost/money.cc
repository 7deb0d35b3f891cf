#include "cost/money.h"

#include "core/check.h"

namespace motley {

double DevicesUsdPerHour(const Cluster& cluster, const std::vector<int>& devices, bool on_demand) {
  double usd = 0;
  for (int d : devices) {
    const NodeSpec& node = cluster.node_of(d);
    MOTLEY_CHECK_MSG(node.price.has_value(), node.name);
    MOTLEY_CHECK_MSG(!node.spot || node.price->spot_usd_per_hour.has_value(), node.name);
    usd += node.spot && !on_demand ? *node.price->spot_usd_per_hour : node.price->usd_per_hour;
  }
  return usd;
}

namespace {

double InterruptionsPerHour(const Cluster& cluster, const std::vector<int>& devices, int* spot_devices) {
  double rate = 0;
  for (int d : devices)
    if (const NodeSpec& node = cluster.node_of(d); node.spot) {
      rate += node.price->spot_interruptions_per_hour;
      ++*spot_devices;
    }
  return rate;
}

double AvailabilityAt(double interruptions_per_hour, const InterruptionCost& cost) {
  return 1 / (1 + interruptions_per_hour * (cost.checkpoint_interval_s / 2 + cost.restart_s) / 3600);
}

}  // namespace

double Availability(const Cluster& cluster, const std::vector<int>& devices, const InterruptionCost& cost) {
  int spot = 0;
  return AvailabilityAt(InterruptionsPerHour(cluster, devices, &spot), cost);
}

PlanMoney PriceOfPlan(const Cluster& cluster, const std::vector<int>& devices, double step_s,
                      double tokens_per_step, const std::vector<RegionBytes>& traffic,
                      const InterruptionCost& interruptions) {
  MOTLEY_CHECK(step_s > 0);
  PlanMoney m;
  m.nominal_tokens_per_s = tokens_per_step / step_s;
  m.interruptions_per_hour = InterruptionsPerHour(cluster, devices, &m.spot_devices);
  m.availability = AvailabilityAt(m.interruptions_per_hour, interruptions);
  m.tokens_per_s = m.nominal_tokens_per_s * m.availability;
  m.compute_usd_per_hour = DevicesUsdPerHour(cluster, devices);
  const double steps_per_hour = 3600 / step_s;
  for (const RegionBytes& t : traffic) {
    const std::optional<double> usd_per_gb =
        EgressUsdPerGb(cluster.egress, cluster.regions.at(static_cast<size_t>(t.from_region)),
                       cluster.regions.at(static_cast<size_t>(t.to_region)));
    MOTLEY_CHECK_MSG(usd_per_gb.has_value(), "egress between regions is validated when prices are read");
    m.egress_usd_per_hour += t.bytes / 1e9 * *usd_per_gb * steps_per_hour;
    m.inter_region_bytes_per_step += t.bytes;
  }
  // On demand the traffic flows all the time; with interruptions, while the run trains.
  m.on_demand_usd_per_hour = DevicesUsdPerHour(cluster, devices, /*on_demand=*/true) + m.egress_usd_per_hour;
  m.egress_usd_per_hour *= m.availability;
  m.usd_per_hour = m.compute_usd_per_hour + m.egress_usd_per_hour;
  m.usd_per_million_tokens = m.usd_per_hour / (m.tokens_per_s * 3600) * 1e6;
  m.on_demand_usd_per_million_tokens = m.on_demand_usd_per_hour / (m.nominal_tokens_per_s * 3600) * 1e6;
  return m;
}

}  // namespace motley
