// FlexTpCosts: what FlexTP's balancer (flextp_balancer.h) knows of a tensor-parallel team's work —
// its units and heads, the shares of a rank's compute in its MLP and attention, what moving a unit
// or a head costs — from the model's shape and the team's links (FlexTpCostsFor), refined by
// FlexTP's pre-test (WithPretest: Algorithm 2, line 1) and by the team's configuration.
#pragma once

#include <cstdint>
#include <utility>
#include <vector>

#include "core/cluster.h"
#include "core/job.h"
#include "core/model.h"

namespace motley {

struct FlexTpCosts {
  int64_t units = 0;                 // MLP units per rank (ffn / tp)
  int64_t heads = 0;                 // query heads per rank (num_heads / tp)
  int64_t heads_per_group = 1;       // query heads a key/value head serves (1: multi-head attention)
  double mlp_fraction = 0.6;         // the share of a rank's compute in its MLP units
  double attention_fraction = 0.25;  // ... and in its attention heads
  double kv_fraction = 0;            // the part of the attention's work in the key/value projections: a
                                     // group's, computed once by each rank that computes any of its heads
  double scores_fraction = 0;     // the part of the attention's work in its heads' scores and their weighted
                                  // sum (what a head's owner keeps when it lends the head's projections)
  double attention_prunable = 0;  // the part of the attention's work ZERO-resizing prunes (its projections;
                                  // the scores are not): 0, only the MLP is pruned
  double migrate_s_per_unit = 0;  // a migrated MLP unit's communication per step, on sender and receiver
  double migrate_s_per_head = 0;  // ... a query head's (its q rows, o columns, and its group's k and v rows)
  // Broadcast-reduce migration: every rank of the team takes part in each straggler's broadcast
  // (and the reduce of its gradients), so each pays for every migrated unit; point to point, a
  // rank pays for the units it gives and those it receives.
  bool broadcast_reduce = false;
  // Point to point, a straggler's lent query heads get their key and value from it: it computes
  // them once for the groups it lends (beside those of the heads it keeps) and sends them to each
  // receiver every forward, so no receiver computes them again (FlexTpTeam). Broadcast-reduce:
  // each receiver computes the key and value of the groups its run touches.
  bool kv_from_owner = false;
  // A migration's fixed cost a step (the transfers' latency: a block each layer pass), paid by a
  // rank for each straggler whose block it sends or receives, beside migrate_s_per_unit.
  double migrate_s_fixed = 0;
  // ZERO-resizing's own cost (FlexTP Eq. 2: allocating the reduced submatrices, extracting the kept
  // dimensions and imputing the pruned ones' gradients) at pruning ratio p > 0, as a fraction of the
  // pruning rank's MLP time: resize_fixed + resize_per_ratio x p. FlexTP's pre-test measures both
  // (FlexTpTeam); without one, 0 (pruning p of the units saves p of their time).
  double resize_fixed = 0, resize_per_ratio = 0;
  // A unit computed for another rank against one of the rank's own (ProfileEntry::borrowed_cost
  // where the profile measured it): where the balancer's load model starts; the steps refine it.
  double borrowed_cost = 1;
  int64_t layer_passes =
      0;  // the layer transfers a moved unit makes a step: its weights out, its gradients back
  int64_t exchanges = 0;  // the migration's transfers a rank waits for a step: each layer's weights, each
                          // backward's return of its layers' gradients (0: layer_passes)
};

/// FlexTP's pre-test (Algorithm 2, line 1), as sampling points; WithPretest turns them into costs.
struct SemiPretest {
  std::vector<std::pair<double, double>>
      resize;  // (pruning ratio, the MLP's extra time over (1 - ratio) of it, a fraction)
  std::vector<std::pair<double, double>>
      migrate;  // (units moved, seconds one layer pass's transfer of them took)
  double borrowed_cost =
      0;  // a borrowed unit's compute against an own one's (the team's median; 0: not measured)
};

/// A line through sampling points by least squares, its intercept and slope kept at least 0 (the
/// paper: "we extract several sampling points ... to simulate the curve trend").
struct LineFit {
  double fixed = 0, slope = 0;
};
LineFit FitLine(const std::vector<std::pair<double, double>>& samples);

/// `costs` with the pre-test's measurements: the resize overhead's line, a borrowed unit's cost, and
/// the migration's fixed and per-unit seconds a step (one transfer's latency times `exchanges`, its per-unit
/// time times `layer_passes`; where none are known, 1). Costs without samples stay as they were.
FlexTpCosts WithPretest(FlexTpCosts costs, const SemiPretest& pretest);

/// The balancer's cost model for a team of `tp` ranks on cluster devices `a` and `b` (two of its
/// members): the MLP's share of a layer's FLOPs at `seq_len`, and a moved unit's traffic per step
/// over the link between them, as FlexTpTeam moves it — its weights once a step for each of the
/// `layers` a rank runs, its gradients (summed over the microbatches) once a step home, all the
/// layers of a backward in one exchange: `gradient_returns` exchanges a step.
FlexTpCosts FlexTpCostsFor(const ModelSpec& spec, int tp, int64_t seq_len, const Cluster& cluster, int a,
                           int b, int64_t layers, int64_t gradient_returns);

/// Whether a team migrates by broadcast-reduce: `migration` = "broadcast-reduce", or "auto" on GPUs.
/// On CPU ranks (Gloo) "auto" sends point to point: over loopback Gloo's broadcast and reduce moved a
/// straggler's block no faster than its runs sent one by one — in three runs of
/// bench/flextp_stragglers (session 22) half the ranks 4x slow stepped 2.11x / 1.86x / 1.91x the
/// no-straggler step by broadcast-reduce against 1.74x / 1.69x / 1.77x point to point (one rank 4x:
/// 1.56x / 1.44x / 1.59x against 1.36x / 1.38x / 1.86x) — where NCCL's pipelined trees and rings
/// are what the paper's choice counts on.
bool UsesBroadcastReduce(const TensorParallelConfig& config, bool gpu);

/// `costs` as a team with `config` runs: its migration's form (UsesBroadcastReduce) and whether the
/// attention is pruned too (resize_attention).
FlexTpCosts ForTeamConfig(FlexTpCosts costs, const TensorParallelConfig& config, bool gpu);

}  // namespace motley
