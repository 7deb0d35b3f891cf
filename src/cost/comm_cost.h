// Communication costs, one formula each: a point-to-point transfer, a copy to or from the host, a
// collective. The simulator's cost model (and through it the planners) and the runtime's device
// emulation both call these, so a plan is timed the same way where it is predicted and where it
// is emulated.
#pragma once

#include <functional>
#include <vector>

#include "core/cluster.h"
#include "core/gpu_catalog.h"

namespace motley {

/// Alpha-beta: the link's latency plus the bytes over its bandwidth; nothing to oneself.
double TransferS(const Link& link, double bytes);

/// A copy between a device and its host memory, over the device's host link.
double HostCopyS(const GpuSpec& spec, double bytes);

/// Passes over the payload: an all-reduce makes two (a reduce-scatter, then an all-gather).
constexpr int kAllReducePasses = 2;

using LinkFunction = std::function<Link(int, int)>;

/// A collective over `devices` (ring order) that moves `bytes` (the full payload) `passes` times.
/// Ring: n - 1 steps a pass, each moving 1/n of the payload over every link at once, paced by the
/// slowest link. When the members span several nodes with several members on some, the
/// hierarchical algorithm as well — within each node, then between one member per node with
/// 1/k of the payload (k the most members a node has), then within each node again — and the
/// faster of the two, as NCCL picks its algorithm. Plus, once a call, the largest
/// Link::collective_overhead_s among the ring's links.
double CollectiveS(const std::vector<int>& devices, double bytes, int passes, const LinkFunction& link,
                   const std::function<int(int)>& node_of);

}  // namespace motley
