// Choosing what to rent from offers (core/offers.h) together with the plan: how many nodes of each
// offer, judged by the plan the planner makes on them (its tokens a second) and what they cost (its
// dollars an hour: cost/money.h).
//
// The search finds the Pareto front of allocations — none of them both dearer and slower than
// another one found — without regard to the objective, and the objective then chooses from the
// front (ChooseFromFront). So a larger budget never gives a slower plan and a later deadline never a
// dearer one: the front is the same, the set a constraint admits only grows.
//
// The front is found by local search from seeds: each offer alone at 1, 2, 4, ... of its nodes and
// at all of them; every offer at all its nodes, and all but one; and the same within each region.
// Each allocation on the front (or near it) is then varied by one node more or less of an offer,
// twice or half an offer's nodes, and one node of an offer traded for one of another; whatever joins
// the front is varied in turn, until nothing new joins it or the evaluations run out. With an
// estimate (OfferSearchConfig::estimate) the search runs on it first, and the planner plans only
// what the estimate puts near its front and what the search finds from there. With a refinement
// (OfferSearchConfig::refine) the search explores with a quicker planning and plans in full only
// what ends on or near its front: the front is then the full plannings' (and the quick answers'
// of the allocations not refined, which the front's refined members usually beat).
#pragma once

#include <functional>
#include <limits>
#include <optional>
#include <string>
#include <vector>

#include "core/offers.h"

namespace motley {

/// What the planner makes of an allocation.
struct AllocationOutcome {
  Allocation nodes;       // what the plan uses (the planner may leave some of what it was given idle)
  bool feasible = false;  // a plan fits
  double tokens_per_s = 0;
  double usd_per_hour = 0;  // the devices the plan uses and its egress
  int index = -1;           // the evaluator's own handle on what it made (its plan), or -1
};
/// Plans an allocation. `need_tokens_per_s`: what it must reach to be near the front (OfferSearchConfig::
/// near_front) — the fastest found at its price or less; an evaluator may give up on it (infeasible)
/// once it knows the allocation is slower. 0: no need.
using AllocationEvaluator = std::function<AllocationOutcome(const Allocation&, double need_tokens_per_s)>;

struct OfferSearchConfig {
  int max_evaluations = 500;  // allocations planned, at most
  std::vector<int> region;    // each offer's region (an index), or empty: one region
  // Allocations within this factor of the front (no member both this much cheaper and this much
  // faster) are varied too: the way between two good allocations often passes a slightly worse one.
  double near_front = 1.05;
  // A quick estimate of an allocation's speed and price — an upper bound of its speed and a lower
  // bound of its price (the planner's bound and the devices' price: api/offer_plan.cc) — searched
  // first, at most max_estimates times; the planner then plans what it puts within near_estimate of
  // its front (at most half its evaluations), and the search goes on from there. Its price also
  // sets what an allocation must reach (AllocationEvaluator's need).
  AllocationEvaluator estimate;
  int max_estimates = 20000;
  double near_estimate = 1.15;
  // An allocation cut to what can be taken together, where offers share nodes (an offers file's
  // row offered on demand and as spot: core/offers.h WithinOffers); empty: every allocation within
  // max_nodes can.
  std::function<Allocation(const Allocation&)> within;
  // The planning in full, when `evaluate` is a quicker one (fewer candidates judged, fewer
  // strategies): once the search is done, its front and then what a plan near_refine times faster
  // would bring onto it (a price is no estimate: only the speed is given the margin) are planned
  // again by it, at most max_refinements of them (each spread over its prices), each asked for a
  // plan faster than its quick one (AllocationEvaluator's need), and their answers replace the
  // quick ones unless there is none or a quick one dominates. Empty: `evaluate` is the planning in
  // full.
  AllocationEvaluator refine;
  double near_refine = 1.05;  // at least the quick planning's error
  int max_refinements = 8;
  // Allocations planned at once, on as many threads (up to the machine's cores): the planner's
  // search in batches of up to this many — each one's need set by what was found before its batch,
  // so the answers do not depend on the machine — and the refinements all at once. REQUIRES, when
  // above 1: `evaluate` and `refine` may be called from several threads at once.
  int batch = 1;
};

struct OfferSearchResult {
  std::vector<AllocationOutcome> front;  // by ascending price (and so ascending speed)
  int evaluated = 0;                     // allocations planned
  int refined = 0;                       // ... and planned again in full (OfferSearchConfig::refine)
};

/// `max_nodes[i]`: offer i's nodes. Deterministic.
OfferSearchResult SearchOffers(const std::vector<int>& max_nodes, const AllocationEvaluator& evaluate,
                               const OfferSearchConfig& config = {});

/// Every allocation (brute force): for tests of the search and small offer lists.
OfferSearchResult SearchAllOffers(const std::vector<int>& max_nodes, const AllocationEvaluator& evaluate,
                                  const std::function<Allocation(const Allocation&)>& within = {});

/// What to optimise, and within what.
enum class Objective { kTime, kCost, kTimeWithinBudget, kCostWithinDeadline };
std::optional<Objective> ObjectiveFromName(const std::string& name);
std::vector<std::string> ObjectiveNames();  // "time", "cost", "time-within-budget", "cost-within-deadline"

struct ObjectiveSpec {
  Objective objective = Objective::kTime;
  double max_usd_per_hour = std::numeric_limits<double>::infinity();            // time-within-budget
  double max_usd_per_million_tokens = std::numeric_limits<double>::infinity();  // time-within-budget
  double min_tokens_per_s = 0;  // cost-within-deadline (a deadline: the job's tokens over it)
};

/// Whether an outcome meets the spec's constraints, and its score (lower is better: seconds a
/// million tokens for time, dollars a million tokens for cost).
bool MeetsConstraints(const ObjectiveSpec& spec, const AllocationOutcome& o);
double ObjectiveScore(const ObjectiveSpec& spec, const AllocationOutcome& o);

/// The front's best by the objective among those meeting its constraints; nullopt when none does.
std::optional<AllocationOutcome> ChooseFromFront(const std::vector<AllocationOutcome>& front,
                                                 const ObjectiveSpec& spec);

}  // namespace motley
