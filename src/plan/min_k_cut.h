// Min-k-cuts of a weighted graph by SPLIT (Saran & Vazirani): starting from one part, repeatedly
// split the part whose minimum cut is lightest (Stoer-Wagner, from Boost.Graph), giving a
// partition for every k in one run, each within 2 - 2/k of the optimal k-cut. Zorse's planner
// partitions the cluster's bandwidth graph this way (zorse.txt §4.3.2): heavy (fast) links stay
// inside groups, light ones are cut and carry the pipeline.
#pragma once

#include <vector>

#include "core/cluster.h"

namespace motley {

struct WeightedGraph {
  struct Edge {
    int a = 0;
    int b = 0;
    double weight = 0;
  };
  int num_vertices = 0;
  std::vector<Edge> edges;
};

/// partitions[k - 1][v] is the part (0..k-1) of vertex v in the k-way partition, k = 1..n (or
/// 1..max_parts when given: SPLIT stops there). REQUIRES: weights >= 0.
std::vector<std::vector<int>> SplitMinKCuts(const WeightedGraph& graph, int max_parts = 0);

/// Total weight of the edges whose ends lie in different parts.
double CutWeight(const WeightedGraph& graph, const std::vector<int>& part);

/// The cluster's bandwidth graph with the devices of each node contracted into one vertex (they
/// share a type and links, so no good partition separates them): vertex i is cluster node i, and
/// the edge between two nodes weighs the bandwidth of all device pairs across them.
WeightedGraph NodeBandwidthGraph(const Cluster& cluster);
/// The same over some devices of some nodes: vertex i stands for `node_devices[i]` (devices of one
/// node), weighted by those devices only.
WeightedGraph NodeBandwidthGraph(const Cluster& cluster, const std::vector<std::vector<int>>& node_devices);

}  // namespace motley
