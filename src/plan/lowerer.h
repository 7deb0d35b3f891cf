// Lowerer: the state and emission steps of lowering one plan (lower.h); internal to src/plan.
// lower.cc sets it up and runs it; the plan families' orders are in lower_data_parallel.cc and
// lower_pipeline.cc, a task's compute and transfers in lower_task.cc, a ministage's parameter and
// gradient traffic in lower_state.cc, and the passes over the finished programs (clipping, the
// deps buffers imply, what executors need to know) in lower_passes.cc.
#pragma once

#include <cstdint>
#include <functional>
#include <map>
#include <unordered_map>
#include <utility>
#include <vector>

#include "core/cluster.h"
#include "core/message_tags.h"
#include "core/model.h"
#include "core/status.h"
#include "cost/state_bytes.h"
#include "plan/lower_options.h"
#include "plan/pipeline_order.h"
#include "plan/plan.h"
#include "plan/schedule.h"

namespace motley::lowering {

// How parameters and gradients move, derived once from the plan (see lower.h).
struct Policy {
  bool data_parallel = false;          // one group, not interleaved: Poplar-style order
  bool offload_params = false;         // shard on host, prefetched per visit
  bool gather_per_microbatch = false;  // ZeRO-3 in data parallelism
  bool gather_per_visit = false;       // pipelines with ZeRO-3 or offload: once per ministage per pass
  bool gather_once = false;            // 1F1B pipelines with ZeRO-3: once per step, kept
  bool reduce_per_microbatch = false;  // ZeRO-2/3 in data parallelism
};

struct PairHash {
  template <typename A, typename B>
  size_t operator()(const std::pair<A, B>& p) const {
    const uint64_t a = static_cast<uint64_t>(p.first), b = static_cast<uint64_t>(p.second);
    return std::hash<uint64_t>()(a * 0x9E3779B97F4A7C15ull ^ b);
  }
};
template <typename K, typename V>
using PairMap = std::unordered_map<K, V, PairHash>;

/// Values keyed by two small non-negative integers (a rank and a ministage; a task and its rank's
/// index in the team), in one flat array whose cells start `empty`: the lowering reads and writes
/// these a few times per task, hundreds of thousands of times for a plan with many microbatches.
template <typename T>
class Grid {
 public:
  void Reset(size_t rows, size_t cols, T empty) {
    cols_ = cols;
    empty_ = empty;
    cells_.assign(rows * cols, empty);
  }
  T& operator()(size_t row, size_t col) { return cells_[row * cols_ + col]; }
  T operator()(size_t row, size_t col) const { return cells_[row * cols_ + col]; }
  bool has(size_t row, size_t col) const { return (*this)(row, col) != empty_; }
  void erase(size_t row, size_t col) { (*this)(row, col) = empty_; }

 private:
  size_t cols_ = 0;
  T empty_{};
  std::vector<T> cells_;
};

class Lowerer {
 public:
  Lowerer(const Plan& plan, const Cluster& cluster, const ModelSpec& model, const LowerOptions& options)
      : plan_(plan), cluster_(cluster), model_(model), check_(options.check), options_(options) {}

  Result<Schedule> Run();

 private:
  // ---- Set-up ----
  Status Setup();

  // ---- Sizes ----
  double Tokens(int64_t m) const { return static_cast<double>(sequences_[m]) * plan_.seq_len; }
  double Act(int64_t m) const { return Tokens(m) * model_.hidden_size * act_bytes_; }
  double StageParams(int v) const;
  /// Parameters of ministage v one rank holds in full: the stage's, its layers' matrices, the
  /// embedding and the head split by its group's TP; the norms whole on every rank of a team (as the
  /// runtime holds them: runtime/model/tensor_parallel.cc).
  double RankParams(int v) const;
  double ForwardFlops(int v, int64_t m) const;
  double BackwardFlops(int v, int64_t m) const;
  double SavedExtra(int v, int64_t m) const;  // beyond the input boundary
  // Emulated (CPU) ranks reduce-scatter over Gloo, which has no reduce-scatter: an all-to-all
  // into a buffer of every member's piece of this rank's shard — as large as the gradients with
  // even shards — held while the collective runs. (Gloo's all-gather would hold one as large as the
  // parameters; motley gathers by broadcasts in place instead.)
  void AddGlooReduceScatterBuffer(Op& op, int g, int r, double full_bytes) const {
    const int members = static_cast<int>(dp_ranks_[g].front().size());
    const double received = state_shares_[g].empty() ? full_bytes : members * ShardOf(g, r, full_bytes);
    const double bytes = GlooReduceScatterBytes(received, members, cluster_.emulated());
    op.device_alloc_bytes += bytes;
    op.device_free_bytes += bytes;
  }
  // Where a reduce-scatter's output goes on rank r (as the runtime's executor puts it): the first of
  // the step into the gradient shard (zeroed by the last update, or new where the update freed it:
  // offload); a later one into a shard-sized buffer, added into the shard when it completes.
  // (A group of one adds its full gradients, the shard's size, into the shard: no other buffer.)
  void CountReduceOutput(Op& op, int r, int v, double shard_bytes, int dp) {
    if (reductions_(r, v)++ == 0) {
      if (policy_.offload_params) op.device_alloc_bytes += shard_bytes;
    } else if (dp >= 2) {
      op.device_alloc_bytes += shard_bytes;
      op.device_free_bytes += shard_bytes;
    }
  }
  double WorkForward(int v, int64_t m) const;
  double WorkBackward(int v, int64_t m) const;
  int Tp(int g) const { return plan_.groups[g].tp_degree; }
  /// Data-parallel replicas in a group: its tensor-parallel runs.
  int DpDegree(int g) const { return static_cast<int>(plan_.groups[g].devices.size()) / Tp(g); }
  // With parameter offload, a group's first ministage stays on the device: its backward visit
  // ends the step and its forward visit starts the next, so offloading it would only put a
  // round trip through host memory between two steps, with no compute to hide it under.
  bool Resident(int v) const {
    if (!policy_.offload_params || policy_.data_parallel) return false;
    for (int u = 0; u < v; ++u)
      if (ministages_[u].group == ministages_[v].group) return false;
    return true;
  }
  /// Under gradient clipping an offloaded ministage's update waits for the global norm; its shard
  /// and moments come back for it then (two ministages at a time), not at its backward visit —
  /// else every ministage's state would be on the device together until the norm.
  bool StateReturnsForTheUpdate(int v) const {
    return (plan_.gradient_clipping || plan_.loss_scaled()) && policy_.offload_params && !Resident(v);
  }
  /// Rank r's shard of `x` (a ministage's parameters, or their bytes) in group g: x / replicas with
  /// even shares (divided, so that even plans lower to exactly what they always did), its replica's
  /// share of x otherwise.
  double ShardOf(int g, int r, double x) const {
    if (state_shares_[g].empty()) return x / DpDegree(g);
    return x * state_shares_[g][(r - group_ranks_[g].front()) / Tp(g)];
  }
  /// The same as a number of replicas (ZeroStateBytes divides by it).
  double ShardDivisor(int g, int r) const {
    if (state_shares_[g].empty()) return DpDegree(g);
    return 1 / state_shares_[g][(r - group_ranks_[g].front()) / Tp(g)];
  }
  /// The ranks of the tensor-parallel run led by `leader`.
  std::vector<int> Members(int leader) const {
    std::vector<int> out;
    for (int k = 0; k < Tp(group_of_rank_[leader]); ++k) out.push_back(leader + k);
    return out;
  }

  // ---- The plan families' orders ----
  void EmitDataParallel();  // lower_data_parallel.cc
  void EmitPipeline();      // lower_pipeline.cc

  // ---- Emission ----
  int Emit(int rank, Op&& op);
  /// An op of `kind` on `stream` touching ministage v's ministage and layers.
  Op StageOp(OpKind kind, Stream stream, int v) const;
  int NewCollective(OpKind kind, const std::vector<int>& ranks, double bytes);
  /// Emits one task on one rank of the tensor-parallel run that executes it.
  void EmitTaskOnRank(const Task& t, int rank, int tp_index);
  /// One task on one rank (lower_task.cc): ministage v, microbatch m, rank r, index k in its run.
  struct TaskOnRank {
    int v = 0;
    int64_t m = 0;
    int r = 0;
    int k = 0;
    int tp = 1;
    double act = 0;   // the boundary activation's bytes
    int64_t key = 0;  // (v, m) in the per-task tables
  };
  Op TaskOp(const TaskOnRank& c, OpKind kind, Stream stream) const;
  /// The rank of ministage `other_v`'s run that exchanges with this one, and those this one sends
  /// to; whether the rank runs `other_v` itself (the boundary stays here).
  int PeerIn(const TaskOnRank& c, int other_v) const;
  std::vector<int> PeersOut(const TaskOnRank& c, int other_v) const;
  bool KeptHere(const TaskOnRank& c, int other_v) const;
  void EmitTensorParallelAllReduce(const TaskOnRank& c, int compute_op);
  /// Receives this task's boundary from ministage `from_v`'s run (`kind` of this ministage).
  int EmitReceive(const TaskOnRank& c, int from_v, bool backward, BufferKind kind);
  /// Sends compute op `after`'s boundary (`kind` of ministage `other_v`) to every peer of its run.
  void EmitSends(const TaskOnRank& c, int other_v, bool backward, BufferKind kind, int after);
  void EmitForwardOnRank(const TaskOnRank& c, std::vector<int32_t> deps);
  void EmitBackwardOnRank(const TaskOnRank& c, std::vector<int32_t> deps);
  std::vector<int> EmitCollective(OpKind kind, int g, int v, double bytes);
  /// Rank r's op of group g's data-parallel collective of its tensor-parallel index; `collectives`
  /// (one a tensor-parallel index, -1: not made yet) are made by the first rank that emits.
  int EmitCollectiveOnRank(OpKind kind, int g, int v, double bytes, int r, std::vector<int>* collectives);
  void EmitTask(const Task& t);
  /// A pipeline's visits as the global order has them (each group runs its visits one after another).
  struct PipelineVisits {
    std::vector<std::vector<std::pair<bool, int>>> of_group;        // per group, in order: (backward, v)
    std::map<std::pair<int, int>, std::pair<size_t, size_t>> span;  // (g, pass*V+v) -> first, last position
    // (g, pass*V+v) -> each rank's first task there: (leader, position), in order.
    std::map<std::pair<int, int>, std::vector<std::pair<int, size_t>>> started;
  };
  /// Also numbers each group's visits (visit_number_).
  PipelineVisits ScanVisits(const std::vector<Task>& order);
  /// `continuation`: the backward visit right after the forward visit of the same ministage; its
  /// gathered parameters are still there, only the optimizer state comes in. `ranks`: the group's
  /// ranks to emit on now (empty: all of them); a visit's preparation may be emitted on its ranks
  /// at different points of the global order (EmitPipeline), its gather made once.
  void EmitVisitPrepare(int g, int v, bool backward, bool continuation = false,
                        const std::vector<int>& ranks = {});
  void EmitFinishForward(int g, int v);
  void EmitFinishBackward(int g, int v);
  void EmitReduceAndStep(int g, int v);
  // ---- A tied model in several ministages (lower_state.cc) ----
  /// The head's ministage holds a copy of the embedding matrix (the runtime's
  /// LlamaModelImpl::UntieHead), whose gradient is summed with the embedding's before either is
  /// reduced.
  bool TiedCopies() const { return model_.tie_embeddings && num_ministages_ > 1; }
  bool HoldsTiedCopy(int v) const { return TiedCopies() && (v == 0 || v == num_ministages_ - 1); }
  /// Emits `reduce` (ministage v's gradient reduction and what follows it) now — or, for the two
  /// ministages that hold the tied copies, once both have reached theirs: then the sum of the
  /// copies (EmitTiedGradSum) and both reductions, the head's first.
  void ReduceAfterTiedSum(int v, std::function<void()> reduce);
  void EmitTiedGradSum();
  std::function<void()> held_reduction_[2];  // the embedding's, the head's: waiting for the other
  /// The passes over the finished programs, each program alone (on LowerOptions::threads threads):
  /// clipping's hold, the buffers' deps, the prefetches' places, the complete gradients.
  void RunPasses();
  /// Gradient clipping: moves every update (and what follows it) after the global norm (the
  /// collective `norm_collective`).
  void HoldUpdatesForTheNorm(Program& p, int norm_collective) const;
  /// A transfer's tag: unique per direction, receiving ministage and microbatch (opaque to executors).
  int64_t Tag(bool backward, int v, int64_t m) const {
    return MessageTag(TagRange::kSchedule, ((backward ? 1 : 0) * num_ministages_ + v) * num_mb_ + m);
  }
  static Buffer Buf(BufferKind kind, int v, int64_t m = -1) {
    return {kind, static_cast<int16_t>(v), static_cast<int32_t>(m)};  // (Setup checks v fits)
  }
  /// The buffers each rank holds between steps; ministage information for executors.
  void DescribeState();
  /// Backward ops after which the gradients are read before another backward adds to them.
  void MarkCompleteGradients(Program& p) const;
  /// Adds the deps the buffers imply (read after write, write after read or write), so that an
  /// executor that runs ops as soon as their deps allow — the simulator — keeps the data flow the
  /// runtime keeps by running in program order.
  struct BufferUses;  // a table of each buffer's last writer and readers (reused program to program)
  void AddBufferDeps(Program& p, BufferUses& table) const;
  void KeepOneProgramPerClass();  // LowerOptions::device_class
  /// The planner's judging (LowerOptions::device_class) of one group without tensor parallelism:
  /// ranks the plan gives alike microbatches (sizes, by local index) and alike state (share) on
  /// devices of one class emit alike programs (checked against the emitted ones in the sim tests), so
  /// only the first of them emits: the others' ops are dropped as they come (Emit) and their program
  /// is the first's (KeepOneProgramPerClass).
  void PredictAlikeRanks();
  bool Dropped(int rank) const {
    return !stands_for_.empty() && stands_for_[static_cast<size_t>(rank)] != rank;
  }
  bool Represented(const Program& p) const {  // its rank's program is another's (empty here)
    return !s_.represented_by.empty() && s_.represented_by[static_cast<size_t>(p.rank)] != p.rank;
  }
  /// Moves each activation prefetch up to just after the last op it waits for, so that an
  /// executor issuing in program order starts it while the backward before its reader runs.
  void IssuePrefetchesEarly(Program& p) const;
  int RankOf(int v, int64_t m) const { return routing_rank_[ministages_[v].group][m]; }

  const Plan& plan_;
  const Cluster& cluster_;
  const ModelSpec& model_;
  const bool check_;  // CheckSchedule on the result
  const LowerOptions& options_;
  Policy policy_;
  Schedule s_;
  std::vector<PlacedMinistage> ministages_;
  int num_ministages_ = 0;
  int64_t num_mb_ = 0;
  std::vector<int64_t> sequences_;              // per microbatch
  std::vector<int> local_index_;                // data parallelism: index of the microbatch on its device
  std::vector<std::vector<int>> routing_rank_;  // [group][microbatch] -> rank
  std::vector<std::vector<int>> group_ranks_;   // [group] -> ranks
  std::vector<std::vector<std::vector<int>>> dp_ranks_;  // [group][tp index] -> ranks that reduce together
  std::vector<std::vector<double>> state_shares_;  // [group] -> per replica (state_shares.h); empty: even
  std::vector<int> group_of_rank_;
  double param_bytes_ = 2, grad_bytes_ = 2, opt_bytes_ = 12, act_bytes_ = 2;

  // Per-rank bookkeeping for dependencies: looked up, never iterated (flat grids where the keys are
  // dense, hash maps where they are not: the lowering of a plan with many microbatches does hundreds
  // of thousands of lookups).
  Grid<int> gather_op_;     // (rank, v) -> op of the current visit's gather, or -1
  Grid<int> last_compute_;  // (rank, v) -> last compute op of the current visit, or -1
  Grid<uint8_t>
      grads_allocated_;       // (rank, v) -> full gradient buffer held (not vector<bool>: cells by reference)
  Grid<int> reductions_;      // (rank, v) -> reduce-scatters so far this step
  Grid<int> last_reduce_;     // (rank, v) -> reduce the next backward's gradients wait for, or -1
  Grid<int> forward_op_;      // (v * num_mb + m, index in the team) -> forward op, or -1
  Grid<int> act_offload_op_;  // (v * num_mb + m, index in the team) -> its boundary's offload, or -1
  PairMap<std::pair<int, int>, int> release_op_;  // (rank, visit number) -> op after which params are gone
  std::vector<std::vector<int>> backward_ops_;    // per rank, in order
  std::vector<int> pending_tp_allreduce_;         // per rank: TP all-reduce the next compute waits for, or -1
  std::vector<std::vector<int>> reduce_ops_;      // per rank: its gradient reductions, in order
  int tp_collective_ = -1;                        // the TP all-reduce of the task being emitted
  PairMap<std::pair<int, int>, int> visit_number_;  // (group, pass*V + v) -> ordinal of the visit
  std::map<std::pair<int, int>, std::vector<int>> prepare_gathers_;  // (group, pass*V + v) -> its gathers
  std::vector<int32_t> stands_for_;  // rank -> the rank whose program it will be (PredictAlikeRanks)
  double emitted_share_ = 0;  // of the step's tasks, emitted so far (Emit sizes the ranks' vectors by it)
};

}  // namespace motley::lowering
