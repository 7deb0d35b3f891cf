// Every planning strategy motley offers (strategy.h), on the same cost models: motley's own
// (zorse, poplar) and the baselines of the Zorse and Poplar evaluations, each as a Plan.
//
//  * deepspeed-even: ZeRO with the same batch on every device (the lowest stage that fits).
//  * cephalo: ZeRO-3 over all devices, each device's batch by its speed (gradient accumulation)
//    and its share of the state by the memory its batch leaves (cephalo_planner.h).
//  * fastest-only: Poplar on the homogeneous subset of the fastest GPU type.
//  * hexiscale: asymmetric pipeline + ZeRO-2 (+ tensor parallelism of width 2-8 inside NVLink or
//    NVSwitch nodes), stages of whole nodes or of nodes split into 2, 4 or 8, 1F1B, no offload, no
//    ministages.
//  * torchtitan-het: a symmetric mesh — pipeline stages of equal size x data parallel (ZeRO-2) x
//    tensor parallel (width 2-8 inside NVLink or NVSwitch nodes) — with layers split by stage
//    speed, 1F1B; best over every valid mesh.
//  * auto: the best plan of all of the above.
#pragma once

#include <cstdint>
#include <limits>
#include <string>
#include <vector>

#include "core/job.h"
#include "plan/zorse_planner.h"

namespace motley {

struct PlanRequest {
  int64_t global_batch_sequences = 0;
  int64_t seq_len = 1024;
  Precision precision = Precision::kBf16;
  bool activation_checkpointing = true;
  bool gradient_clipping =
      true;  // the job clips to a global norm: every plan is judged with it (Plan::gradient_clipping)
  // The devices a plan may use (ascending ids; empty = every device). When empty and
  // `leave_devices_out`, motley's own strategies (zorse, poplar) also plan on subsets of the
  // cluster (device_subsets.h) and keep the fastest plan; the baselines always use every device.
  std::vector<int> devices;
  bool leave_devices_out = true;
  // A step another plan already achieves: device subsets (the whole cluster included) that cannot
  // beat it are not planned. "auto" passes its best so far; a strategy's own best may then go
  // unfound, so --compare passes nothing.
  double only_faster_than_s = std::numeric_limits<double>::infinity();
  // A quick plan, to compare allocations by (the offers' search, whose front is then planned in
  // full): auto leaves out hexiscale (a pipeline search as costly as Zorse's) and torchtitan-het
  // (its tensor-parallel pipelines cost a fifth of the exploration of aws-three-regions for
  // Llama-7B and won none of its 128 allocations, nor of the 8 planned in full), and Zorse's search
  // judges two of its candidates by the evaluator, not twenty (Pipelines in baselines.cc).
  bool exploring = false;
};

/// What a job asks the planner for: its batch, sequence length, precision, checkpointing and
/// clipping ([training], [optimizer] grad_clip_norm).
PlanRequest PlanRequestForJob(const JobSpec& job);

/// The pipeline search's request for what `request` asks (batch, sequence length, precision,
/// checkpointing, clipping); the rest at ZorseRequest's defaults.
ZorseRequest ZorseRequestFor(const PlanRequest& request);

struct StrategyOutcome {
  std::string strategy;
  Status status;  // why it has no plan, when it has none
  Plan plan;
  PlanEvaluation evaluation;
  std::string explain;
  // Where the strategy's time went: all of it, and the part spent in the evaluator (the rest is
  // its own search).
  double plan_s = 0;
  double evaluate_s = 0;
  int evaluations = 0;      // calls to the evaluator (some answered from its memory)
  int subsets_planned = 0;  // device subsets planned on (the whole cluster included)
  int subsets_skipped = 0;  // ... and skipped: their lower bound was no faster than a plan found
};

/// One strategy by name ("auto" included). The outcome's status says when it found nothing.
StrategyOutcome PlanWithStrategy(const std::string& strategy, const Cluster& cluster, const ModelSpec& model,
                                 const PlannerCosts& costs, const PlanRequest& request,
                                 const PlanEvaluator& evaluate);

/// Every strategy but "auto" (exploring: nor hexiscale and torchtitan-het), in the order of StrategyNames().
/// kEachItsBest: each strategy's best plan (--compare). kOnlyTheBest: what "auto" needs, the best plan of
/// all: a strategy skips the device subsets that cannot beat the best plan found so far (its row may then be
/// slower than its own best, or say it was not planned).
enum class EveryStrategy { kEachItsBest, kOnlyTheBest };
std::vector<StrategyOutcome> PlanEveryStrategy(const Cluster& cluster, const ModelSpec& model,
                                               const PlannerCosts& costs, const PlanRequest& request,
                                               const PlanEvaluator& evaluate,
                                               EveryStrategy mode = EveryStrategy::kEachItsBest);

/// What "auto" answers from every strategy's outcome: the fastest plan that fits; when none fits,
/// why (one reason when they all agree, else each strategy's).
StrategyOutcome BestOutcome(const std::vector<StrategyOutcome>& all);

}  // namespace motley
