// The Zorse planner's phases (zorse_planner.h), each in a file of its own, in the order PlanZorse
// runs them:
//   zorse_groupings.cc   1. cut the nodes into groupings (SPLIT's min-k-cuts, every grouping on a few
//                           nodes, nodes split in parts)
//   zorse_candidates.cc  2. per grouping, every candidate scored by the latency and memory models
//   zorse_groupings.cc   3. on many nodes, climb by the latency model to neighbouring groupings
//   zorse_judging.cc     4. judge the best of each kind by the evaluator in rounds; 5. climb from the
//                           best judged to its neighbours
#pragma once

#include <set>
#include <string>
#include <utility>
#include <vector>

#include "core/cluster.h"
#include "core/model.h"
#include "core/status.h"
#include "plan/min_k_cut.h"
#include "plan/planner_costs.h"
#include "plan/zorse_types.h"

namespace motley {

// The groupings of devices into pipeline stages the search tries.
struct ZorseGroupings {
  std::vector<std::vector<int>> node_devices;  // per node it may use, its devices
  std::vector<std::string> node_class;         // ... and its class (nodes of a class are interchangeable)
  WeightedGraph graph;                         // the nodes' bandwidth graph
  int max_k = 0;                               // the most groups a grouping may have
  // Groupings of whole nodes (node -> group) and how each was found.
  std::vector<std::pair<std::vector<int>, std::string>> of_nodes;
  // Every grouping as groups of devices (PlanZorse's numbering), how it was found, and how its nodes
  // were split (1: whole nodes; f: nodes split in f; 0: found by the climb).
  std::vector<std::pair<std::vector<std::vector<int>>, std::string>> of_devices;
  std::vector<int> split;

  /// Adds the grouping that puts part `v` of `parts` (whole nodes, or pieces of them) in group
  /// `part[v]`, unless the same groups were added before; returns whether it was new.
  bool Add(const std::vector<std::vector<int>>& parts, const std::vector<int>& part, const std::string& how,
           int split_in = 1);

 private:
  std::set<std::vector<std::vector<int>>> seen_;
};

/// Phase 1: the groupings of the nodes `request` may use.
ZorseGroupings CutGroupings(const Cluster& cluster, const ModelSpec& model, const ZorseRequest& request);

/// Phase 2 for every grouping (on every core), each candidate's `grouping` and `why` set.
std::vector<ZorseCandidate> CandidatesOfGroupings(const Cluster& cluster, const ModelSpec& model,
                                                  const PlannerCosts& costs, const ZorseRequest& request,
                                                  const ZorseGroupings& groupings);

/// Phase 2's least model step for one grouping (infinity: nothing fits), no candidate's plan made:
/// what phase 3 compares neighbouring groupings by.
double BestModelStepForGroups(const Cluster& cluster, const ModelSpec& model, const PlannerCosts& costs,
                              const ZorseRequest& request, std::vector<std::vector<int>> groups);

/// Phase 3: on more nodes than every grouping can be tried on, climbs by the latency model from the
/// two whole-node groupings it likes best; the groupings found join `groupings`, their candidates
/// `all`.
void ClimbGroupings(const Cluster& cluster, const ModelSpec& model, const PlannerCosts& costs,
                    const ZorseRequest& request, ZorseGroupings& groupings, std::vector<ZorseCandidate>& all);

/// Phases 4 and 5 on the candidates, best by the latency model first.
Result<ZorsePlan> JudgeCandidates(const std::vector<ZorseCandidate>& all,
                                  const std::vector<int>& split_of_grouping, const ZorseRequest& request,
                                  const PlanEvaluator& evaluate);

}  // namespace motley
