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

#include "api/plan_answer.h"
#include "core/cluster.h"
#include "core/status.h"

namespace motley {

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
