#include "cost/money.h"

#include "core/check.h"

namespace motley {

double DevicesUsdPerHour(const Cluster& cluster, const std::vector<int>& devices) {
  double usd = 0;
  for (int d : devices) {
    const NodeSpec& node = cluster.node_of(d);
    MOTLEY_CHECK_MSG(node.price.has_value(), node.name);
    usd += node.price->usd_per_hour;
  }
  return usd;
}

PlanMoney PriceOfPlan(const Cluster& cluster, const std::vector<int>& devices, double step_s,
                      double tokens_per_step, const std::vector<RegionBytes>& traffic) {
  MOTLEY_CHECK(step_s > 0);
  PlanMoney m;
  m.tokens_per_s = tokens_per_step / step_s;
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
  m.usd_per_hour = m.compute_usd_per_hour + m.egress_usd_per_hour;
  m.usd_per_million_tokens = m.usd_per_hour / (m.tokens_per_s * 3600) * 1e6;
  return m;
}

}  // namespace motley
