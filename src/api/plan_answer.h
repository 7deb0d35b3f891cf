// What `motley plan` is asked and what it answers, as data: the query (the command's flags) and the
// answer (every strategy's outcome, the chosen plan, its price, FlexTP's choices, where the time
// went). plan_query.h computes it; offer_plan.h fills its money.
#pragma once

#include <cstdint>
#include <map>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "core/cluster.h"
#include "core/model.h"
#include "cost/money.h"
#include "plan/baselines.h"
#include "sim/cost_model.h"
#include "sim/flextp_choice.h"
#include "sim/plan_evaluator.h"
#include "sim/profile.h"

namespace motley {

struct PlanQuery {
  std::string cluster, model;  // built-in names or files
  int64_t seq_len = 0;
  int64_t global_batch_tokens = 0;  // a multiple of seq_len
  std::string strategy = "auto";
  std::string precision = "bf16";
  std::string profile;  // a motley profile or Zorse's model_latencies.json ("" = roofline)
  bool gradient_clipping = true;
  bool compare = false;              // every strategy's best, not only what auto needs
  std::string flextp_mode = "auto";  // FlexTP in tensor-parallel plans (sim/flextp_choice.h)
  std::string straggler;             // "DEVICE=FACTOR" to judge every plan with ("" = none)
  // Money (api/offer_plan.h). `offers`: an offers file (or built-in name) to choose what to rent
  // from, in place of `cluster`. `objective` is chosen by over the offers, or over a priced cluster's
  // classes of nodes; "" = none: a priced cluster's plans are only priced, an offers file's judged by
  // time.
  std::string offers;
  std::string objective;
  double budget_usd_per_hour = 0;         // time-within-budget: at most this an hour (0 = no limit)
  double max_usd_per_million_tokens = 0;  // time-within-budget: at most this a million tokens
  double deadline_s = 0;                  // cost-within-deadline: train_tokens within this
  double min_tokens_per_s = 0;            // cost-within-deadline: at least this fast
  double train_tokens = 0;                // the job's tokens: its total time and cost (0 = not given)
  // Allocations the search over what to rent plans at most (plan/offer_search.h); 0: every one
  // (for small offer lists: exact).
  int offer_evaluations = 150;
  // What an interruption of a spot device costs (cost/money.h): spot devices' plans are judged by
  // their expected speed.
  InterruptionCost interruptions;
};

/// A plan on what can be rented: the allocation, what the planner made of it, and its price.
struct RentedPlan {
  std::vector<int> nodes;   // nodes of each offer (or class of the cluster's nodes) the plan uses
  std::string description;  // "2 x h100@us-east-1 (16 h100-sxm)"
  StrategyOutcome outcome;  // the plan (on the answer's cluster's device ids)
  PlanMoney money;
};

struct PlanAnswer {
  PlanQuery query;
  // Owned here, where the cost model and the evaluator find them.
  std::unique_ptr<Cluster> cluster;
  std::unique_ptr<ModelSpec> model;
  std::unique_ptr<Profile> profile;  // null: roofline
  std::unique_ptr<CostModel> costs;
  std::unique_ptr<EvaluationStats> stats;
  PlanEvaluator evaluate;
  PlanRequest request;
  std::string precision_reason;       // --precision auto: the precision chosen, and why
  std::vector<StrategyOutcome> rows;  // one per strategy asked (all with compare or auto)
  StrategyOutcome chosen;             // its plan names the model and cluster as the query did, with routing
  std::map<std::string, FlexTpChoice>
      flextp;  // by strategy: plans with tensor-parallel teams, or all with a straggler
  double planning_s = 0;
  // Money: the chosen plan's price (a priced cluster or offers) and each row's, by strategy.
  std::optional<PlanMoney> money;
  std::map<std::string, PlanMoney> row_money;
  // A search over what to rent (an objective, or offers): the Pareto front of price and speed it
  // found, by ascending price; the chosen one; why; and how many allocations it planned.
  std::vector<RentedPlan> front;
  std::vector<RentedPlan> planned;  // every allocation it planned that has a plan (the front's among them)
  int chosen_on_front = -1;
  std::string objective_why;
  int allocations_planned = 0;  // by the quick planning the search explores with
  int allocations_refined = 0;  // ... of them planned again in full: those on or near its front

  const FlexTpChoice* FlexTpOf(const StrategyOutcome& o) const;
};

}  // namespace motley
