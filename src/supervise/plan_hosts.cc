#include "supervise/plan_hosts.h"

#include <algorithm>
#include <map>
#include <utility>

#include <fmt/format.h>

namespace motley {

namespace {
Status NoHost(const NodeSpec& node, const Cluster& cluster) {
  return Status::InvalidArgument(fmt::format(
      "--hosts: node '{}' of cluster {} names no host, so its ranks have nowhere to start; give each "
      "[[nodes]] a host = \"NAME or ADDRESS\" (what --remote reaches it by)",
      node.name, cluster.name));
}
}  // namespace

Status CheckEveryNodeNamesItsHost(const Cluster& cluster) {
  for (const NodeSpec& node : cluster.nodes)
    if (node.host.empty()) return NoHost(node, cluster);
  return Status::Ok();
}

Result<PlanHosts> HostsOfPlan(const Plan& plan, const Cluster& cluster) {
  std::vector<int> devices;
  for (const GroupPlan& g : plan.groups)
    for (const DevicePlan& d : g.devices) devices.push_back(d.device);
  return HostsOfDevices(std::move(devices), cluster);
}

Result<PlanHosts> HostsOfDevices(std::vector<int> devices, const Cluster& cluster) {
  std::sort(devices.begin(), devices.end());
  std::vector<std::string> order;                   // hosts by their first device
  std::map<std::string, std::vector<int>> on_host;  // each host's devices, in index order
  for (int device : devices) {
    const NodeSpec& node = cluster.node_of(device);
    if (node.host.empty()) return NoHost(node, cluster);
    if (!on_host.contains(node.host)) order.push_back(node.host);
    on_host[node.host].push_back(device);
  }
  PlanHosts out;
  for (const std::string& host : order) {
    out.hosts.push_back({host, static_cast<int>(on_host[host].size())});
    out.device_of_rank.insert(out.device_of_rank.end(), on_host[host].begin(), on_host[host].end());
  }
  return out;
}

Status PlaceOnHosts(const Plan& plan, const Cluster& cluster, const std::string& remote,
                    LaunchOptions* launch, std::vector<int>* device_of_rank) {
  MOTLEY_ASSIGN_OR_RETURN(PlanHosts on, HostsOfPlan(plan, cluster));
  launch->hosts = std::move(on.hosts);
  launch->remote = remote;
  if (device_of_rank != nullptr) *device_of_rank = std::move(on.device_of_rank);
  return Status::Ok();
}

}  // namespace motley
