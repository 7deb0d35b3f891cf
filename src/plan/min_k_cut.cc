#include "plan/min_k_cut.h"

#include <limits>
#include <map>

#include <boost/graph/adjacency_list.hpp>
#include <boost/graph/stoer_wagner_min_cut.hpp>
#include <boost/property_map/property_map.hpp>

#include "core/check.h"

namespace motley {
namespace {

using Graph = boost::adjacency_list<boost::vecS, boost::vecS, boost::undirectedS, boost::no_property,
                                    boost::property<boost::edge_weight_t, double>>;

struct Cut {
  double weight = std::numeric_limits<double>::infinity();
  std::vector<int> side;  // per vertex of the part: 0 or 1
};

// The minimum cut of the subgraph induced by `vertices`.
Cut MinCutOf(const WeightedGraph& g, const std::vector<int>& vertices) {
  Cut cut;
  if (vertices.size() < 2) return cut;
  std::map<int, int> local;
  for (size_t i = 0; i < vertices.size(); ++i) local[vertices[i]] = static_cast<int>(i);
  Graph sub(vertices.size());
  for (const auto& e : g.edges) {
    auto a = local.find(e.a), b = local.find(e.b);
    if (a == local.end() || b == local.end() || e.a == e.b) continue;
    boost::add_edge(a->second, b->second, e.weight, sub);
  }
  // Stoer-Wagner needs a connected graph; a disconnected part splits for free along a component.
  std::vector<int> component(vertices.size(), -1);
  std::vector<std::vector<int>> adjacency(vertices.size());
  for (auto [it, end] = boost::edges(sub); it != end; ++it) {
    const int a = static_cast<int>(boost::source(*it, sub)), b = static_cast<int>(boost::target(*it, sub));
    adjacency[a].push_back(b);
    adjacency[b].push_back(a);
  }
  std::vector<int> stack = {0};
  component[0] = 0;
  while (!stack.empty()) {
    int v = stack.back();
    stack.pop_back();
    for (int w : adjacency[v])
      if (component[w] < 0) component[w] = 0, stack.push_back(w);
  }
  if (std::find(component.begin(), component.end(), -1) != component.end()) {
    cut.weight = 0;
    for (int c : component) cut.side.push_back(c < 0 ? 1 : 0);
    return cut;
  }
  std::vector<bool> parity(vertices.size());
  auto parity_map = boost::make_iterator_property_map(parity.begin(), boost::get(boost::vertex_index, sub));
  cut.weight =
      boost::stoer_wagner_min_cut(sub, boost::get(boost::edge_weight, sub), boost::parity_map(parity_map));
  for (bool p : parity) cut.side.push_back(p ? 1 : 0);
  return cut;
}

}  // namespace

double CutWeight(const WeightedGraph& graph, const std::vector<int>& part) {
  double w = 0;
  for (const auto& e : graph.edges)
    if (part[e.a] != part[e.b]) w += e.weight;
  return w;
}

std::vector<std::vector<int>> SplitMinKCuts(const WeightedGraph& graph, int max_parts) {
  const int n = graph.num_vertices;
  const int parts = max_parts > 0 ? std::min(max_parts, n) : n;
  std::vector<std::vector<int>> partitions;
  if (n == 0) return partitions;
  std::vector<int> part(n, 0);
  std::vector<std::vector<int>> members = {std::vector<int>()};
  for (int v = 0; v < n; ++v) members[0].push_back(v);
  std::vector<Cut> cuts = {MinCutOf(graph, members[0])};
  partitions.push_back(part);
  while (static_cast<int>(members.size()) < parts) {
    // Split the part whose minimum cut is lightest.
    size_t best = 0;
    for (size_t p = 1; p < cuts.size(); ++p)
      if (cuts[p].weight < cuts[best].weight) best = p;
    MOTLEY_CHECK(cuts[best].weight < std::numeric_limits<double>::infinity());
    std::vector<int> stay, leave;
    for (size_t i = 0; i < members[best].size(); ++i)
      (cuts[best].side[i] == cuts[best].side[0] ? stay : leave).push_back(members[best][i]);
    const int new_part = static_cast<int>(members.size());
    for (int v : leave) part[v] = new_part;
    members[best] = stay;
    members.push_back(leave);
    cuts[best] = MinCutOf(graph, stay);
    cuts.push_back(MinCutOf(graph, leave));
    partitions.push_back(part);
  }
  return partitions;
}

WeightedGraph NodeBandwidthGraph(const Cluster& cluster) {
  std::vector<std::vector<int>> node_devices;
  int d = 0;
  for (const auto& node : cluster.nodes) {
    node_devices.emplace_back();
    for (int i = 0; i < node.num_devices; ++i) node_devices.back().push_back(d++);
  }
  return NodeBandwidthGraph(cluster, node_devices);
}

WeightedGraph NodeBandwidthGraph(const Cluster& cluster, const std::vector<std::vector<int>>& node_devices) {
  WeightedGraph g;
  g.num_vertices = static_cast<int>(node_devices.size());
  for (int a = 0; a < g.num_vertices; ++a) {
    for (int b = a + 1; b < g.num_vertices; ++b) {
      const double bw =
          cluster.LinkBetween(node_devices[a].front(), node_devices[b].front()).bandwidth_bytes_per_s;
      g.edges.push_back({a, b, bw * static_cast<double>(node_devices[a].size() * node_devices[b].size())});
    }
  }
  return g;
}

}  // namespace motley
