#include "api/offer_plan.h"

#include <algorithm>
#include <cmath>
#include <limits>
#include <map>
#include <mutex>
#include <numeric>
#include <tuple>
#include <utility>

#include <fmt/format.h>

#include "core/offers_cluster.h"
#include "core/units.h"
#include "plan/device_subsets.h"

namespace motley {
namespace {

PlanMoney MoneyOf(const PlanAnswer& a, const StrategyOutcome& o) {
  return PriceOfPlan(*a.cluster, o.plan.devices(), o.evaluation.step_time_s,
                     static_cast<double>(a.query.global_batch_tokens), o.evaluation.region_traffic,
                     a.query.interruptions);
}

std::string Describe(const PlanAnswer& a, const NodeGroups& groups, const std::vector<int>& nodes) {
  std::string out;
  for (size_t i = 0; i < nodes.size(); ++i) {
    if (nodes[i] == 0) continue;
    const NodeSpec& node = a.cluster->nodes[static_cast<size_t>(groups.nodes[i].front())];
    out += fmt::format("{}{} x {} ({} {})", out.empty() ? "" : ", ", nodes[i], groups.names[i],
                       nodes[i] * node.num_devices, node.device_type);
  }
  return out;
}

std::string MoneyLine(const RentedPlan& p) {
  return fmt::format("{:.0f} tokens/s at {}/h ({} a million tokens)", p.money.tokens_per_s,
                     FormatUsd(p.money.usd_per_hour), FormatUsd(p.money.usd_per_million_tokens));
}

// Why the chosen plan: the fastest and the cheapest a million tokens on the front, beside it.
std::string Why(const std::vector<RentedPlan>& front, int chosen, const std::string& objective) {
  const RentedPlan& c = front[static_cast<size_t>(chosen)];
  size_t fastest = 0, cheapest = 0;
  for (size_t i = 0; i < front.size(); ++i) {
    if (front[i].money.tokens_per_s > front[fastest].money.tokens_per_s) fastest = i;
    if (front[i].money.usd_per_million_tokens < front[cheapest].money.usd_per_million_tokens) cheapest = i;
  }
  std::string why = fmt::format("{} ({}): {}", c.description, objective, MoneyLine(c));
  if (static_cast<int>(fastest) != chosen)
    why += fmt::format("; the fastest, {}, would give {}", front[fastest].description,
                       MoneyLine(front[fastest]));
  if (static_cast<int>(cheapest) != chosen && cheapest != fastest)
    why += fmt::format("; the cheapest a token, {}, {}", front[cheapest].description,
                       MoneyLine(front[cheapest]));
  return why + fmt::format(" ({} allocations on the front of price and speed)", front.size());
}

// Each group's region, as an index into the cluster's regions.
std::vector<int> RegionOfEachGroup(const Cluster& cluster, const NodeGroups& groups) {
  std::vector<int> out;
  for (const auto& g : groups.nodes) {
    const std::string& region = cluster.nodes[static_cast<size_t>(g.front())].region;
    out.push_back(static_cast<int>(std::find(cluster.regions.begin(), cluster.regions.end(), region) -
                                   cluster.regions.begin()));
  }
  return out;
}

// Every allocation planned, once each (several asked for may use the same nodes): the fastest.
std::vector<RentedPlan> OncePerAllocation(std::vector<RentedPlan> made) {
  std::vector<RentedPlan> out;
  std::map<std::vector<int>, size_t> by_nodes;
  for (RentedPlan& p : made) {
    auto [it, first] = by_nodes.try_emplace(p.nodes, out.size());
    if (first)
      out.push_back(std::move(p));
    else if (p.money.tokens_per_s > out[it->second].money.tokens_per_s)
      out[it->second] = std::move(p);
  }
  return out;
}

// Allocations planned at once (OfferSearchConfig::batch): the search's answers are the same on
// any machine; a 2-core machine plans two at a time.
constexpr int kAllocationsAtOnce = 4;

// The plans made in an order that does not depend on which thread finished first: by the nodes
// they use, then the fastest (the front's indices follow them).
std::vector<RentedPlan> InPlanningOrder(std::vector<RentedPlan> made, OfferSearchResult* result) {
  std::vector<size_t> order(made.size());
  std::iota(order.begin(), order.end(), 0);
  auto key = [&](size_t i) {
    const RentedPlan& p = made[i];
    return std::make_tuple(p.nodes, -p.money.tokens_per_s, p.money.usd_per_hour, p.outcome.strategy);
  };
  std::stable_sort(order.begin(), order.end(), [&](size_t x, size_t y) { return key(x) < key(y); });
  std::vector<int> position(made.size());
  std::vector<RentedPlan> out;
  for (size_t k = 0; k < order.size(); ++k) {
    position[order[k]] = static_cast<int>(k);
    out.push_back(std::move(made[order[k]]));
  }
  for (AllocationOutcome& f : result->front) f.index = position[static_cast<size_t>(f.index)];
  return out;
}

// The front's plans, every plan made (once an allocation), and the objective's choice from the
// front with why.
void ChooseFromWhatWasPlanned(PlanAnswer* a, const OfferSearchResult& result, std::vector<RentedPlan> made,
                              const ObjectiveSpec& spec) {
  for (const AllocationOutcome& f : result.front) a->front.push_back(made[static_cast<size_t>(f.index)]);
  a->planned = OncePerAllocation(std::move(made));
  const std::optional<AllocationOutcome> best = ChooseFromFront(result.front, spec);
  const std::string objective = a->query.objective.empty() ? "time" : a->query.objective;
  if (!best) {
    a->chosen = {};
    a->chosen.strategy = a->query.strategy;
    a->chosen.status = Status::Infeasible(
        a->front.empty()
            ? "no allocation of what is offered has a plan that fits"
            : fmt::format(
                  "nothing offered meets the {} constraint: the cheapest plan found is {}, the fastest {}",
                  objective, MoneyLine(a->front.front()), MoneyLine(a->front.back())));
    return;
  }
  for (size_t i = 0; i < result.front.size(); ++i)
    if (result.front[i].index == best->index) a->chosen_on_front = static_cast<int>(i);
  const RentedPlan& chosen = a->front[static_cast<size_t>(a->chosen_on_front)];
  a->chosen = chosen.outcome;
  a->money = chosen.money;
  a->rows = {chosen.outcome};
  a->objective_why = Why(a->front, a->chosen_on_front, objective);
}

}  // namespace

NodeGroups GroupsOfOffers(const OfferList& offers) {
  NodeGroups g;
  int node = 0;
  for (const Offer& o : offers.offers) {
    g.names.push_back(o.name);
    g.nodes.emplace_back();
    for (int k = 0; k < o.max_nodes; ++k) g.nodes.back().push_back(node++);
  }
  g.within = [offers](const Allocation& a) { return WithinOffers(offers, a); };
  return g;
}

NodeGroups GroupsOfCluster(const Cluster& cluster) {
  NodeGroups g;
  std::map<std::string, size_t> index;
  int first_device = 0;
  for (size_t n = 0; n < cluster.nodes.size(); ++n) {
    const NodeSpec& node = cluster.nodes[n];
    const std::string key = fmt::format("{}|{}", NodeClass(cluster, static_cast<int>(n), first_device),
                                        node.price ? node.price->usd_per_hour : -1.0);
    first_device += node.num_devices;
    auto [it, inserted] = index.try_emplace(key, g.nodes.size());
    if (inserted) {
      g.nodes.emplace_back();
      g.names.push_back(node.name);
    }
    g.nodes[it->second].push_back(static_cast<int>(n));
  }
  return g;
}

Result<ObjectiveSpec> ObjectiveOfQuery(const PlanQuery& q) {
  ObjectiveSpec spec;
  const std::string name = q.objective.empty() ? "time" : q.objective;
  const std::optional<Objective> objective = ObjectiveFromName(name);
  if (!objective)
    return Status::InvalidArgument(
        fmt::format("objective \"{}\": use one of {}", name, fmt::join(ObjectiveNames(), ", ")));
  spec.objective = *objective;
  const bool budget = q.budget_usd_per_hour > 0 || q.max_usd_per_million_tokens > 0;
  const bool floor = q.min_tokens_per_s > 0 || q.deadline_s > 0;
  if (budget && spec.objective != Objective::kTimeWithinBudget)
    return Status::InvalidArgument(
        "--budget-per-hour and --max-cost-per-token limit --objective time-within-budget; add it");
  if (floor && spec.objective != Objective::kCostWithinDeadline)
    return Status::InvalidArgument(
        "--deadline and --min-tokens-per-s bound --objective cost-within-deadline; add it");
  if (spec.objective == Objective::kTimeWithinBudget) {
    if (!budget)
      return Status::InvalidArgument(
          "--objective time-within-budget needs a budget: --budget-per-hour USD, or --max-cost-per-token "
          "USD");
    if (q.budget_usd_per_hour > 0) spec.max_usd_per_hour = q.budget_usd_per_hour;
    if (q.max_usd_per_million_tokens > 0) spec.max_usd_per_million_tokens = q.max_usd_per_million_tokens;
  }
  if (spec.objective == Objective::kCostWithinDeadline) {
    if (!floor)
      return Status::InvalidArgument(
          "--objective cost-within-deadline needs a pace: --deadline (e.g. 72h) with --tokens, or "
          "--min-tokens-per-s");
    if (q.deadline_s > 0 && !(q.train_tokens > 0))
      return Status::InvalidArgument("--deadline needs the job's tokens: add --tokens (e.g. 2e10)");
    spec.min_tokens_per_s =
        std::max(q.min_tokens_per_s, q.deadline_s > 0 ? q.train_tokens / q.deadline_s : 0.0);
  }
  return spec;
}

void PricePlans(PlanAnswer* a) {
  for (const StrategyOutcome& o : a->rows)
    if (o.status.ok() && !o.plan.groups.empty() && o.evaluation.step_time_s > 0)
      a->row_money[o.strategy] = MoneyOf(*a, o);
  if (a->chosen.status.ok() && !a->chosen.plan.groups.empty()) a->money = MoneyOf(*a, a->chosen);
}

Status ChooseWhatToRent(PlanAnswer* a, const NodeGroups& groups, const ObjectiveSpec& spec) {
  std::vector<int> first_device(a->cluster->nodes.size() + 1, 0);
  for (size_t n = 0; n < a->cluster->nodes.size(); ++n)
    first_device[n + 1] = first_device[n] + a->cluster->nodes[n].num_devices;
  std::vector<int> group_of_node(a->cluster->nodes.size(), -1);
  for (size_t g = 0; g < groups.nodes.size(); ++g)
    for (int n : groups.nodes[g]) group_of_node[static_cast<size_t>(n)] = static_cast<int>(g);
  std::vector<RentedPlan> made;  // every allocation's plan, by AllocationOutcome::index
  std::mutex made_mutex;
  auto devices_of = [&](const Allocation& alloc) {
    std::vector<int> devices;
    for (size_t g = 0; g < alloc.size(); ++g)
      for (int k = 0; k < alloc[g]; ++k) {
        const size_t n = static_cast<size_t>(groups.nodes[g][static_cast<size_t>(k)]);
        for (int d = first_device[n]; d < first_device[n + 1]; ++d) devices.push_back(d);
      }
    std::sort(devices.begin(), devices.end());
    return devices;
  };
  // The estimate: the planner's bound (every device's best compute, perfectly balanced, no
  // communication: device_subsets.h) and the devices' price.
  const std::vector<double> seconds_per_sequence = DeviceSecondsPerSequence(
      *a->cluster, *a->model, *a->costs,
      {a->request.global_batch_sequences, a->request.seq_len, a->request.precision, 256, 2});
  // An allocation planned quickly (exploring: what the search compares allocations by) or in full
  // (what the search ends on or near: OfferSearchConfig::refine).
  auto plan_allocation = [&](const Allocation& alloc, double need_tokens_per_s, bool exploring) {
    PlanRequest r = a->request;
    r.devices = devices_of(alloc);
    r.leave_devices_out = false;
    r.exploring = exploring;
    AllocationOutcome out;
    out.nodes = alloc;
    // Not planned when even its bound cannot reach what it needs to join the front.
    if (need_tokens_per_s > 0) {
      const double least_s = StepLowerBoundS(seconds_per_sequence, r.devices, r.global_batch_sequences);
      r.only_faster_than_s = static_cast<double>(a->query.global_batch_tokens) / need_tokens_per_s;
      if (!(least_s < r.only_faster_than_s)) return out;
    }
    StrategyOutcome best =
        a->query.strategy == "auto"
            ? BestOutcome(PlanEveryStrategy(*a->cluster, *a->model, *a->costs, r, a->evaluate,
                                            EveryStrategy::kOnlyTheBest))
            : PlanWithStrategy(a->query.strategy, *a->cluster, *a->model, *a->costs, r, a->evaluate);
    if (!best.status.ok() || best.plan.groups.empty() || !best.evaluation.fits_memory) return out;
    // What the plan uses: the nodes of each group it has a device on.
    std::vector<int> used(groups.nodes.size(), 0);
    std::vector<bool> node_used(a->cluster->nodes.size(), false);
    for (int d : best.plan.devices())
      node_used[static_cast<size_t>(a->cluster->devices[static_cast<size_t>(d)].node)] = true;
    for (size_t n = 0; n < node_used.size(); ++n)
      if (node_used[n]) ++used[static_cast<size_t>(group_of_node[n])];
    RentedPlan p{used, Describe(*a, groups, used), best, MoneyOf(*a, best)};
    out.nodes = used;
    out.feasible = true;
    out.tokens_per_s = p.money.tokens_per_s;
    out.usd_per_hour = p.money.usd_per_hour;
    std::lock_guard lock(made_mutex);  // (allocations are planned on several threads: config.batch)
    out.index = static_cast<int>(made.size());
    made.push_back(std::move(p));
    return out;
  };
  auto evaluate = [&](const Allocation& alloc, double need_tokens_per_s) {
    return plan_allocation(alloc, need_tokens_per_s, true);
  };
  OfferSearchConfig config;
  config.estimate = [&](const Allocation& alloc, double) {
    const std::vector<int> devices = devices_of(alloc);
    const double step_s = StepLowerBoundS(seconds_per_sequence, devices, a->request.global_batch_sequences);
    AllocationOutcome o;
    o.nodes = alloc;
    o.feasible = std::isfinite(step_s);
    o.tokens_per_s = o.feasible ? static_cast<double>(a->query.global_batch_tokens) / step_s *
                                      Availability(*a->cluster, devices, a->query.interruptions)
                                : 0;
    o.usd_per_hour = DevicesUsdPerHour(*a->cluster, devices);
    return o;
  };
  config.region = RegionOfEachGroup(*a->cluster, groups);
  std::vector<int> max_nodes;
  for (const auto& g : groups.nodes) max_nodes.push_back(static_cast<int>(g.size()));
  config.refine = [&](const Allocation& alloc, double need_tokens_per_s) {
    return plan_allocation(alloc, need_tokens_per_s, false);
  };
  config.max_evaluations = a->query.offer_evaluations;
  config.batch = kAllocationsAtOnce;
  config.within = groups.within;
  if (a->query.offer_evaluations == 0) {
    double all = 1;
    for (int m : max_nodes) all *= m + 1;
    if (all > 1e5)
      return Status::InvalidArgument(fmt::format(
          "--offer-evaluations 0 plans every allocation, and these offers have {:.3g}: give a number (the "
          "default is 150)",
          all - 1));
  }
  // Every allocation (--offer-evaluations 0) is planned in full.
  OfferSearchResult result =
      a->query.offer_evaluations == 0
          ? SearchAllOffers(
                max_nodes,
                [&](const Allocation& alloc, double need) { return plan_allocation(alloc, need, false); },
                groups.within)
          : SearchOffers(max_nodes, evaluate, config);
  a->allocations_planned = result.evaluated;
  a->allocations_refined = result.refined;
  made = InPlanningOrder(std::move(made), &result);
  ChooseFromWhatWasPlanned(a, result, std::move(made), spec);
  return Status::Ok();
}

Result<RentedFiles> PlanOnWhatIsRented(const std::string& offers_name_or_path, const Cluster& offered,
                                       const Plan& plan) {
  MOTLEY_ASSIGN_OR_RETURN(const OfferList offers, LoadOffers(offers_name_or_path));
  const NodeGroups groups = GroupsOfOffers(offers);
  std::vector<bool> used(offered.nodes.size(), false);
  for (int d : plan.devices()) used[static_cast<size_t>(offered.devices[static_cast<size_t>(d)].node)] = true;
  // The used nodes in order (each offer's, offer by offer) and where each one's devices begin.
  Allocation taken(groups.nodes.size(), 0);
  std::vector<int> first_device(offered.nodes.size(), -1);
  int next_device = 0;
  for (size_t g = 0; g < groups.nodes.size(); ++g)
    for (int n : groups.nodes[g])
      if (used[static_cast<size_t>(n)]) {
        ++taken[g];
        first_device[static_cast<size_t>(n)] = next_device;
        next_device += offered.nodes[static_cast<size_t>(n)].num_devices;
      }
  auto renumber = [&](int d) {
    const Device& device = offered.devices[static_cast<size_t>(d)];
    return first_device[static_cast<size_t>(device.node)] + device.local_index;
  };
  RentedFiles out{plan, {}};
  for (GroupPlan& g : out.plan.groups) {
    for (DevicePlan& d : g.devices) d.device = renumber(d.device);
    for (int& d : g.routing) d = renumber(d);
  }
  MOTLEY_ASSIGN_OR_RETURN(out.cluster_toml, ClusterTomlOfAllocation(offers_name_or_path, taken));
  return out;
}

}  // namespace motley
