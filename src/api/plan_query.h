// What `motley plan` computes, apart from how it prints: a query (the command's flags), its answer
// (every strategy's outcome, the chosen plan, FlexTP's choices, where the time went) and the answer
// as JSON — the `--json` output, which the Python module (python/) returns as a dict.
#pragma once

#include <cstdint>
#include <map>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "core/cluster.h"
#include "core/model.h"
#include "core/status.h"
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

  const FlexTpChoice* FlexTpOf(const StrategyOutcome& o) const;
};

/// The largest sequence and global batch a plan is made for (the command line's flags and the
/// Python module's plan() alike).
inline constexpr int64_t kMaxPlanSeqLen = int64_t{1} << 24;
inline constexpr int64_t kMaxPlanBatchTokens = int64_t{1} << 40;

/// Errors (bad files, sizes or flags) name the input and the fix. A query no plan satisfies is an
/// answer whose chosen outcome says why (status not ok).
Result<PlanAnswer> AnswerPlanQuery(const PlanQuery& query);

/// The answer as `motley plan --json` prints it; `timing`: where the planning time went (--explain).
nlohmann::json PlanAnswerJson(const PlanAnswer& answer, bool timing);

/// The devices of the cluster a plan leaves out, ascending.
std::vector<int> LeftOut(const Plan& plan, const Cluster& cluster);

/// The plan's tensor-parallel degrees: "-" (none), "4" (every group) or "4/4/1" (per group).
std::string TensorParallelColumn(const Plan& plan);

}  // namespace motley
