#include "plan/zorse_planner.h"

#include <algorithm>

#include <fmt/format.h>

#include "plan/zorse_search.h"

namespace motley {

// The search in its phases (zorse_search.h): groupings of the nodes, every grouping's candidates by
// the latency and memory models, a climb to better groupings on many nodes, then the evaluator's
// judgement of the best few of each kind and of the best one's neighbours.
Result<ZorsePlan> PlanZorse(const Cluster& cluster, const ModelSpec& model, const PlannerCosts& costs,
                            const ZorseRequest& request, const PlanEvaluator& evaluate) {
  if (request.global_batch_sequences < 1) return Status::InvalidArgument("zorse planner: empty global batch");
  if (request.global_batch_sequences / request.max_microbatch > kMaxMicrobatchesPerDevice)
    return Status::InvalidArgument(
        fmt::format("zorse planner: a global batch of {} sequences needs at least {} microbatches (of up to "
                    "{} sequences), more than motley runs in one step ({}); use a smaller global batch",
                    request.global_batch_sequences,
                    (request.global_batch_sequences + request.max_microbatch - 1) / request.max_microbatch,
                    request.max_microbatch, kMaxMicrobatchesPerDevice));
  ZorseGroupings groupings = CutGroupings(cluster, model, request);
  std::vector<ZorseCandidate> all = CandidatesOfGroupings(cluster, model, costs, request, groupings);
  ClimbGroupings(cluster, model, costs, request, groupings, all);
  if (all.empty())
    return Status::Infeasible(fmt::format(
        "zorse planner: no grouping, microbatch size and ministage count fits {} on this cluster's memory",
        model.name));
  std::sort(all.begin(), all.end(),
            [](const ZorseCandidate& a, const ZorseCandidate& b) { return a.model_step_s < b.model_step_s; });
  return JudgeCandidates(all, groupings.split, request, evaluate);
}

}  // namespace motley
