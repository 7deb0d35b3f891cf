// Which devices a plan may use. More GPUs are not always faster: a batch spread over too many
// devices leaves each with too little work for its communication, and a few slow devices can hold
// back many fast ones. So every strategy plans on the whole cluster and on subsets of it, and the
// fastest plan wins; the devices it leaves out stay idle (the plan lists the devices it uses).
//
// The subsets are whole nodes, chosen so that a cluster containing another contains its subsets
// too — which makes the planner monotone in resources on such clusters (a bigger one never gets a
// slower plan):
//  * thresholds on speed: the nodes at least as fast as each device kind's speed (the slowest kind
//    left out, then the next, ...);
//  * scale-downs of each: of every class of identical nodes (same devices, links and region),
//    ceil(n / 2^j) of them, the first in file order, for j = 1, 2, ... until one of each is left;
//  * each region alone, where the cluster has several (every step of a plan across them pays the
//    slow link between them).
// A cluster of twice as many nodes of every class has its half among its subsets; a cluster with a
// slower kind of node added has the smaller one as its first threshold.
//
// Each subset carries a lower bound on the step of any plan on it (its devices' compute of every
// layer's forward and backward at their most efficient microbatch that fits their memory,
// perfectly balanced): a subset
// whose bound is no faster than a plan already found needs no planning, so skipping it changes
// nothing the planner would choose.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "core/cluster.h"
#include "core/model.h"
#include "plan/planner_costs.h"

namespace motley {

struct DeviceSubset {
  std::vector<int> devices;  // ascending device ids
  std::string description;   // e.g. "without the t4 nodes, half of every kind of node"
  double lower_bound_s = 0;  // no plan on these devices steps faster
};

/// What the subsets are for: the work of a step and what bounds a microbatch.
struct SubsetWork {
  int64_t global_batch_sequences = 0;
  int64_t seq_len = 1024;
  Precision precision = Precision::kBf16;
  int64_t max_microbatch = 256;  // the largest any planner tries (Poplar's)
  int max_tp_degree = 2;         // the widest tensor parallelism any planner tries (a microbatch's
                                 // working set is split over it)
};

/// What makes two nodes interchangeable to a planner: their devices, links and region (and, for a
/// node some [[links]] entry names, the node itself). `first_device` is the node's first device.
std::string NodeClass(const Cluster& cluster, int node, int first_device);

/// Each device's least time a sequence through every layer's forward and backward (at its most
/// efficient microbatch that fits its memory; infinity where none fits), and the least step of
/// `global_batch_sequences` on some of them (perfectly balanced): the bound DeviceSubset carries.
std::vector<double> DeviceSecondsPerSequence(const Cluster& cluster, const ModelSpec& model,
                                             const PlannerCosts& costs, const SubsetWork& work);
double StepLowerBoundS(const std::vector<double>& seconds_per_sequence, const std::vector<int>& devices,
                       int64_t global_batch_sequences);

/// The whole cluster first, then every other subset by ascending lower bound (ties: more devices
/// first).
std::vector<DeviceSubset> DeviceSubsets(const Cluster& cluster, const ModelSpec& model,
                                        const PlannerCosts& costs, const SubsetWork& work);

}  // namespace motley
