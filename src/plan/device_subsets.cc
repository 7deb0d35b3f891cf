#include "plan/device_subsets.h"

#include <algorithm>
#include <cmath>
#include <limits>
#include <map>
#include <set>

#include <fmt/format.h>

namespace motley {

std::string NodeClass(const Cluster& c, int node, int first_device) {
  const NodeSpec& n = c.nodes[node];
  std::string key = fmt::format("{}|{}|{}|{}|{}|{}|{}", n.device_type, n.num_devices,
                                InterconnectName(n.interconnect), n.intra_bandwidth_bytes_per_s,
                                n.nic_bandwidth_bytes_per_s, n.region, c.usable_memory_bytes(first_device));
  for (const auto& e : n.emulation)
    key += fmt::format("|{}:{}:{}", e.speed_factor, e.memory_bytes.value_or(-1),
                       e.link_bandwidth_bytes_per_s.value_or(-1));
  for (int d = first_device; d < first_device + n.num_devices; ++d) {
    key += fmt::format("|{}", c.usable_memory_bytes(d));
    if (auto it = c.measured_slowdown.find(d); it != c.measured_slowdown.end())
      key += fmt::format("x{}", it->second);
  }
  for (const auto& o : c.overrides)
    if (o.a == n.name || o.b == n.name) key += "|" + n.name;
  return key;
}

std::vector<double> DeviceSecondsPerSequence(const Cluster& cluster, const ModelSpec& model,
                                             const PlannerCosts& costs, const SubsetWork& work) {
  std::vector<double> seconds_per_sequence(cluster.num_devices());
  const int64_t largest_microbatch =
      std::max<int64_t>(1, std::min(work.max_microbatch, work.global_batch_sequences));
  for (int n = 0, first = 0; n < static_cast<int>(cluster.nodes.size());
       first += cluster.nodes[n].num_devices, ++n) {
    // A node's devices are of one kind: its first device's speed is theirs.
    double best = std::numeric_limits<double>::infinity();
    for (int64_t b = 1; b <= largest_microbatch; ++b) {
      // No plan runs a larger microbatch on this device: one layer's checkpointed backward (the
      // least any backward holds) would not fit, even split over the widest tensor parallelism.
      if (CheckpointedBackwardBytes(model, work.seq_len, work.precision,
                                    static_cast<double>(b * work.seq_len), false,
                                    work.max_tp_degree) > cluster.usable_memory_bytes(first))
        break;
      const double sequences = static_cast<double>(b);
      best = std::min(
          best, (costs.LayerForwardS(first, sequences) + costs.LayerBackwardS(first, sequences)) / sequences);
    }
    for (int d = first; d < first + cluster.nodes[n].num_devices; ++d)
      seconds_per_sequence[d] = best * costs.Slowdown(d) * static_cast<double>(model.num_layers);
  }
  return seconds_per_sequence;
}

double StepLowerBoundS(const std::vector<double>& seconds_per_sequence, const std::vector<int>& devices,
                       int64_t global_batch_sequences) {
  double rate = 0;  // sequences per second, all devices together
  for (int d : devices)
    if (std::isfinite(seconds_per_sequence[d])) rate += 1.0 / seconds_per_sequence[d];
  return rate > 0 ? static_cast<double>(global_batch_sequences) / rate
                  : std::numeric_limits<double>::infinity();
}

std::vector<DeviceSubset> DeviceSubsets(const Cluster& cluster, const ModelSpec& model,
                                        const PlannerCosts& costs, const SubsetWork& work) {
  const int num_nodes = static_cast<int>(cluster.nodes.size());
  std::vector<int> first_device(num_nodes);
  for (int n = 0, d = 0; n < num_nodes; d += cluster.nodes[n].num_devices, ++n) first_device[n] = d;
  const std::vector<double> seconds_per_sequence = DeviceSecondsPerSequence(cluster, model, costs, work);
  auto lower_bound = [&](const std::vector<int>& devices) {
    return StepLowerBoundS(seconds_per_sequence, devices, work.global_batch_sequences);
  };

  std::vector<std::string> node_class(num_nodes);
  for (int n = 0; n < num_nodes; ++n) node_class[n] = NodeClass(cluster, n, first_device[n]);
  std::set<double, std::greater<>> speeds;  // per-device speed of each node, fastest first
  for (int n = 0; n < num_nodes; ++n)
    speeds.insert(1.0 / seconds_per_sequence[first_device[n]]);  // 0: fits no sequence

  std::vector<DeviceSubset> out;
  std::set<std::vector<int>> seen;
  // Thresholds from the slowest kind (every node) up; then each scaled down.
  std::vector<double> thresholds(speeds.rbegin(), speeds.rend());
  for (size_t t = 0; t < thresholds.size(); ++t) {
    std::vector<int> kept, left;  // nodes at least this fast, and the others
    for (int n = 0; n < num_nodes; ++n)
      (1.0 / seconds_per_sequence[first_device[n]] >= thresholds[t] ? kept : left).push_back(n);
    // The nodes left out by their device type, or by name where a kept node has the same type
    // (emulated nodes of one type at different speeds).
    std::set<std::string> left_out_types;
    for (int n : left) {
      const bool type_kept = std::any_of(kept.begin(), kept.end(), [&](int k) {
        return cluster.nodes[k].device_type == cluster.nodes[n].device_type;
      });
      left_out_types.insert(type_kept ? "'" + cluster.nodes[n].name + "'" : cluster.nodes[n].device_type);
    }
    std::map<std::string, int> class_size;
    for (int n : kept) ++class_size[node_class[n]];
    int largest = 0;
    for (const auto& [_, size] : class_size) largest = std::max(largest, size);
    for (int divisor = 1;; divisor *= 2) {
      std::map<std::string, int> taken;
      std::vector<int> devices;
      for (int n : kept) {
        const int share = (class_size[node_class[n]] + divisor - 1) / divisor;
        if (taken[node_class[n]]++ >= share) continue;
        for (int i = 0; i < cluster.nodes[n].num_devices; ++i) devices.push_back(first_device[n] + i);
      }
      if (seen.insert(devices).second) {
        std::vector<std::string> what;
        if (!left_out_types.empty())
          what.push_back(fmt::format("without the {} nodes", fmt::join(left_out_types, ", ")));
        if (divisor > 1) what.push_back(fmt::format("1/{} of every kind of node (rounded up)", divisor));
        DeviceSubset s;
        s.devices = std::move(devices);
        s.description = what.empty() ? fmt::format("all {} devices", cluster.num_devices())
                                     : fmt::format("{} devices: {}", s.devices.size(), fmt::join(what, ", "));
        s.lower_bound_s = lower_bound(s.devices);
        out.push_back(std::move(s));
      }
      if (divisor >= largest) break;
    }
  }
  // Each region alone, where there are several: every step of a plan across regions pays the slow
  // link between them (the simulator's bound, sim/region_traffic.h).
  for (size_t region = 0; cluster.regions.size() > 1 && region < cluster.regions.size(); ++region) {
    std::vector<int> devices;
    for (int n = 0; n < num_nodes; ++n)
      if (cluster.devices[first_device[n]].region == static_cast<int>(region))
        for (int i = 0; i < cluster.nodes[n].num_devices; ++i) devices.push_back(first_device[n] + i);
    if (devices.empty() || !seen.insert(devices).second) continue;
    DeviceSubset s;
    s.devices = std::move(devices);
    s.description = fmt::format("{} devices: region {} alone", s.devices.size(), cluster.regions[region]);
    s.lower_bound_s = lower_bound(s.devices);
    out.push_back(std::move(s));
  }
  std::stable_sort(out.begin() + 1, out.end(), [](const DeviceSubset& a, const DeviceSubset& b) {
    if (a.lower_bound_s != b.lower_bound_s) return a.lower_bound_s < b.lower_bound_s;
    return a.devices.size() > b.devices.size();
  });
  return out;
}

}  // namespace motley
