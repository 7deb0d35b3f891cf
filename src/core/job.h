// JobSpec: one training job as read from a job file. Each component owns a small config struct
// with its defaults here; the job file is parsed and validated once (job_parse.cc) and each
// component is handed only its own struct.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "core/cluster.h"
#include "core/model.h"

namespace motley {

/// How many tokens, in what shape and precision, for how long. Owned by the trainer.
struct TrainingConfig {
  int64_t steps = 1000;
  int64_t seq_len = 1024;
  /// The global batch, in sequences per step; the file gives tokens or sequences.
  int64_t global_batch_sequences = 0;
  /// bf16 on GPUs that have it; fp32 on CPU. fp16 adds dynamic loss scaling (one process only).
  /// fp64 trains every value in fp64: to check that a plan trains the same model as one device
  /// (to ~1e-10), or to debug one (README, "Precisions").
  Precision precision = Precision::kBf16;
  /// precision = "auto": what the cluster chose and why (Cluster::TrainingPrecision); "" when given.
  std::string precision_reason;
  /// Recompute each layer's activations in backward from the saved layer boundary: less memory
  /// for about a third more compute. Zorse and our planners assume it on.
  bool activation_checkpointing = true;
  /// Dynamic loss scaling: on by default with fp16 (which needs it), off otherwise; `loss_scaling =
  /// true` turns it on in any precision (tests check the mechanism in fp64, where it is exact).
  bool loss_scaling = false;
  uint64_t seed = 1234;  // model init and data order

  int64_t global_batch_tokens() const { return global_batch_sequences * seq_len; }
};

/// Where tokens come from. Owned by the data loader.
struct DataConfig {
  std::string train = "builtin";   // a .bin shard or directory of shards, or "builtin" (our corpus)
  std::string validation;          // "" = the held-out split of `train`
  std::string tokenizer = "byte";  // "byte", a sentencepiece .model, or a tokenizer.json (or its folder)
  int64_t validation_interval_steps = 100;  // 0 = only at the end
  int64_t validation_sequences = 64;        // per validation pass
};

/// AdamW with decoupled weight decay. Owned by the optimizer.
struct OptimizerConfig {
  double lr = 3e-4;  // peak learning rate, reached after warm-up
  double beta1 = 0.9;
  double beta2 = 0.95;  // 0.95 rather than 0.999: steadier for LLMs at large batch
  double eps = 1e-8;
  double weight_decay = 0.1;    // applied to matrices only, not norms
  double grad_clip_norm = 1.0;  // global L2 norm; 0 = no clipping
};

/// Linear warm-up then decay. Owned by the optimizer.
struct LrScheduleConfig {
  int64_t warmup_steps = 100;
  std::string decay = "cosine";  // "cosine", "linear" or "constant"
  double min_lr_ratio = 0.1;     // final learning rate as a fraction of the peak
};

/// Owned by the checkpoint writer.
struct CheckpointConfig {
  std::string dir = "checkpoints/run";  // relative to the working directory
  int64_t interval_steps = 0;           // 0 = only at the end
  int64_t keep = 2;                     // newest checkpoints kept on disk
  // A distributed run's form: "sharded" (every rank writes its own state at once; `motley
  // checkpoint export` consolidates) or "consolidated" (gathered onto rank 0, as one process writes).
  std::string format = "sharded";
};

/// Owned by the planner.
struct PlanConfig {
  /// auto | zorse | poplar | torchtitan-het | hexiscale | cephalo | deepspeed-even | fastest-only
  std::string strategy = "auto";
  std::string profile;  // a profile.json; "" = profile the cluster (or reuse the cache)
};

/// [tensor_parallel]: how a tensor-parallel team keeps pace with stragglers (FlexTP;
/// cost/flextp_balancer.h). Only plans with tp_degree > 1 use it.
struct TensorParallelConfig {
  /// "off" (exact, the team waits for its slowest rank), "migrate" (exact: a straggler's MLP units
  /// computed by the others), "resize" (lossy: a straggler prunes MLP units), "semi" (both, by a
  /// cost model; lossy when it prunes).
  std::string mode = "off";
  /// How a straggler's migrated units travel: "broadcast-reduce" (FlexTP §IV-A: the straggler
  /// broadcasts its whole migrated block to the team, each normal rank computes its run of it, and
  /// the runs' weight gradients come back in one sum-reduce), "point-to-point" (each receiver is
  /// sent only its run and returns its gradients itself), or "auto": broadcast-reduce on GPUs,
  /// point to point on CPU ranks (UsesBroadcastReduce says why). Outputs join the block's all-reduce.
  std::string migration = "auto";
  /// What a straggler's lent query head hands its receiver when migrating point to point: "heads"
  /// (the receiver computes the whole head: its q and o projections and its scores, with the key
  /// and value its owner sends) or "projections" (the receiver computes the head's q and o
  /// projections; the owner keeps the scores with its own key and value — the query goes out and the
  /// scores' output comes back each forward, their gradients each backward). Broadcast-reduce lends
  /// heads. On the FlexTP bench's held-out kind of team (a straggler whose matrix multiplications
  /// are slow, its scores not) the two stepped alike: the scores of a 64-256-token head are a small
  /// part of it, and the four transfers' waits ate what they saved (bench/reports/flextp_stragglers.md).
  std::string lend_attention = "heads";
  double straggler_threshold = 0.05;  // slower than the team's reference by more than this: a straggler
  /// What `semi` judges stragglers against: "fastest" (FlexTP §IV-B's strictest criterion, the
  /// team's fastest rank) or "average" (the team's mean, as migrate and resize always do, §III-A).
  /// On ranks whose speed is noisy the strict criterion names ranks within noise of the fastest
  /// stragglers, which then neither take work nor keep theirs (bench/reports/flextp_stragglers.md).
  std::string semi_reference = "average";
  /// How `semi` splits a straggler's gap between migration and resizing: "cost-model" (FlexTP
  /// §IV-B/C: Eq. 2 balances a single straggler's resizing cost against the receivers' migration
  /// cost; Eq. 3 lets the heaviest stragglers migrate while migration is cost-effective and the rest
  /// resize; the costs from the pre-test run before the first step) or "search" (motley's earlier
  /// choice: every split on a grid, the least pruning among the nearly fastest; kept to compare,
  /// bench/reports/flextp_stragglers.md).
  std::string semi_solver = "cost-model";
  double recheck_change = 0.10;  // re-balance when a rank's own speed moved by more than this
  /// The balancer judges each rank by the median of its speeds over the last this many steps: a
  /// hiccup of one step moves no work (nor prunes any, which would cost accuracy for nothing), a
  /// real slowdown is acted on at its second step. 1: the last step alone, as FlexTP decides each
  /// iteration — on the FlexTP bench's 2-core host the two stepped alike (semi, 3 paired rounds:
  /// 1.44x / 1.41x the no-straggler step with one rank 4x, 1.39x / 1.37x with half; the report).
  /// (A run's first step, which pays one-time costs, is never judged: the team balances from its
  /// third step.)
  int64_t decision_window_steps = 3;
  double max_prune_ratio = 0.5;  // at most this fraction of a straggler's MLP units pruned
  double layer_decay =
      0.8;  // how far per-layer ratios follow their weights' variation (FlexTP §III-B; 0: uniform)
  bool resize_attention = true;  // ZERO-resizing prunes the attention's projections too, not only the MLP
  int64_t stats_interval_steps =
      10;  // priority statistics refreshed every this many steps (FlexTP's "epoch")
};

/// [straggler_detection]: naming ranks that slow down during a run, in every kind of plan (the
/// runtime's StragglerMonitor). Each rank is compared with itself — its compute seconds a step
/// against the median of its first measured steps — so devices of different speeds are not
/// stragglers for being different.
struct StragglerDetectionConfig {
  double threshold = 0.3;      // slower than its own early steps by more than this fraction: straggling
  int64_t baseline_steps = 3;  // steps measured for each rank's norm (after the first, a warm-up)
  int64_t persist_steps = 3;   // consecutive steps beyond (or back within) the threshold before it is said
  // Live rebalancing: when a rank begins (or stops) straggling, plan again for the devices as
  // measured — each device's batch, or a pipeline's layer split, every rank on its device — and
  // switch to that plan at the step boundary, the state moved between ranks (no restart, nothing
  // written). Only when the new plan is predicted faster by `rebalance_min_gain`.
  bool rebalance = false;
  double rebalance_min_gain = 0.05;
};

/// [divergence]: what a run does when a step's loss or gradient norm is not finite (NaN or
/// infinite) on any rank. The step is never applied and no checkpoint is written (or pruned)
/// after it; then the run stops naming the step, the ranks and the last good checkpoint, or rolls
/// back to that checkpoint and goes on as large runs' logbooks do by hand: the learning rate
/// lowered and the data windows that led there skipped. (With fp16 loss scaling a non-finite
/// gradient is an overflow: the step is skipped and the scale lowered, as always.)
struct DivergenceConfig {
  std::string action = "stop";  // "stop" | "rollback"
  double lr_factor = 0.5;       // rollback: the learning rate from then on, times this (each rollback again)
  bool skip_data = true;        // rollback: the replayed steps take the windows after the diverged step's
  int64_t max_rollbacks = 3;    // rollback: then the run stops
};

/// The outer optimizer of a run across islands (runtime/islands/outer_optimizer.h): SGD with
/// Nesterov momentum on the islands' average pseudo-gradient, as DiLoCo (Douillard et al. 2023).
struct OuterConfig {
  double lr = 0.7;        // the outer learning rate (DiLoCo's)
  double momentum = 0.9;  // the outer momentum (DiLoCo's); 0: plain SGD
  bool nesterov = true;   // Nesterov's form (DiLoCo's), as torch.optim.SGD(nesterov=True)
  // What crosses the link between islands (runtime/islands/island_exchange.h): "none" (the
  // pseudo-gradients in the master precision), "fp16", "int8" with a scale a tensor, or "int4" (two
  // values a byte) with a scale a block of 128 values.
  std::string compression = "none";
};

/// [islands]: the run trains as `count` islands, each on an equal share of the global batch, that
/// synchronise every `inner_steps` steps through the outer optimizer (docs/design.md, "Islands").
/// So far the islands of a run train in one process, one after another (a job on one device, or
/// `motley train --single-process`).
struct IslandsConfig {
  int64_t count = 1;         // 1: no islands (synchronous training)
  int64_t inner_steps = 50;  // H: each island's steps between two outer steps (island 0's, with _each)
  // inner_steps_per_island: each island's own H_i, island 0's first and largest — island 0 keeps the
  // run's clock (its steps are the run's steps), and a slower island takes fewer steps in each round,
  // spread evenly over it. Empty: every island takes inner_steps.
  std::vector<int64_t> inner_steps_each;
  // overlap_steps: the inner steps an outer round's exchange overlaps (Streaming DiLoCo's overlap;
  // docs/design.md, "Islands"). 0: the islands wait for the round at its end. tau > 0: each island
  // sends its pseudo-gradient at the round's end and trains on; tau steps later the outer step lands
  // and the island keeps what it learnt meanwhile (its parameters move by the anchor's change from
  // where they were when sent). A round at which validation or a checkpoint is due, or the run
  // (or launch) ends, lands at once. Less than inner_steps.
  int64_t overlap_steps = 0;
  // fragments: Streaming DiLoCo's fragments (docs/design.md, "Islands"). 1: every value of the model
  // synchronises at each round's end. F > 1: the model's parts — the embedding, each decoder layer, the
  // final norm and head, numbered 0 to layers + 1 — fall into F fragments by their number mod F, and
  // fragment k synchronises every inner_steps steps, at (k + 1) * inner_steps / F steps into each
  // round: each exchange carries about 1/F of the model, spread over the round. Where the islands must
  // hold one model (validation, a checkpoint, the run's end) every fragment synchronises at once. A
  // divisor of inner_steps; overlap_steps less than inner_steps / F. So far in one process only.
  int64_t fragments = 1;
  OuterConfig outer;

  int64_t InnerSteps(int64_t island) const {
    return inner_steps_each.empty() ? inner_steps : inner_steps_each.at(static_cast<size_t>(island));
  }
  /// The steps `island` has taken when island 0 has taken `clock_steps`: H_i a round of H, the k-th
  /// done at clock k * H / H_i (rounded down to a step).
  int64_t OwnSteps(int64_t island, int64_t clock_steps) const {
    const int64_t h = InnerSteps(island);
    return clock_steps / inner_steps * h + clock_steps % inner_steps * h / inner_steps;
  }
};

/// [[emulation.stragglers]]: a rank made slower at run time, for tests and benchmarks (its compute
/// ops stretched `slowdown` times from step `from_step` through `to_step`, 1-based; 0 = to the end).
struct EmulatedStraggler {
  int rank = 0;
  double slowdown = 1.0;
  // What is slowed: "compute" — every compute op (a slower or throttled device), or "matmul" —
  // only the matrix multiplications (aten::mm and addmm: the linear projections, forward and
  // backward), as FlexTP's evaluation injects its stragglers (flextp.txt §V).
  std::string slows = "compute";
  int64_t from_step = 1;
  int64_t to_step = 0;
};

struct JobSpec {
  std::string file;       // where it came from, for messages
  std::string model_ref;  // as written: a preset or a path (resolved relative to the job file)
  // [model] init_from (or `motley train --init-from`): a Hugging Face model folder — config.json,
  // safetensors (one file or sharded), tokenizer.json — the run starts from: its config.json is the
  // model, its weights the starting point (each rank reads only the tensors its part holds). Resolved;
  // "" = random initialisation from the seed.
  std::string init_from;
  std::string cluster_ref;  // as written: a built-in cluster name or a path
  ModelSpec model;
  Cluster cluster;
  TrainingConfig training;
  DataConfig data;
  OptimizerConfig optimizer;
  LrScheduleConfig lr_schedule;
  CheckpointConfig checkpoint;
  PlanConfig plan;
  TensorParallelConfig tensor_parallel;
  StragglerDetectionConfig straggler_detection;
  DivergenceConfig divergence;
  IslandsConfig islands;
  std::vector<EmulatedStraggler> stragglers;  // [[emulation.stragglers]]
};

/// The strategy names PlanConfig::strategy accepts.
const std::vector<std::string>& StrategyNames();

}  // namespace motley
