#include "cost/comm_cost.h"

#include <algorithm>
#include <limits>
#include <map>

namespace motley {
namespace {

// One ring over `devices` in their order: `passes` x (n - 1) steps of 1/n of the payload.
double RingS(const std::vector<int>& devices, double bytes, int passes, const LinkFunction& link) {
  const size_t n = devices.size();
  if (n <= 1) return 0;
  double bandwidth = std::numeric_limits<double>::infinity(), latency = 0;
  for (size_t i = 0; i < n; ++i) {
    const Link l = link(devices[i], devices[(i + 1) % n]);
    bandwidth = std::min(bandwidth, l.bandwidth_bytes_per_s);
    latency = std::max(latency, l.latency_s);
  }
  const double steps = static_cast<double>(n - 1);
  return passes * steps * (latency + bytes / static_cast<double>(n) / bandwidth);
}

// The faster of the ring and the hierarchical algorithm (CollectiveS), without the per-call overhead.
double AlgorithmS(const std::vector<int>& devices, double bytes, int passes, const LinkFunction& link,
                  const std::function<int(int)>& node_of) {
  const double ring = RingS(devices, bytes, passes, link);
  std::map<int, std::vector<int>> by_node;
  for (int d : devices) by_node[node_of(d)].push_back(d);
  size_t k = 0;
  for (const auto& [node, members] : by_node) k = std::max(k, members.size());
  if (by_node.size() < 2 || k < 2) return ring;
  // Within the nodes (in parallel: the slowest node), across the nodes, within the nodes again.
  double inside = 0;
  std::vector<int> leaders;
  for (const auto& [node, members] : by_node) {
    inside = std::max(inside, RingS(members, bytes, 1, link));
    leaders.push_back(members.front());
  }
  const double across = RingS(leaders, bytes / static_cast<double>(k), passes, link);
  const double hierarchical = (passes == 1 ? inside : 2 * inside) + across;
  return std::min(ring, hierarchical);
}

}  // namespace

double TransferS(const Link& link, double bytes) {
  if (link.kind == LinkKind::kSelf || link.bandwidth_bytes_per_s <= 0) return 0;
  return link.latency_s + bytes / link.bandwidth_bytes_per_s;
}

double HostCopyS(const GpuSpec& spec, double bytes) { return bytes / spec.host_link_bytes_per_s; }

double CollectiveS(const std::vector<int>& devices, double bytes, int passes, const LinkFunction& link,
                   const std::function<int(int)>& node_of) {
  if (devices.size() <= 1) return 0;
  double overhead = 0;  // once a call, whichever algorithm runs it
  for (size_t i = 0; i < devices.size(); ++i)
    overhead = std::max(overhead, link(devices[i], devices[(i + 1) % devices.size()]).collective_overhead_s);
  return overhead + AlgorithmS(devices, bytes, passes, link, node_of);
}

}  // namespace motley
