#include "cost/comm_cost.h"

#include <algorithm>
#include <limits>
#include <map>
#include <tuple>

namespace motley {
namespace {

struct Flow {
  int from = 0, to = 0;  // devices
  double bytes = 0;
};

// One round of flows that run at once (CollectiveS): the largest latency among them plus the
// longest of a path's bytes over its bandwidth (two devices of one node: their own link; two nodes:
// every flow between them shares the path) and a node's bytes out or in over its network card.
// (Scratch space is kept per thread: the planners time collectives by the million.)
double RoundS(const std::vector<Flow>& flows, const Network& net) {
  struct Path {
    bool across;
    int from, to;  // nodes when across, else devices
    int device_from, device_to;
    double bytes;
    auto key() const { return std::tie(across, from, to); }
  };
  thread_local std::vector<Path> paths;
  thread_local std::vector<double> out, in;  // a node's bytes to and from other nodes
  paths.clear();
  int nodes = 0;
  for (const Flow& f : flows) {
    const int na = net.node_of(f.from), nb = net.node_of(f.to);
    const bool across = na != nb;
    paths.push_back({across, across ? na : f.from, across ? nb : f.to, f.from, f.to, f.bytes});
    nodes = std::max({nodes, na + 1, nb + 1});
  }
  std::sort(paths.begin(), paths.end(), [](const Path& x, const Path& y) { return x.key() < y.key(); });
  out.assign(static_cast<size_t>(nodes), 0.0);
  in.assign(static_cast<size_t>(nodes), 0.0);
  double latency = 0, busy = 0;
  for (size_t i = 0; i < paths.size();) {
    size_t j = i;
    double bytes = 0;
    for (; j < paths.size() && paths[j].key() == paths[i].key(); ++j) bytes += paths[j].bytes;
    const Path& p = paths[i];
    if (p.across) {
      out[static_cast<size_t>(p.from)] += bytes;
      in[static_cast<size_t>(p.to)] += bytes;
    }
    const Link link = net.link(p.device_from, p.device_to);
    if (link.kind != LinkKind::kSelf && link.bandwidth_bytes_per_s > 0) {
      latency = std::max(latency, link.latency_s);
      busy = std::max(busy, bytes / link.bandwidth_bytes_per_s);
    }
    i = j;
  }
  for (size_t node = 0; node < static_cast<size_t>(nodes) && node < net.nic_bytes_per_s.size(); ++node)
    if (net.nic_bytes_per_s[node] > 0)
      busy = std::max(busy, std::max(out[node], in[node]) / net.nic_bytes_per_s[node]);
  return latency + busy;
}

// One ring over `devices` in their order: `passes` x (n - 1) rounds of 1/n of the payload.
double RingS(const std::vector<int>& devices, double bytes, int passes, const Network& net) {
  const size_t n = devices.size();
  if (n <= 1) return 0;
  // Where each node's members sit together in the ring (the usual case), every round's flows
  // take distinct paths, one out of and one into each node, none beyond its fastest link: the
  // slowest link paces the ring.
  thread_local std::vector<int> leaving;
  leaving.clear();
  bool together = true;
  for (size_t i = 0; i < n && together; ++i) {
    const int a = net.node_of(devices[i]), b = net.node_of(devices[(i + 1) % n]);
    if (a == b) continue;
    if (static_cast<size_t>(a) >= leaving.size()) leaving.resize(static_cast<size_t>(a) + 1, 0);
    together = ++leaving[static_cast<size_t>(a)] == 1;
  }
  if (together) {
    double bandwidth = std::numeric_limits<double>::infinity(), latency = 0;
    for (size_t i = 0; i < n; ++i) {
      const Link l = net.link(devices[i], devices[(i + 1) % n]);
      bandwidth = std::min(bandwidth, l.bandwidth_bytes_per_s);
      latency = std::max(latency, l.latency_s);
    }
    return passes * static_cast<double>(n - 1) * (latency + bytes / static_cast<double>(n) / bandwidth);
  }
  std::vector<Flow> round;
  for (size_t i = 0; i < n; ++i)
    round.push_back({devices[i], devices[(i + 1) % n], bytes / static_cast<double>(n)});
  return passes * static_cast<double>(n - 1) * RoundS(round, net);
}

// NCCL: the faster of the ring and the hierarchical algorithm.
double NcclS(const std::vector<int>& devices, double bytes, int passes, const Network& net) {
  const double ring = RingS(devices, bytes, passes, net);
  std::map<int, std::vector<int>> by_node;
  for (int d : devices) by_node[net.node_of(d)].push_back(d);
  size_t k = 0;
  for (const auto& [node, members] : by_node) k = std::max(k, members.size());
  if (by_node.size() < 2 || k < 2) return ring;
  // Within the nodes (in parallel: the slowest node), across the nodes, within the nodes again.
  double inside = 0;
  std::vector<int> leaders;
  for (const auto& [node, members] : by_node) {
    inside = std::max(inside, RingS(members, bytes, 1, net));
    leaders.push_back(members.front());
  }
  const double across = RingS(leaders, bytes / static_cast<double>(k), passes, net);
  const double hierarchical = (passes == 1 ? inside : 2 * inside) + across;
  return std::min(ring, hierarchical);
}

// Gloo's reduce-scatter: every member sends each other member its 1/n at once.
double AllToAllS(const std::vector<int>& devices, double bytes, const Network& net) {
  const size_t n = devices.size();
  std::vector<Flow> round;
  for (size_t i = 0; i < n; ++i)
    for (size_t j = 0; j < n; ++j)
      if (i != j) round.push_back({devices[i], devices[j], bytes / static_cast<double>(n)});
  return RoundS(round, net);
}

// Gloo's all-gather: a broadcast of its 1/n from every member at once, each along a binomial tree
// (round i: the first 2^i members of the tree, counted from its root, send to those 2^i further on).
double BroadcastTreesS(const std::vector<int>& devices, double bytes, const Network& net) {
  const size_t n = devices.size();
  double total = 0;
  for (size_t step = 1; step < n; step *= 2) {
    std::vector<Flow> round;
    for (size_t root = 0; root < n; ++root)
      for (size_t v = 0; v < step && v + step < n; ++v)
        round.push_back(
            {devices[(root + v) % n], devices[(root + v + step) % n], bytes / static_cast<double>(n)});
    total += RoundS(round, net);
  }
  return total;
}

}  // namespace

double TransferS(const Link& link, double bytes) {
  if (link.kind == LinkKind::kSelf || link.bandwidth_bytes_per_s <= 0) return 0;
  return link.latency_s + bytes / link.bandwidth_bytes_per_s;
}

double HostCopyS(const GpuSpec& spec, double bytes) { return bytes / spec.host_link_bytes_per_s; }

std::vector<int> FirstDeviceOfEachNode(const Cluster& cluster) {
  std::vector<int> first(cluster.nodes.size(), 0);
  for (const Device& d : cluster.devices)
    if (d.local_index == 0) first[static_cast<size_t>(d.node)] = d.id;
  return first;
}

std::vector<double> NodeNics(const std::vector<int>& first_device, const LinkFunction& link) {
  std::vector<double> nic(first_device.size(), 0.0);
  for (size_t a = 0; a < first_device.size(); ++a)
    for (size_t b = 0; b < first_device.size(); ++b)
      if (a != b) nic[a] = std::max(nic[a], link(first_device[a], first_device[b]).bandwidth_bytes_per_s);
  return nic;
}

double CollectiveS(CollectiveKind kind, const std::vector<int>& devices, double bytes, const Network& net) {
  if (devices.size() <= 1) return 0;
  double overhead = 0;  // once a call, whichever algorithm runs it
  for (size_t i = 0; i < devices.size(); ++i)
    overhead =
        std::max(overhead, net.link(devices[i], devices[(i + 1) % devices.size()]).collective_overhead_s);
  const int passes = kind == CollectiveKind::kAllReduce ? 2 : 1;
  if (net.library == CollectiveLibrary::kNccl) return overhead + NcclS(devices, bytes, passes, net);
  switch (kind) {
    case CollectiveKind::kAllReduce:
      return overhead + RingS(devices, bytes, passes, net);
    case CollectiveKind::kReduceScatter:
      return overhead + AllToAllS(devices, bytes, net);
    case CollectiveKind::kAllGather:
      return overhead + BroadcastTreesS(devices, bytes, net);
  }
  return overhead;
}

}  // namespace motley
