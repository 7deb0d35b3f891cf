// What the Zorse planner (zorse_planner.h) is asked, and what it answers: its request, a candidate
// it scored and the plan it chose.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "plan/plan.h"
#include "plan/plan_evaluation.h"

namespace motley {

struct ZorseRequest {
  int64_t global_batch_sequences = 0;
  int64_t seq_len = 1024;
  Precision precision = Precision::kBf16;
  bool activation_checkpointing = true;
  bool offload = true;  // parameter and activation offload (Zorse's default)
  // The job clips gradients to a global norm: every update waits for it (lower.h), so with offload
  // each ministage's shard, moments and gradient shard stay on the device until the step's end.
  bool gradient_clipping = true;
  int max_groups = 0;  // 0 = up to one group per node
  // ZorseCandidatesForGroups: the pipeline's stages in the groups' order as given, not by
  // bandwidth and speed (live rebalancing: every rank keeps its device and place).
  bool keep_group_order = false;
  int max_microbatch = 64;  // largest microbatch size tried
  // The best this many by the latency model are re-ranked by the evaluator (0: the latency model
  // decides alone). The latency model misranks: on the Zorse clusters the simulator's best plan was
  // 7th-20th by it, up to 43% faster than the best of the first 6 (bench/reports/zorse_evaluation.md).
  int candidates_to_evaluate = 20;
  // ... judged in rounds: this many of each kind first (tensor-parallel width; nodes whole, split
  // or climbed), then this many more at a time of the kinds whose best simulated step is within
  // `kind_slack` of the best of all, until a kind has had its share.
  int first_judged_per_kind = 4;
  int more_judged_per_kind = 4;
  double kind_slack = 0.10;
  // On this many nodes or fewer every grouping of the nodes is tried (Bell(6) = 203 of them), not
  // only SPLIT's cuts.
  int exhaustive_groupings_up_to_nodes = 6;
  // On more nodes, the latency model climbs this many steps from the two groupings it likes best
  // (one node moved to another group or a new one per step; 0: SPLIT's cuts only).
  int grouping_climb_rounds = 6;
  // After the re-ranking, the best plan's neighbours (twice or half as many ministages, one more
  // or fewer; the next microbatch sizes; the same in the groupings the latency model likes best)
  // are judged by the evaluator too, and the search moves to a better one, this many times at
  // most (0: no climbing).
  int climb_rounds = 4;
  // Candidates are simulated only until they step slower than this (a plan another strategy has).
  EvaluateBound bound;
  // Variations for the baselines that share this search (baselines.h):
  int max_ministages = 0;  // 0 = up to the smallest group's layers; 1 = plain stages
  PipelineSchedule schedule = PipelineSchedule::kInterleaved;  // 1F1B needs max_ministages = 1
  bool try_tensor_parallel = false;      // also try runs of 2, 4, ... NVLink/NVSwitch-connected devices as TP
  int max_tensor_parallel = 8;           // ... up to this width, each group the widest its nodes allow
  bool uniform_tensor_parallel = false;  // ... or one width in every group (a symmetric mesh)
  // Besides groupings of whole nodes, split every node into 2, 4, ... equal stages, up to this many
  // (SPLIT's cuts of the parts): more, smaller pipeline stages, as systems without offload use to
  // fit a model (1: whole nodes only).
  int split_nodes_up_to = 1;
  bool even_microbatches = false;  // every data-parallel replica of a group gets the same count
  std::vector<int> devices;        // the devices it may use (whole nodes, ascending); empty = all
};

struct ZorseCandidate {
  Plan plan;
  double model_step_s = 0;      // the latency model's estimate
  double model_peak_bytes = 0;  // the memory model's worst device
  std::string why;              // the cut, the layer split, the microbatch size and ministage count
  // Where it sits in the search: its grouping (PlanZorse's numbering), tensor-parallel degree,
  // microbatch size and ministages per group.
  int grouping = 0;
  int tp_degree = 1;
  int64_t microbatch = 1;
  int ministages = 1;
};

struct ZorsePlan {
  Plan plan;
  double predicted_step_s = 0;  // by the evaluator
  std::string explain;
  std::vector<ZorseCandidate> considered;  // the candidates re-ranked, best first
};

}  // namespace motley
