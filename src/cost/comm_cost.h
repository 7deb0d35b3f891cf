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

using LinkFunction = std::function<Link(int, int)>;

/// What a collective does with its payload.
enum class CollectiveKind { kAllReduce, kReduceScatter, kAllGather };

/// The library that runs a collective, and so its algorithm (runtime/comm/communicator.cc):
/// NCCL (GPUs) runs a ring or the hierarchical algorithm, whichever is faster; Gloo (CPU
/// processes, emulated devices) runs an all-reduce as one ring in the group's order, a
/// reduce-scatter as an all-to-all and an all-gather as a binomial-tree broadcast from every
/// member at once.
enum class CollectiveLibrary { kNccl, kGloo };

/// The network a collective runs over.
struct Network {
  LinkFunction link;
  std::function<int(int)> node_of;
  /// What a node's network card carries, every flow between its devices and other nodes' together
  /// (bytes/s per direction); a node without an entry (or an empty list) is limited by its links
  /// alone.
  std::vector<double> nic_bytes_per_s;
  CollectiveLibrary library = CollectiveLibrary::kNccl;
};

/// Each node's first device (a node's devices are numbered one after another): NodeNics' argument.
std::vector<int> FirstDeviceOfEachNode(const Cluster& cluster);

/// Each node's network card, taken as the fastest of its links to other nodes (NodeSpec's NIC, or
/// what a profile measured between two nodes one pair at a time): what one flow reaches alone, and
/// what all its flows to other nodes share. `first_device[n]`: a device of node n.
std::vector<double> NodeNics(const std::vector<int>& first_device, const LinkFunction& link);

/// A collective over `devices` (the group's order) moving `bytes` (the full payload), by the
/// library's algorithm, as rounds of flows that run at once. A round takes the largest latency
/// among its flows plus the longest of: a link's bytes (flows between two nodes summed: they share
/// the path) over its bandwidth, and a node's bytes out or in over its network card. A ring: n - 1
/// rounds a pass (two passes for an all-reduce), each moving 1/n of the payload from every member
/// to the next. The hierarchical algorithm (NCCL, when the members span several nodes with several
/// members on some): within each node, then between one member per node with 1/k of the payload
/// (k the most members a node has), then within each node again. An all-to-all: one round, 1/n
/// from every member to every other. A broadcast tree: ceil(log2 n) rounds, every member's 1/n
/// forwarded along its own tree at once. Plus, once a call, the largest
/// Link::collective_overhead_s between consecutive members.
double CollectiveS(CollectiveKind kind, const std::vector<int>& devices, double bytes,
                   const Network& network);

}  // namespace motley
