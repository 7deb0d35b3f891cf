// Money in `motley plan`: each plan priced where the cluster has prices, and — with an offers file,
// or an objective over a priced cluster — what to rent chosen together with the plan
// (plan/offer_search.h). An offers file becomes one cluster of everything it offers (each offer's
// nodes one after another); a priced cluster's nodes are grouped into classes of interchangeable
// nodes (plan/device_subsets.h: NodeClass, and the same price). An allocation is the first so many
// nodes of each group, and the planner plans on exactly its devices (every strategy auto knows).
#pragma once

#include <functional>
#include <string>
#include <vector>

#include "api/plan_answer.h"
#include "core/offers.h"
#include "core/status.h"
#include "plan/offer_search.h"

namespace motley {

/// Nodes one can take so many of: each group's node indices in the cluster, in order.
struct NodeGroups {
  std::vector<std::vector<int>> nodes;
  std::vector<std::string> names;  // the offer's name, or the class's first node's
  // An allocation cut to what can be taken together (an offers file's rows offered on demand and
  // as spot share their nodes); empty: anything within each group's nodes.
  std::function<Allocation(const Allocation&)> within;
};
NodeGroups GroupsOfOffers(const OfferList& offers);
NodeGroups GroupsOfCluster(const Cluster& cluster);

/// The query's objective and constraints; an error names the flag that is missing or does not fit.
Result<ObjectiveSpec> ObjectiveOfQuery(const PlanQuery& query);

/// Prices the answer's rows and its chosen plan. REQUIRES: a.cluster->priced().
void PricePlans(PlanAnswer* a);

/// Searches what to rent among `groups`, fills the answer's front, chosen plan, money and why.
/// A constraint nothing on the front meets leaves the chosen outcome's status saying so.
Status ChooseWhatToRent(PlanAnswer* a, const NodeGroups& groups, const ObjectiveSpec& spec);

/// A plan chosen from an offers file, made runnable: the cluster file of the nodes it uses
/// (core/offers_cluster.h) and the plan with its devices numbered as that file's — each offer's
/// nodes it uses, in order. `offered` is the cluster of everything the file offers (the plan's).
struct RentedFiles {
  Plan plan;
  std::string cluster_toml;
};
Result<RentedFiles> PlanOnWhatIsRented(const std::string& offers_name_or_path, const Cluster& offered,
                                       const Plan& plan);

}  // namespace motley
