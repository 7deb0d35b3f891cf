// Link measurement (issue #7): the bandwidth and latency of the cluster's links, measured by
// ping-pong between ranks — once per distinct pair of node configurations, not per node pair: two
// nodes with the same device type, interconnect, bandwidths, region and emulation are
// interchangeable, so one representative pair stands for all of them. Within a node: its first
// two devices; between two configurations: the first device of a node of each.
//
// Rank r is cluster device r (one rank per device, as `motley train` launches them). Transfers go
// the way the executor sends them — from GPU memory over NCCL on GPUs (LinkProbeConfig::device),
// paced by the device emulation on emulated clusters — so what is measured is what training will
// see. One-way time = half the median round trip; bandwidth and
// latency are the least-squares line through the one-way times of several message sizes. Then a
// small all-reduce over the pair: its time beyond the two ring steps the line predicts is the
// overhead every collective call pays (ProfileLink::collective_overhead_s).
#pragma once

#include <cstdint>
#include <functional>
#include <string>
#include <vector>

#include "core/cluster.h"
#include "core/status.h"
#include "runtime/comm/communicator.h"
#include "sim/profile.h"

namespace motley {

struct LinkProbeConfig {
  int64_t min_bytes = 4 << 10;   // smallest message
  int64_t max_bytes = 64 << 20;  // largest message (sizes grow 8x from the smallest)
  double max_transfer_s = 0.05;  // skip sizes the cluster file says take longer than this one way
  int repeats = 3;               // round trips per size at least (the fastest counts), after one warm-up ...
  double min_time_per_size_s = 0.05;  // ... and more, up to max_repeats, until the size was timed this long
  int max_repeats = 32;
  int64_t collective_bytes = 4 << 10;  // the all-reduce that measures a collective's overhead ...
  int collective_calls = 40;           // ... this many times (the lower quartile counts), after one warm-up
  torch::Device device =
      torch::kCPU;  // where the buffers live: a rank's GPU sends over NCCL, as training does
  std::function<void(const std::string&)> progress;
};

/// A node's configuration: what makes two nodes interchangeable for their links.
std::string NodeConfigKey(const Cluster& cluster, int node);

/// The representative device pairs: (device a, device b), one per distinct (config, config) pair.
std::vector<std::pair<int, int>> LinkProbePairs(const Cluster& cluster);

/// Measures every representative pair and expands the results to every node pair they stand for
/// (`between` [n, n] for a node's own devices). Collective: every rank of the world calls it, the
/// world being one rank per cluster device. The result is the same on every rank.
Result<std::vector<ProfileLink>> MeasureLinks(Communicator& comm, const Cluster& cluster,
                                              const LinkProbeConfig& config);

}  // namespace motley
