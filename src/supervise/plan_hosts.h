// Where a plan's ranks start when its devices sit on several hosts (`motley train JOB --hosts`):
// on each node's `host` (the cluster file's), as many as the plan puts devices there, hosts in the
// order of their first device. The ranks find their devices by host and local rank (a host's
// devices in index order, runtime/device/rank_device.h), so launcher rank r is the device
// `device_of_rank[r]`.
#pragma once

#include <string>
#include <vector>

#include "core/cluster.h"
#include "core/status.h"
#include "plan/plan.h"
#include "supervise/launcher.h"

namespace motley {

struct PlanHosts {
  std::vector<LaunchHost> hosts;    // in launch order, each with its ranks
  std::vector<int> device_of_rank;  // launcher rank -> cluster device
};

/// An error names the first node that names no host, and the fix.
Status CheckEveryNodeNamesItsHost(const Cluster& cluster);

/// An error names a device of the plan whose node gives no host, and the fix.
Result<PlanHosts> HostsOfPlan(const Plan& plan, const Cluster& cluster);
/// The same for the given devices (e.g. every device of the cluster: its links measured).
Result<PlanHosts> HostsOfDevices(std::vector<int> devices, const Cluster& cluster);

/// `launch` set to start the plan's ranks on their hosts through `remote`; `device_of_rank` (when
/// given) which device each launcher rank is.
Status PlaceOnHosts(const Plan& plan, const Cluster& cluster, const std::string& remote,
                    LaunchOptions* launch, std::vector<int>* device_of_rank = nullptr);

}  // namespace motley
