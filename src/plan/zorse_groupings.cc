// Zorse phases 1 and 3 (zorse_search.h): which devices form the pipeline's groups. SPLIT's cuts of
// the nodes' bandwidth graph into k for every k (zorse.txt §4.3.2); on a few nodes every grouping;
// nodes split in parts; and on many nodes a climb by the latency model to neighbouring groupings.
#include <algorithm>
#include <functional>
#include <limits>
#include <map>
#include <utility>

#include <fmt/format.h>

#include "plan/device_subsets.h"
#include "plan/evaluate_all.h"
#include "plan/zorse_planner.h"
#include "plan/zorse_search.h"

namespace motley {
namespace {

// A partition numbered by first appearance (0 for the first vertex's part, ...), so equal
// partitions compare equal.
std::vector<int> CanonicalPartition(const std::vector<int>& part) {
  std::map<int, int> renumber;
  std::vector<int> out;
  for (int p : part) out.push_back(renumber.emplace(p, static_cast<int>(renumber.size())).first->second);
  return out;
}

// The groups of devices a partition of `parts` makes.
std::vector<std::vector<int>> GroupsOf(const std::vector<std::vector<int>>& parts,
                                       const std::vector<int>& part) {
  const int k = *std::max_element(part.begin(), part.end()) + 1;
  std::vector<std::vector<int>> groups(k);
  for (size_t v = 0; v < part.size(); ++v)
    for (int d : parts[v]) groups[part[v]].push_back(d);
  return groups;
}

// The nodes the request may use, with their devices and classes, and their bandwidth graph.
void UsableNodes(const Cluster& cluster, const ZorseRequest& request, ZorseGroupings& out) {
  std::vector<bool> allowed(cluster.num_devices(), request.devices.empty());
  for (int d : request.devices) allowed[d] = true;
  int d = 0;
  for (int n = 0; n < static_cast<int>(cluster.nodes.size()); ++n) {
    std::vector<int> mine;
    const int first = d;
    for (int i = 0; i < cluster.nodes[n].num_devices; ++i, ++d)
      if (allowed[d]) mine.push_back(d);
    if (!mine.empty()) {
      out.node_class.push_back(fmt::format("{}|{}", NodeClass(cluster, n, first), mine.size()));
      out.node_devices.push_back(std::move(mine));
    }
  }
  out.graph = NodeBandwidthGraph(cluster, out.node_devices);
}

// On a few nodes, every way to group them not yet among `out.of_nodes` (SPLIT keeps fast links
// inside groups, which is not always what pays: a slow node may do better as a stage of its own
// than beside a fast one).
void EveryGroupingOfNodes(ZorseGroupings& out) {
  std::set<std::vector<int>> seen;
  for (const auto& [part, _] : out.of_nodes) seen.insert(CanonicalPartition(part));
  std::vector<int> part(out.graph.num_vertices, 0);
  std::function<void(int, int)> visit = [&](int v, int used) {
    if (v == out.graph.num_vertices) {
      if (used <= out.max_k && seen.insert(part).second)
        out.of_nodes.push_back({part, fmt::format("{} group(s) of nodes", used)});
      return;
    }
    for (int p = 0; p <= used; ++p) {
      part[v] = p;
      visit(v + 1, std::max(used, p + 1));
    }
  };
  visit(0, 0);
}

// Nodes split into 2, 4, ... equal parts (a node whose devices do not divide stays whole), and
// SPLIT's cuts of the parts: as many stages as parts at most, each of at least one layer.
void SplitNodes(const Cluster& cluster, const ModelSpec& model, const ZorseRequest& request,
                ZorseGroupings& out) {
  for (int f = 2; f <= request.split_nodes_up_to; f *= 2) {
    std::vector<std::vector<int>> parts;
    for (const auto& devices : out.node_devices) {
      const int n = static_cast<int>(devices.size());
      const int pieces = n % f == 0 ? f : 1;
      for (int p = 0; p < pieces; ++p)
        parts.emplace_back(devices.begin() + p * (n / pieces), devices.begin() + (p + 1) * (n / pieces));
    }
    // No node divides, or more parts than layers (a stage holds at least one).
    if (parts.size() == out.node_devices.size() || parts.size() > static_cast<size_t>(model.num_layers))
      break;
    const WeightedGraph split_graph = NodeBandwidthGraph(cluster, parts);
    const int most = std::min<int>({split_graph.num_vertices, static_cast<int>(model.num_layers),
                                    request.max_groups > 0 ? request.max_groups : split_graph.num_vertices});
    const auto split_partitions = SplitMinKCuts(split_graph, most);
    for (int k = out.graph.num_vertices + 1; k <= most; ++k)
      out.Add(parts, split_partitions[k - 1], fmt::format("nodes split in {}, cut into {} by SPLIT", f, k),
              f);
  }
}

// Which nodes of each class a group holds does not matter: a grouping is its class counts.
using GroupingSignature = std::vector<std::map<std::string, int>>;
GroupingSignature Signature(const ZorseGroupings& g, const std::vector<int>& part) {
  std::map<int, std::map<std::string, int>> counts;
  for (size_t v = 0; v < part.size(); ++v) ++counts[part[v]][g.node_class[v]];
  GroupingSignature out;
  for (auto& [_, c] : counts) out.push_back(std::move(c));
  std::sort(out.begin(), out.end());
  return out;
}

// The groupings one node of a class away from `part`: moved to another group or to one of its own,
// not visited before (each joins `visited`).
std::vector<std::vector<int>> NeighbourGroupings(const ZorseGroupings& g, const std::vector<int>& part,
                                                 std::set<GroupingSignature>& visited) {
  const int k = *std::max_element(part.begin(), part.end()) + 1;
  std::set<std::pair<std::string, std::pair<int, int>>> tried;  // (class, (from, to))
  std::vector<std::vector<int>> out;
  for (size_t v = 0; v < part.size(); ++v)
    for (int to = 0; to <= std::min(k, g.max_k - 1); ++to) {
      if (to == part[v] || !tried.insert({g.node_class[v], {part[v], to}}).second) continue;
      std::vector<int> next = part;
      next[v] = to;
      next = CanonicalPartition(next);
      if (!visited.insert(Signature(g, next)).second) continue;
      out.push_back(std::move(next));
    }
  return out;
}

}  // namespace

bool ZorseGroupings::Add(const std::vector<std::vector<int>>& parts, const std::vector<int>& part,
                         const std::string& how, int split_in) {
  std::vector<std::vector<int>> groups = GroupsOf(parts, part);
  std::vector<std::vector<int>> key = groups;
  for (auto& g : key) std::sort(g.begin(), g.end());
  std::sort(key.begin(), key.end());
  if (!seen_.insert(key).second) return false;
  of_devices.push_back({std::move(groups), how});
  split.push_back(split_in);
  return true;
}

ZorseGroupings CutGroupings(const Cluster& cluster, const ModelSpec& model, const ZorseRequest& request) {
  ZorseGroupings out;
  UsableNodes(cluster, request, out);
  // No more groups than layers: a stage holds one at least.
  const int n = out.graph.num_vertices;
  out.max_k = std::min<int>(request.max_groups > 0 ? std::min<int>(request.max_groups, n) : n,
                            static_cast<int>(model.num_layers));
  const auto partitions = SplitMinKCuts(out.graph, out.max_k);
  for (int k = 1; k <= out.max_k; ++k)
    out.of_nodes.push_back({partitions[k - 1], fmt::format("cut into {} by SPLIT", k)});
  if (n <= request.exhaustive_groupings_up_to_nodes) EveryGroupingOfNodes(out);
  for (const auto& [part, how] : out.of_nodes) out.Add(out.node_devices, part, how);
  SplitNodes(cluster, model, request, out);
  return out;
}

std::vector<ZorseCandidate> CandidatesOfGroupings(const Cluster& cluster, const ModelSpec& model,
                                                  const PlannerCosts& costs, const ZorseRequest& request,
                                                  const ZorseGroupings& groupings) {
  // On every core; the models are read-only.
  std::vector<std::vector<ZorseCandidate>> per_grouping(groupings.of_devices.size());
  ForEachOnEveryCore(groupings.of_devices.size(), [&](size_t gi) {
    per_grouping[gi] =
        ZorseCandidatesForGroups(cluster, model, costs, request, groupings.of_devices[gi].first);
  });
  std::vector<ZorseCandidate> all;
  for (size_t gi = 0; gi < groupings.of_devices.size(); ++gi) {
    for (auto& c : per_grouping[gi]) {
      c.why = fmt::format("{}: {}", groupings.of_devices[gi].second, c.why);
      c.grouping = static_cast<int>(gi);
    }
    all.insert(all.end(), std::make_move_iterator(per_grouping[gi].begin()),
               std::make_move_iterator(per_grouping[gi].end()));
  }
  return all;
}

// A mix of kinds of node may balance better than SPLIT's cuts, which keep fast links inside groups,
// and the latency model may know it: from each start, the best neighbour by the model, while one is
// better.
void ClimbGroupings(const Cluster& cluster, const ModelSpec& model, const PlannerCosts& costs,
                    const ZorseRequest& request, ZorseGroupings& groupings,
                    std::vector<ZorseCandidate>& all) {
  if (groupings.graph.num_vertices <= request.exhaustive_groupings_up_to_nodes ||
      request.grouping_climb_rounds <= 0)
    return;
  auto best_step = [&](const std::vector<int>& part) {
    return BestModelStepForGroups(cluster, model, costs, request, GroupsOf(groupings.node_devices, part));
  };
  std::set<GroupingSignature> visited;
  for (const auto& [part, _] : groupings.of_nodes) visited.insert(Signature(groupings, part));
  // The starts: the whole-node groupings whose best candidate the model likes best.
  std::vector<std::pair<double, size_t>> liked;
  for (size_t gi = 0; gi < groupings.of_nodes.size(); ++gi) {
    double best = std::numeric_limits<double>::infinity();
    for (const auto& c : all)
      if (c.grouping == static_cast<int>(gi)) best = std::min(best, c.model_step_s);
    if (best < std::numeric_limits<double>::infinity()) liked.push_back({best, gi});
  }
  std::sort(liked.begin(), liked.end());
  for (size_t start = 0; start < std::min<size_t>(liked.size(), 2); ++start) {
    std::vector<int> part = groupings.of_nodes[liked[start].second].first;
    double current = liked[start].first;
    for (int round = 0; round < request.grouping_climb_rounds; ++round) {
      const std::vector<std::vector<int>> neighbours = NeighbourGroupings(groupings, part, visited);
      // Judged on every core by the model alone (a neighbour's candidates' plans, a thousand
      // devices' each, are made only for the one taken); the first of the best, in the order above.
      std::vector<double> steps(neighbours.size());
      ForEachOnEveryCore(neighbours.size(), [&](size_t i) { steps[i] = best_step(neighbours[i]); });
      std::vector<int> best_part;
      double best = current;
      for (size_t i = 0; i < neighbours.size(); ++i)
        if (steps[i] < best) {
          best = steps[i];
          best_part = neighbours[i];
        }
      if (best_part.empty()) break;
      std::vector<ZorseCandidate> best_candidates = ZorseCandidatesForGroups(
          cluster, model, costs, request, GroupsOf(groupings.node_devices, best_part));
      part = std::move(best_part);
      current = best;
      const int gi = static_cast<int>(groupings.of_devices.size());
      if (!groupings.Add(groupings.node_devices, part, "climbed by the latency model from SPLIT's cuts",
                         /*split_in=*/0))
        break;  // (the same groups as one tried)
      for (auto& c : best_candidates) {
        c.why = fmt::format("{}: {}", groupings.of_devices[gi].second, c.why);
        c.grouping = gi;
        all.push_back(std::move(c));
      }
    }
  }
}

}  // namespace motley
