#include "sim/region_traffic.h"

#include <algorithm>

#include <map>
#include <utility>

namespace motley {

std::vector<RegionBytes> RegionTraffic(const Schedule& schedule, const Cluster& cluster) {
  if (cluster.regions.size() < 2) return {};
  std::map<std::pair<int, int>, double> bytes;
  auto region = [&](int rank) {
    return cluster.devices.at(static_cast<size_t>(schedule.programs.at(static_cast<size_t>(rank)).device))
        .region;
  };
  for (const Program& p : schedule.programs)
    for (const Op& op : p.ops)
      if (op.kind == OpKind::kSend && region(p.rank) != region(op.peer))
        bytes[{region(p.rank), region(op.peer)}] += op.bytes;
  for (const Collective& c : schedule.collectives) {
    const int n = static_cast<int>(c.ranks.size());
    if (n < 2) continue;
    const OpKind kind = TrafficKind(c);
    const double passes = kind == OpKind::kAllReduce || kind == OpKind::kGradNorm ? 2.0 : 1.0;
    const double per_hop = passes * (n - 1) / n * c.bytes;
    for (int i = 0; i < n; ++i) {
      const int a = region(c.ranks[static_cast<size_t>(i)]),
                b = region(c.ranks[static_cast<size_t>((i + 1) % n)]);
      if (a != b) bytes[{a, b}] += per_hop;
    }
  }
  std::vector<RegionBytes> out;
  for (const auto& [pair, b] : bytes) out.push_back({pair.first, pair.second, b});
  return out;
}

double RegionLinkBoundS(const std::vector<RegionBytes>& traffic, const Cluster& cluster,
                        const CostModel& costs) {
  auto first_device_in = [&](int region) {
    for (size_t d = 0; d < cluster.devices.size(); ++d)
      if (cluster.devices[d].region == region) return static_cast<int>(d);
    return 0;
  };
  double bound = 0;
  for (const RegionBytes& b : traffic)
    bound = std::max(bound,
                     costs.TransferS(first_device_in(b.from_region), first_device_in(b.to_region), b.bytes));
  return bound;
}

}  // namespace motley
