#include "plan/lower.h"
#include "plan/pipeline_order.h"

#include <cstdint>
#include <algorithm>
#include <map>
#include <tuple>

#include <fmt/format.h>

#include "core/check.h"
#include "core/message_tags.h"

namespace motley {
namespace {


// How parameters and gradients move, derived once from the plan (see lower.h).
struct Policy {
  bool data_parallel = false;          // one group, not interleaved: Poplar-style order
  bool offload_params = false;         // shard on host, prefetched per visit
  bool gather_per_microbatch = false;  // ZeRO-3 in data parallelism
  bool gather_per_visit = false;       // pipelines with ZeRO-3 or offload: once per ministage per pass
  bool gather_once = false;            // 1F1B pipelines with ZeRO-3: once per step, kept
  bool reduce_per_microbatch = false;  // ZeRO-2/3 in data parallelism
};

class Lowerer {
 public:
  Lowerer(const Plan& plan, const Cluster& cluster, const ModelSpec& model)
      : plan_(plan), cluster_(cluster), model_(model) {}

  Result<Schedule> Run();

 private:
  // ---- Set-up ----
  Status Setup();

  // ---- Sizes ----
  double Tokens(int64_t m) const { return static_cast<double>(sequences_[m]) * plan_.seq_len; }
  double Act(int64_t m) const { return Tokens(m) * model_.hidden_size * act_bytes_; }
  double StageParams(int v) const;
  /// Parameters of virtual stage v one rank holds in full: the stage's, split by its group's TP.
  double RankParams(int v) const { return StageParams(v) / Tp(vstages_[v].group); }
  double ForwardFlops(int v, int64_t m) const;
  double BackwardFlops(int v, int64_t m) const;
  double SavedExtra(int v, int64_t m) const;  // beyond the input boundary
  // Emulated (CPU) ranks reduce-scatter over Gloo, which has no reduce-scatter: an all-to-all
  // into a buffer as large as the gradients, held while the collective runs. (Gloo's all-gather
  // would hold one as large as the parameters; motley gathers by broadcasts in place instead.)
  void AddGlooReduceScatterBuffer(Op& op, double full_bytes, size_t group_size) const {
    if (!cluster_.emulated() || group_size < 2) return;
    op.device_alloc_bytes += full_bytes;
    op.device_free_bytes += full_bytes;
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
      if (vstages_[u].group == vstages_[v].group) return false;
    return true;
  }
  /// The ranks of the tensor-parallel run led by `leader`.
  std::vector<int> Members(int leader) const {
    std::vector<int> out;
    for (int k = 0; k < Tp(group_of_rank_[leader]); ++k) out.push_back(leader + k);
    return out;
  }

  // ---- Emission ----
  int Emit(int rank, Op op);
  /// An op of `kind` on `stream` touching virtual stage v's ministage and layers.
  Op StageOp(OpKind kind, Stream stream, int v) const;
  int NewCollective(OpKind kind, const std::vector<int>& ranks, double bytes);
  /// Emits one task on one rank of the tensor-parallel run that executes it.
  void EmitTaskOnRank(const Task& t, int rank, int tp_index);
  std::vector<int> EmitCollective(OpKind kind, int g, int v, double bytes);
  void EmitTask(const Task& t);
  /// `continuation`: the backward visit right after the forward visit of the same ministage; its
  /// gathered parameters are still there, only the optimizer state comes in.
  void EmitVisitPrepare(int g, int v, bool backward, bool continuation = false);
  void EmitFinishForward(int g, int v);
  void EmitFinishBackward(int g, int v);
  void EmitReduceAndStep(int g, int v);
  /// Gradient clipping: moves every update (and what follows it) after the global norm.
  void HoldUpdatesForTheNorm();
  /// A transfer's tag: unique per direction, receiving ministage and microbatch (opaque to executors).
  int64_t Tag(bool backward, int v, int64_t m) const {
    return MessageTag(TagRange::kSchedule, ((backward ? 1 : 0) * num_vstages_ + v) * num_mb_ + m);
  }
  static Buffer Buf(BufferKind kind, int v, int64_t m = -1) { return {kind, v, static_cast<int32_t>(m)}; }
  /// The buffers each rank holds between steps; ministage information for executors.
  void DescribeState();
  /// Backward ops after which the gradients are read before another backward adds to them.
  void MarkCompleteGradients();
  /// Adds the deps the buffers imply (read after write, write after read or write), so that an
  /// executor that runs ops as soon as their deps allow — the simulator — keeps the data flow the
  /// runtime keeps by running in program order.
  void AddBufferDeps();
  int RankOf(int v, int64_t m) const { return routing_rank_[vstages_[v].group][m]; }

  const Plan& plan_;
  const Cluster& cluster_;
  const ModelSpec& model_;
  Policy policy_;
  Schedule s_;
  std::vector<VirtualStage> vstages_;
  int num_vstages_ = 0;
  int64_t num_mb_ = 0;
  std::vector<int64_t> sequences_;              // per microbatch
  std::vector<int> local_index_;                // data parallelism: index of the microbatch on its device
  std::vector<std::vector<int>> routing_rank_;  // [group][microbatch] -> rank
  std::vector<std::vector<int>> group_ranks_;   // [group] -> ranks
  std::vector<std::vector<std::vector<int>>> dp_ranks_;  // [group][tp index] -> ranks that reduce together
  std::vector<int> group_of_rank_;
  double param_bytes_ = 2, grad_bytes_ = 2, opt_bytes_ = 12, act_bytes_ = 2;

  // Per-rank bookkeeping for dependencies.
  std::map<std::pair<int, int>, int> gather_op_;     // (rank, v) -> op of the current visit's gather
  std::map<std::pair<int, int>, int> prefetch_op_;   // (rank, v) -> current visit's param prefetch
  std::map<std::pair<int, int>, int> last_compute_;  // (rank, v) -> last compute op of the current visit
  std::map<std::pair<int, int>, int> release_op_;    // (rank, visit number) -> op after which params are gone
  std::map<std::pair<int, int>, bool> grads_allocated_;  // (rank, v) -> full gradient buffer held
  std::map<std::pair<int, int64_t>, int> forward_op_;    // (rank, v * num_mb + m) -> forward op
  std::map<std::pair<int, int64_t>, int> act_offload_op_;
  std::vector<std::vector<int>> backward_ops_;  // per rank, in order
  std::map<int, int> pending_tp_allreduce_;     // rank -> TP all-reduce the next compute waits for
  std::map<std::pair<int, int>, int>
      last_reduce_;                             // (rank, v) -> reduce the next backward's gradients wait for
  std::map<int, std::vector<int>> reduce_ops_;  // rank -> its gradient reductions, in order
  int tp_collective_ = -1;                      // the TP all-reduce of the task being emitted
  std::map<std::pair<int, int>, int> visit_number_;  // (group, pass*V + v) -> ordinal of the visit
};

Status Lowerer::Setup() {
  MOTLEY_RETURN_IF_ERROR(ValidatePlan(plan_, cluster_, model_));
  const bool interleaved = plan_.schedule == PipelineSchedule::kInterleaved;
  policy_.data_parallel = !plan_.is_pipeline() && !interleaved;
  policy_.offload_params = plan_.offload_params;
  policy_.gather_per_microbatch = policy_.data_parallel && plan_.zero_stage == 3;
  policy_.reduce_per_microbatch = policy_.data_parallel && plan_.zero_stage >= 2;
  const bool sharded_params = plan_.zero_stage == 3 || plan_.offload_params;
  policy_.gather_per_visit =
      !policy_.data_parallel && sharded_params && plan_.schedule != PipelineSchedule::k1F1B;
  policy_.gather_once = !policy_.data_parallel && sharded_params && plan_.schedule == PipelineSchedule::k1F1B;

  const StateBytesPerParam state = StateBytes(plan_.precision);
  param_bytes_ = state.params;
  grad_bytes_ = state.grads;
  opt_bytes_ = state.optimizer;
  act_bytes_ = BytesPerElement(plan_.precision);

  vstages_ = VirtualStages(plan_);
  num_vstages_ = static_cast<int>(vstages_.size());

  // Ranks in plan order.
  group_ranks_.assign(plan_.groups.size(), {});
  dp_ranks_.assign(plan_.groups.size(), {});
  std::map<int, int> rank_of_device;
  for (size_t g = 0; g < plan_.groups.size(); ++g) {
    dp_ranks_[g].assign(plan_.groups[g].tp_degree, {});
    for (size_t i = 0; i < plan_.groups[g].devices.size(); ++i) {
      const DevicePlan& d = plan_.groups[g].devices[i];
      int rank = static_cast<int>(s_.programs.size());
      rank_of_device[d.device] = rank;
      group_ranks_[g].push_back(rank);
      dp_ranks_[g][i % plan_.groups[g].tp_degree].push_back(rank);
      group_of_rank_.push_back(static_cast<int>(g));
      Program p;
      p.rank = rank;
      p.device = d.device;
      s_.programs.push_back(std::move(p));
    }
  }
  backward_ops_.assign(s_.programs.size(), {});

  // Microbatches: global ones in a pipeline; in data parallelism each device's own, numbered by
  // (local index, rank) so that devices advance in step.
  routing_rank_.assign(plan_.groups.size(), {});
  if (plan_.is_pipeline() || !policy_.data_parallel) {
    num_mb_ = plan_.groups[0].num_microbatches();
    const int64_t mbs = plan_.groups[0].devices[0].microbatch_size;
    if (!plan_.is_pipeline()) {
      // One interleaved group: its devices' own microbatches, each of its own size.
      for (size_t i = 0; i < plan_.groups[0].devices.size(); ++i) {
        if (!plan_.groups[0].is_tp_leader(i)) continue;
        const auto& d = plan_.groups[0].devices[i];
        for (int64_t k = 0; k < d.num_microbatches; ++k) {
          sequences_.push_back(d.microbatch_size_at(k));
          routing_rank_[0].push_back(group_ranks_[0][i]);
          local_index_.push_back(static_cast<int>(k));
        }
      }
    } else {
      sequences_.assign(num_mb_, mbs);
      for (size_t g = 0; g < plan_.groups.size(); ++g) {
        std::vector<int> routing =
            plan_.groups[g].routing.empty() ? BlockRouting(plan_.groups[g]) : plan_.groups[g].routing;
        for (int dev : routing) routing_rank_[g].push_back(rank_of_device[dev]);
      }
    }
  } else {
    const auto& devs = plan_.groups[0].devices;
    int64_t max_n = 0;
    for (const auto& d : devs) max_n = std::max(max_n, d.num_microbatches);
    for (int64_t k = 0; k < max_n; ++k) {
      for (size_t i = 0; i < devs.size(); ++i) {
        if (!plan_.groups[0].is_tp_leader(i) || k >= devs[i].num_microbatches) continue;
        sequences_.push_back(devs[i].microbatch_size_at(k));
        routing_rank_[0].push_back(group_ranks_[0][i]);
        local_index_.push_back(static_cast<int>(k));
      }
    }
    num_mb_ = static_cast<int64_t>(sequences_.size());
  }
  return Status::Ok();
}

double Lowerer::StageParams(int v) const {
  const LayerRange& r = vstages_[v].layers;
  double p = static_cast<double>(r.size()) * ParamsPerLayer(model_);
  if (r.begin == 0) p += EmbeddingParams(model_);
  if (r.end == model_.num_layers) p += HeadParams(model_);
  return p;
}

double Lowerer::ForwardFlops(int v, int64_t m) const {
  const LayerRange& r = vstages_[v].layers;
  double per_token = r.size() * LayerForwardFlopsPerToken(model_, plan_.seq_len);
  if (r.end == model_.num_layers) per_token += HeadForwardFlopsPerToken(model_);
  return per_token * Tokens(m);
}

double Lowerer::BackwardFlops(int v, int64_t m) const {
  double flops = 2 * ForwardFlops(v, m);
  if (plan_.activation_checkpointing)
    flops += vstages_[v].layers.size() * LayerForwardFlopsPerToken(model_, plan_.seq_len) * Tokens(m);
  return flops;
}

double Lowerer::SavedExtra(int v, int64_t m) const {
  const int n = vstages_[v].layers.size();
  // Checkpointing keeps each layer's input (the first is the stage's input) and the head's.
  const bool head = vstages_[v].layers.end == model_.num_layers;
  if (plan_.activation_checkpointing) return (n - 1 + (head ? 1 : 0)) * Act(m);
  return n * LayerActivationBytesPerToken(model_, plan_.seq_len, plan_.precision, false, Tp(vstages_[v].group)) *
         Tokens(m);
}

double Lowerer::WorkForward(int v, int64_t m) const {
  // A tensor-parallel rank holds its share of a layer's activations (model.h) and, as every rank of
  // the team computes the replicated head, all of the logits.
  const int tp = Tp(vstages_[v].group);
  double work = plan_.activation_checkpointing
                    ? LayerActivationBytesPerToken(model_, plan_.seq_len, plan_.precision, false, tp) * Tokens(m)
                    : 0;
  if (vstages_[v].layers.end == model_.num_layers)
    work += Tokens(m) * LogitsBytesPerToken(model_, plan_.precision);
  return work;
}

double Lowerer::WorkBackward(int v, int64_t m) const {
  const int tp = Tp(vstages_[v].group);
  double work = 2 * LayerActivationBytesPerToken(model_, plan_.seq_len, plan_.precision, false, tp) * Tokens(m);
  if (vstages_[v].layers.end == model_.num_layers) work += Tokens(m) * LogitsBytesPerToken(model_, plan_.precision);
  return work;
}

Op Lowerer::StageOp(OpKind kind, Stream stream, int v) const {
  Op op;
  op.kind = kind;
  op.stream = stream;
  op.ministage = v;
  op.layer_begin = vstages_[v].layers.begin;
  op.layer_end = vstages_[v].layers.end;
  return op;
}

int Lowerer::Emit(int rank, Op op) {
  auto& ops = s_.programs[rank].ops;
  ops.push_back(std::move(op));
  return static_cast<int>(ops.size()) - 1;
}

int Lowerer::NewCollective(OpKind kind, const std::vector<int>& ranks, double bytes) {
  Collective c;
  c.kind = kind;
  c.ranks = ranks;
  c.bytes = bytes;
  s_.collectives.push_back(std::move(c));
  return static_cast<int>(s_.collectives.size()) - 1;
}

// A data-parallel collective over group g: one per tensor-parallel index (each over the ranks
// holding the same slice of the matrices), `bytes` being one rank's full payload. Returns one op
// index per rank of the group, in group_ranks_ order.
std::vector<int> Lowerer::EmitCollective(OpKind kind, int g, int v, double bytes) {
  std::map<int, int> op_of_rank;
  for (const auto& ranks : dp_ranks_[g]) {
    const int c = NewCollective(kind, ranks, bytes);
    for (int r : ranks) {
      Op op = StageOp(kind, Stream::kComm, v);
      op.embedding = vstages_[v].layers.begin == 0;
      op.head = vstages_[v].layers.end == model_.num_layers;
      op.bytes = bytes;
      op.collective = c;
      op_of_rank[r] = Emit(r, std::move(op));
    }
  }
  std::vector<int> out;
  for (int r : group_ranks_[g]) out.push_back(op_of_rank[r]);
  return out;
}

// Before a visit to virtual stage v (a pass over its microbatches): bring the parameters in.
void Lowerer::EmitVisitPrepare(int g, int v, bool backward, bool continuation) {
  const int d = DpDegree(g);
  const double full = RankParams(v) * param_bytes_;
  const double shard = RankParams(v) / d;
  const int visit = visit_number_[{g, (backward ? 1 : 0) * num_vstages_ + v}];
  std::vector<int> prefetch(group_ranks_[g].size(), -1);
  for (size_t i = 0; i < group_ranks_[g].size(); ++i) {
    const int r = group_ranks_[g][i];
    if (!policy_.offload_params || Resident(v)) continue;
    Op op = StageOp(OpKind::kParamPrefetch, Stream::kH2D, v);
    op.bytes = shard * (param_bytes_ + (backward ? opt_bytes_ : 0));
    op.device_alloc_bytes = op.bytes;
    op.writes.push_back(Buf(BufferKind::kShard, v));
    if (backward) op.writes.push_back(Buf(BufferKind::kMoments, v));
    // At most two ministages resident: wait until the one two visits back is gone.
    if (auto it = release_op_.find({r, visit - 2}); it != release_op_.end()) op.deps.push_back(it->second);
    prefetch[i] = Emit(r, std::move(op));
    prefetch_op_[{r, v}] = prefetch[i];
  }
  if (continuation) return;
  std::vector<int> gathers = EmitCollective(OpKind::kAllGather, g, v, full);
  for (size_t i = 0; i < gathers.size(); ++i) {
    const int r = group_ranks_[g][i];
    Op& op = s_.programs[r].ops[gathers[i]];
    op.device_alloc_bytes = full;
    op.reads.push_back(Buf(BufferKind::kShard, v));
    op.writes.push_back(Buf(BufferKind::kParams, v));
    if (prefetch[i] >= 0) {
      op.deps.push_back(prefetch[i]);
      if (!backward) {  // the shard is not needed after the gather
        op.device_free_bytes = shard * param_bytes_;
        op.frees.push_back(Buf(BufferKind::kShard, v));
      }
    } else if (auto it = release_op_.find({r, visit - 2}); it != release_op_.end()) {
      op.deps.push_back(it->second);
    }
    gather_op_[{r, v}] = gathers[i];
    last_compute_.erase({r, v});
  }
}

// After the forward visit: drop the gathered parameters (after the last compute that used them).
void Lowerer::EmitFinishForward(int g, int v) {
  const double full = RankParams(v) * param_bytes_;
  const int visit = visit_number_[{g, v}];
  for (int r : group_ranks_[g]) {
    auto lc = last_compute_.find({r, v});
    int release = lc != last_compute_.end() ? lc->second : gather_op_[{r, v}];
    s_.programs[r].ops[release].device_free_bytes += full;
    s_.programs[r].ops[release].frees.push_back(Buf(BufferKind::kParams, v));
    release_op_[{r, visit}] = release;
  }
}

// Gradient reduction, the sharded optimizer step and what follows it, for virtual stage v.
void Lowerer::EmitReduceAndStep(int g, int v) {
  const int d = DpDegree(g);
  const double params = RankParams(v);
  const double full_grads = params * grad_bytes_;
  const double shard = plan_.zero_stage == 0 ? params : params / d;
  const OpKind reduce = plan_.zero_stage == 0 ? OpKind::kAllReduce : OpKind::kReduceScatter;
  std::vector<int> ops = EmitCollective(reduce, g, v, full_grads);
  for (size_t i = 0; i < ops.size(); ++i) {
    const int r = group_ranks_[g][i];
    reduce_ops_[r].push_back(ops[i]);
    Op& op = s_.programs[r].ops[ops[i]];
    if (auto lc = last_compute_.find({r, v}); lc != last_compute_.end()) op.deps.push_back(lc->second);
    op.reads.push_back(Buf(BufferKind::kGrads, v));
    // ZeRO-0 reduces in place; ZeRO-1 clears the full gradients after; ZeRO >= 2 frees them.
    if (plan_.zero_stage <= 1) op.writes.push_back(Buf(BufferKind::kGrads, v));
    if (plan_.zero_stage >= 1) op.writes.push_back(Buf(BufferKind::kGradShard, v));
    if (plan_.zero_stage >= 2) {
      // The full gradient buffer goes away once reduced; the shard stays.
      if (!grads_allocated_[{r, v}]) {  // a device with no microbatch contributes zeros
        op.device_alloc_bytes = full_grads;
        op.writes.push_back(Buf(BufferKind::kGrads, v));
      }
      op.device_free_bytes = full_grads;
      op.frees.push_back(Buf(BufferKind::kGrads, v));
      if (policy_.offload_params) op.device_alloc_bytes += shard * grad_bytes_;
      grads_allocated_[{r, v}] = false;
    }
    if (reduce == OpKind::kReduceScatter) AddGlooReduceScatterBuffer(op, full_grads, group_ranks_[g].size());
    Op step = StageOp(OpKind::kOptimizerStep, Stream::kCompute, v);
    step.flops = kAdamFlopsPerParam * shard;
    step.params = shard;
    step.bytes = 2 * shard * (param_bytes_ + grad_bytes_ + opt_bytes_);
    step.deps.push_back(ops[i]);
    // AdamW on the shard (ZeRO-0: the full parameters) with its moments; the gradients are cleared.
    const Buffer weights = Buf(plan_.zero_stage == 0 ? BufferKind::kParams : BufferKind::kShard, v);
    const Buffer grads = Buf(plan_.zero_stage == 0 ? BufferKind::kGrads : BufferKind::kGradShard, v);
    step.reads = {weights, grads, Buf(BufferKind::kMoments, v)};
    step.writes = {weights, grads, Buf(BufferKind::kMoments, v)};
    if (policy_.offload_params) {
      step.device_free_bytes = shard * grad_bytes_;
      step.frees.push_back(grads);
    }
    const int step_op = Emit(r, std::move(step));
    last_compute_[{r, v}] = step_op;
  }
  if (plan_.zero_stage == 1 || (plan_.zero_stage == 2 && !policy_.offload_params)) {
    // Replicated parameters: gather the updated shards.
    std::vector<int> gathers = EmitCollective(OpKind::kAllGather, g, v, params * param_bytes_);
    for (size_t i = 0; i < gathers.size(); ++i) {
      const int r = group_ranks_[g][i];
      Op& op = s_.programs[r].ops[gathers[i]];
      op.deps.push_back(last_compute_[{r, v}]);
      op.reads.push_back(Buf(BufferKind::kShard, v));
      op.writes.push_back(Buf(BufferKind::kParams, v));
    }
  }
}

void Lowerer::EmitFinishBackward(int g, int v) {
  const int d = DpDegree(g);
  const double params = RankParams(v);
  if (!policy_.reduce_per_microbatch) EmitReduceAndStep(g, v);
  const int visit = visit_number_[{g, num_vstages_ + v}];
  const bool sharded = policy_.gather_per_visit || policy_.gather_once;
  for (int r : group_ranks_[g]) {
    if (!sharded) continue;
    auto lc = last_compute_.find({r, v});
    int release = lc != last_compute_.end() ? lc->second : gather_op_[{r, v}];
    s_.programs[r].ops[release].device_free_bytes += params * param_bytes_;
    s_.programs[r].ops[release].frees.push_back(Buf(BufferKind::kParams, v));
    if (policy_.offload_params && !Resident(v)) {
      Op off = StageOp(OpKind::kParamOffload, Stream::kD2H, v);
      off.bytes = params / d * (param_bytes_ + opt_bytes_);
      off.device_free_bytes = off.bytes;
      off.reads = {Buf(BufferKind::kShard, v), Buf(BufferKind::kMoments, v)};
      off.frees = off.reads;
      off.deps.push_back(release);
      release = Emit(r, std::move(off));
    }
    release_op_[{r, visit}] = release;
  }
}

void Lowerer::EmitTask(const Task& t) {
  const int leader = RankOf(t.v, t.m);
  const int tp = Tp(vstages_[t.v].group);
  int collective = -1;
  if (tp > 1) {
    // Megatron-style: two all-reduces of the activations per layer (attention, MLP) in each pass.
    collective =
        NewCollective(OpKind::kAllReduce, Members(leader), 2.0 * vstages_[t.v].layers.size() * Act(t.m));
    s_.collectives[collective].tensor_parallel = true;
  }
  tp_collective_ = collective;
  for (int k = 0; k < tp; ++k) EmitTaskOnRank(t, leader + k, k);
}

void Lowerer::EmitTaskOnRank(const Task& t, int r, int k) {
  const int v = t.v;
  const int64_t m = t.m;
  const VirtualStage& vs = vstages_[v];
  const int tp = Tp(vs.group);
  const double act = Act(m);
  const int64_t key = static_cast<int64_t>(v) * num_mb_ + m;
  auto base_op = [&](OpKind kind, Stream stream) {
    Op op = StageOp(kind, stream, v);
    op.embedding = vs.layers.begin == 0;
    op.head = vs.layers.end == model_.num_layers;
    op.microbatch = static_cast<int32_t>(m);
    op.sequences = sequences_[m];
    return op;
  };
  // The rank of the neighbouring run that exchanges with this one: every rank of the receiving run
  // gets the whole activation from the sending run's rank with the same index modulo its size.
  auto peer_in = [&](int other_v) { return RankOf(other_v, m) + k % Tp(vstages_[other_v].group); };
  auto peers_out = [&](int other_v) {
    std::vector<int> out;
    for (int kk = 0; kk < Tp(vstages_[other_v].group); ++kk)
      if (kk % tp == k && RankOf(other_v, m) + kk != r) out.push_back(RankOf(other_v, m) + kk);
    return out;
  };
  std::vector<int32_t> deps;
  if (auto it = gather_op_.find({r, v}); it != gather_op_.end()) deps.push_back(it->second);
  if (auto it = pending_tp_allreduce_.find(r); it != pending_tp_allreduce_.end()) {
    deps.push_back(it->second);
    pending_tp_allreduce_.erase(it);
  }
  auto tp_allreduce = [&](int compute_op) {
    if (tp_collective_ < 0) return;
    Op op = base_op(OpKind::kAllReduce, Stream::kComm);
    op.bytes = s_.collectives[tp_collective_].bytes;
    op.collective = tp_collective_;
    op.deps.push_back(compute_op);
    pending_tp_allreduce_[r] = Emit(r, std::move(op));
  };

  if (!t.backward) {
    if (v > 0 && peer_in(v - 1) != r) {
      Op recv = base_op(OpKind::kRecv, Stream::kComm);
      recv.peer = peer_in(v - 1);
      recv.tag = Tag(false, v, m);
      recv.bytes = act;
      recv.device_alloc_bytes = act;
      recv.writes.push_back(Buf(BufferKind::kInput, v, m));
      deps.push_back(Emit(r, std::move(recv)));
    }
    Op fwd = base_op(OpKind::kForward, Stream::kCompute);
    fwd.tp_degree = tp;
    fwd.flops = ForwardFlops(v, m) / tp;
    const double output = v + 1 < num_vstages_ ? act : 0;
    const double input = v == 0 ? act : 0;  // the embedding's output is made here
    const double work = WorkForward(v, m);
    fwd.device_alloc_bytes = work + SavedExtra(v, m) + output + input;
    fwd.device_free_bytes = work;
    fwd.deps = deps;
    // The input becomes the first saved boundary; the output is kept when a send or this rank's
    // next ministage takes it.
    fwd.reads.push_back(Buf(BufferKind::kParams, v));
    if (v > 0) {
      fwd.reads.push_back(Buf(BufferKind::kInput, v, m));
      fwd.frees.push_back(Buf(BufferKind::kInput, v, m));
    }
    fwd.writes.push_back(Buf(BufferKind::kSaved, v, m));
    if (v + 1 < num_vstages_) {
      const bool kept_here = RankOf(v + 1, m) <= r && r < RankOf(v + 1, m) + Tp(vstages_[v + 1].group);
      if (kept_here || !peers_out(v + 1).empty()) fwd.writes.push_back(Buf(BufferKind::kInput, v + 1, m));
    }
    const int f = Emit(r, std::move(fwd));
    forward_op_[{r, key}] = f;
    last_compute_[{r, v}] = f;
    tp_allreduce(f);
    if (plan_.offload_activations) {
      Op off = base_op(OpKind::kActOffload, Stream::kD2H);
      off.bytes = act + SavedExtra(v, m);
      off.device_free_bytes = off.bytes;
      off.host_alloc_bytes = off.bytes;
      off.reads = off.frees = {Buf(BufferKind::kSaved, v, m)};
      off.writes = {Buf(BufferKind::kHostSaved, v, m)};
      off.deps.push_back(f);
      act_offload_op_[{r, key}] = Emit(r, std::move(off));
    }
    if (v + 1 < num_vstages_) {
      const std::vector<int> peers = peers_out(v + 1);
      // Every receiving rank gets its own copy; the output is freed after the last send (or kept
      // for the next ministage when it runs here too).
      std::vector<int32_t> sent;
      for (size_t i = 0; i < peers.size(); ++i) {
        Op send = base_op(OpKind::kSend, Stream::kComm);
        send.peer = peers[i];
        send.tag = Tag(false, v + 1, m);
        send.bytes = act;
        const bool kept_here = RankOf(v + 1, m) <= r && r < RankOf(v + 1, m) + Tp(vstages_[v + 1].group);
        send.device_free_bytes = (i + 1 == peers.size() && !kept_here) ? act : 0;
        send.reads.push_back(Buf(BufferKind::kInput, v + 1, m));
        send.deps.push_back(f);
        if (send.device_free_bytes > 0) {  // the last use: after the other sends of it
          send.frees = send.reads;
          send.deps.insert(send.deps.end(), sent.begin(), sent.end());
        }
        sent.push_back(Emit(r, std::move(send)));
      }
      if (peers.empty() && !(RankOf(v + 1, m) <= r && r < RankOf(v + 1, m) + Tp(vstages_[v + 1].group))) {
        s_.programs[r].ops[f].device_alloc_bytes -= output;  // nobody downstream needs this rank's copy
      }
    }
    return;
  }

  // Backward.
  if (v + 1 < num_vstages_ && peer_in(v + 1) != r) {
    Op recv = base_op(OpKind::kRecv, Stream::kComm);
    recv.peer = peer_in(v + 1);
    recv.tag = Tag(true, v, m);
    recv.bytes = act;
    recv.device_alloc_bytes = act;
    recv.writes.push_back(Buf(BufferKind::kOutputGrad, v, m));
    deps.push_back(Emit(r, std::move(recv)));
  }
  auto& bwd_list = backward_ops_[r];
  if (plan_.offload_activations) {
    Op pre = base_op(OpKind::kActPrefetch, Stream::kH2D);
    pre.bytes = act + SavedExtra(v, m);
    pre.device_alloc_bytes = pre.bytes;
    pre.host_free_bytes = pre.bytes;
    pre.reads = pre.frees = {Buf(BufferKind::kHostSaved, v, m)};
    pre.writes = {Buf(BufferKind::kSaved, v, m)};
    pre.deps.push_back(act_offload_op_.at({r, key}));
    // One microbatch ahead: start when the backward two before this one has finished.
    if (bwd_list.size() >= 2) pre.deps.push_back(bwd_list[bwd_list.size() - 2]);
    deps.push_back(Emit(r, std::move(pre)));
  }
  Op bwd = base_op(OpKind::kBackward, Stream::kCompute);
  bwd.tp_degree = tp;
  bwd.flops = BackwardFlops(v, m) / tp;
  const double work = WorkBackward(v, m);
  const double input_grad = v > 0 ? act : 0;
  const double output_grad = v + 1 < num_vstages_ ? act : 0;
  const double full_grads = RankParams(v) * grad_bytes_;
  bwd.device_alloc_bytes = work + input_grad;
  if (plan_.zero_stage >= 2 && !grads_allocated_[{r, v}]) {
    bwd.device_alloc_bytes += full_grads;
    grads_allocated_[{r, v}] = true;
  }
  bwd.device_free_bytes = work + act + SavedExtra(v, m) + output_grad;
  bwd.deps = deps;
  bwd.reads = {Buf(BufferKind::kParams, v), Buf(BufferKind::kSaved, v, m)};
  if (v + 1 < num_vstages_) bwd.reads.push_back(Buf(BufferKind::kOutputGrad, v, m));
  bwd.frees = {bwd.reads.begin() + 1, bwd.reads.end()};
  bwd.writes.push_back(Buf(BufferKind::kGrads, v));
  if (v > 0) {
    const bool kept_here = RankOf(v - 1, m) <= r && r < RankOf(v - 1, m) + Tp(vstages_[v - 1].group);
    if (kept_here || !peers_out(v - 1).empty()) bwd.writes.push_back(Buf(BufferKind::kOutputGrad, v - 1, m));
  }
  if (auto it = forward_op_.find({r, key}); it != forward_op_.end()) bwd.deps.push_back(it->second);
  // The gradient buffer is reused: the previous microbatch's reduction must have read it. And at
  // most two gradient buffers are in flight: wait for the reduction before the latest one.
  if (auto it = last_reduce_.find({r, v}); it != last_reduce_.end()) {
    bwd.deps.push_back(it->second);
    last_reduce_.erase(it);
  }
  if (policy_.reduce_per_microbatch && reduce_ops_[r].size() >= 2)
    bwd.deps.push_back(reduce_ops_[r][reduce_ops_[r].size() - 2]);
  const int b = Emit(r, std::move(bwd));
  bwd_list.push_back(b);
  last_compute_[{r, v}] = b;
  tp_allreduce(b);
  if (v > 0) {
    const std::vector<int> peers = peers_out(v - 1);
    const bool kept_here = RankOf(v - 1, m) <= r && r < RankOf(v - 1, m) + Tp(vstages_[v - 1].group);
    std::vector<int32_t> sent;
    for (size_t i = 0; i < peers.size(); ++i) {
      Op send = base_op(OpKind::kSend, Stream::kComm);
      send.peer = peers[i];
      send.tag = Tag(true, v - 1, m);
      send.bytes = act;
      send.device_free_bytes = (i + 1 == peers.size() && !kept_here) ? act : 0;
      send.reads.push_back(Buf(BufferKind::kOutputGrad, v - 1, m));
      send.deps.push_back(b);
      if (send.device_free_bytes > 0) {  // the last use: after the other sends of it
        send.frees = send.reads;
        send.deps.insert(send.deps.end(), sent.begin(), sent.end());
      }
      sent.push_back(Emit(r, std::move(send)));
    }
    if (peers.empty() && !kept_here) s_.programs[r].ops[b].device_alloc_bytes -= input_grad;
  }
}

Result<Schedule> Lowerer::Run() {
  MOTLEY_RETURN_IF_ERROR(Setup());
  const int num_groups = static_cast<int>(plan_.groups.size());

  // Static memory per rank.
  for (int g = 0; g < num_groups; ++g) {
    const int d = DpDegree(g);
    double device = 0, host = 0;
    for (int v = 0; v < num_vstages_; ++v) {
      if (vstages_[v].group != g) continue;
      const double p = RankParams(v);
      const double sharded_or_full = plan_.zero_stage == 0 ? p : p / d;
      if (policy_.offload_params && !Resident(v)) {
        host += p / d * (param_bytes_ + opt_bytes_);
        continue;
      }
      if (policy_.offload_params) {  // resident: its shard and moments; full parameters per visit
        device += p / d * (param_bytes_ + opt_bytes_);
        continue;
      }
      device += (plan_.zero_stage == 3 ? p / d : p) * param_bytes_;
      device += (plan_.zero_stage >= 2 ? p / d : p) * grad_bytes_;
      device += sharded_or_full * opt_bytes_;
    }
    for (int r : group_ranks_[g]) {
      s_.programs[r].static_device_bytes = device;
      s_.programs[r].static_host_bytes = host;
    }
  }

  if (policy_.data_parallel) {
    // Devices advance in step by microbatch index; collectives per index when the ZeRO stage asks.
    int64_t max_index =
        local_index_.empty() ? 0 : *std::max_element(local_index_.begin(), local_index_.end()) + 1;
    int visit = 0;  // numbers the gathers, so that at most two ministages are gathered at a time
    for (int64_t k = 0; k < max_index; ++k) {
      std::vector<int64_t> ms;
      for (int64_t m = 0; m < num_mb_; ++m)
        if (local_index_[m] == k) ms.push_back(m);
      // The visits of this index: forward through the ministages, then backward. With ZeRO-3 the
      // next visit's parameters are gathered while this one computes (at most two gathered); the
      // last ministage turns around with its parameters in place.
      std::vector<std::pair<bool, int>> visits;
      for (int v = 0; v < num_vstages_; ++v) visits.push_back({false, v});
      for (int v = num_vstages_ - 1; v >= 0; --v) visits.push_back({true, v});
      const int first_visit = visit;
      auto continues = [&](size_t i) {  // visit i is the turn-around of visit i - 1
        return i > 0 && visits[i].first && !visits[i - 1].first && visits[i].second == visits[i - 1].second;
      };
      auto prepare = [&](size_t i) {
        const auto [backward, v] = visits[i];
        visit_number_[{0, (backward ? num_vstages_ : 0) + v}] = first_visit + static_cast<int>(i);
        if (!continues(i)) EmitVisitPrepare(0, v, backward);
      };
      if (policy_.gather_per_microbatch) prepare(0);
      for (size_t i = 0; i < visits.size(); ++i) {
        const auto [backward, v] = visits[i];
        if (policy_.gather_per_microbatch && i + 1 < visits.size()) prepare(i + 1);
        for (int64_t m : ms) EmitTask({backward, v, m});
        if (!backward) {
          if (policy_.gather_per_microbatch && !continues(i + 1)) EmitFinishForward(0, v);
          continue;
        }
        if (policy_.gather_per_microbatch) {
          const int number = first_visit + static_cast<int>(i);
          for (int r : group_ranks_[0]) {
            auto lc = last_compute_.find({r, v});
            int release = lc != last_compute_.end() ? lc->second : gather_op_[{r, v}];
            s_.programs[r].ops[release].device_free_bytes += RankParams(v) * param_bytes_;
            s_.programs[r].ops[release].frees.push_back(Buf(BufferKind::kParams, v));
            release_op_[{r, number}] = release;
          }
        }
        if (policy_.reduce_per_microbatch) {
          // Gradients of this microbatch; the optimizer steps once, after the last one.
          if (k + 1 < max_index) {
            const double full = RankParams(v) * grad_bytes_;
            std::vector<int> ops = EmitCollective(OpKind::kReduceScatter, 0, v, full);
            for (size_t i = 0; i < ops.size(); ++i) {
              const int r = group_ranks_[0][i];
              Op& op = s_.programs[r].ops[ops[i]];
              if (auto lc = last_compute_.find({r, v}); lc != last_compute_.end())
                op.deps.push_back(lc->second);
              // A device without a microbatch at this index contributes zeros.
              op.reads.push_back(Buf(BufferKind::kGrads, v));
              op.writes.push_back(Buf(BufferKind::kGradShard, v));
              if (!grads_allocated_[{r, v}]) {
                op.device_alloc_bytes = full;
                op.writes.push_back(Buf(BufferKind::kGrads, v));
              }
              op.device_free_bytes = full;
              op.frees.push_back(Buf(BufferKind::kGrads, v));
              AddGlooReduceScatterBuffer(op, full, group_ranks_[0].size());
              grads_allocated_[{r, v}] = false;
              last_reduce_[{r, v}] = ops[i];
              reduce_ops_[r].push_back(ops[i]);
            }
          } else {
            EmitReduceAndStep(0, v);
          }
        } else if (k + 1 == max_index) {
          EmitReduceAndStep(0, v);
        }
        for (int r : group_ranks_[0]) gather_op_.erase({r, v});
      }
      visit = first_visit + static_cast<int>(visits.size());
    }
  } else {
    // Visits and where their preparation and finish go in the global order.
    std::vector<Task> order = PipelineOrder(plan_, vstages_, num_mb_, routing_rank_);
    std::vector<std::vector<std::pair<bool, int>>> visits(num_groups);  // per group, in order
    std::map<std::pair<int, int>, std::pair<size_t, size_t>> span;  // (g, pass*V+v) -> first, last position
    for (size_t i = 0; i < order.size(); ++i) {
      const Task& t = order[i];
      const int g = vstages_[t.v].group;
      const int key = (t.backward ? 1 : 0) * num_vstages_ + t.v;
      auto [it, inserted] = span.try_emplace({g, key}, i, i);
      if (inserted) {
        visit_number_[{g, key}] = static_cast<int>(visits[g].size());
        visits[g].push_back({t.backward, t.v});
      }
      it->second.second = i;
    }
    std::vector<std::vector<std::tuple<bool, int, bool>>> prepare_at(
        order.size() + 1);  // before position: (bwd, g*V+v, continuation)
    std::vector<std::vector<std::pair<int, int>>> finish_after(order.size());  // after position: (g, key)
    for (int g = 0; g < num_groups; ++g) {
      for (size_t k = 0; k < visits[g].size(); ++k) {
        const auto [backward, v] = visits[g][k];
        const int key = (backward ? 1 : 0) * num_vstages_ + v;
        // The last ministage turns around: its backward follows its forward with parameters in place.
        const bool continuation =
            k > 0 && backward && !visits[g][k - 1].first && visits[g][k - 1].second == v;
        const bool continued =
            k + 1 < visits[g].size() && !backward && visits[g][k + 1].first && visits[g][k + 1].second == v;
        if (policy_.gather_per_visit || (policy_.gather_once && !backward)) {
          // Prefetch the next visit while the current one computes: right after its first task.
          size_t at = 0;
          if (k > 0 && policy_.gather_per_visit) {
            const auto [pb, pv] = visits[g][k - 1];
            at = span[{g, (pb ? 1 : 0) * num_vstages_ + pv}].first + 1;
          }
          if (!continuation || policy_.offload_params)
            prepare_at[at].push_back({backward, g * num_vstages_ + v, continuation});
        }
        if (backward || (policy_.gather_per_visit && !continued))
          finish_after[span[{g, key}].second].push_back({g, key});
      }
    }
    for (size_t i = 0; i <= order.size(); ++i) {
      for (const auto& [backward, gv, continuation] : prepare_at[i])
        EmitVisitPrepare(gv / num_vstages_, gv % num_vstages_, backward, continuation);
      if (i == order.size()) break;
      EmitTask(order[i]);
      for (const auto& [g, key] : finish_after[i]) {
        const bool backward = key >= num_vstages_;
        const int v = key % num_vstages_;
        if (backward) {
          EmitFinishBackward(g, v);
        } else {
          EmitFinishForward(g, v);
        }
      }
    }
  }

  if (plan_.gradient_clipping) HoldUpdatesForTheNorm();
  AddBufferDeps();
  MarkCompleteGradients();
  DescribeState();

  s_.seq_len = plan_.seq_len;
  s_.global_batch_tokens = plan_.global_batch_tokens();
  s_.model_flops_per_step = TrainFlopsPerToken(model_, plan_.seq_len, false) * plan_.global_batch_tokens();
  for (const auto& p : s_.programs)
    for (const auto& op : p.ops)
      if (op.kind == OpKind::kForward || op.kind == OpKind::kBackward) s_.hardware_flops_per_step += op.flops;
  std::string problem = CheckSchedule(s_);
  MOTLEY_CHECK_MSG(problem.empty(), problem);
  return std::move(s_);
}

}  // namespace

// Gradient clipping (Plan::gradient_clipping): an update needs the global gradient norm, and the
// norm needs every gradient. On each rank the optimizer steps — and the all-gathers and parameter
// offloads that follow an update of the same ministage — move, in their order, after one
// kGradNorm collective over every rank that waits for the rank's gradient reductions. Ops that
// waited for a held one only to bound memory (a prefetch after another ministage's offload: the
// residency bound) no longer wait: the bound holds until the updates, not through them.
void Lowerer::HoldUpdatesForTheNorm() {
  std::vector<int> everyone;
  for (size_t r = 0; r < s_.programs.size(); ++r) everyone.push_back(static_cast<int>(r));
  const int norm_collective = NewCollective(OpKind::kGradNorm, everyone, 2 * sizeof(double));  // loss, norm^2
  for (Program& p : s_.programs) {
    const size_t n = p.ops.size();
    std::vector<bool> held(n, false);
    for (size_t i = 0; i < n; ++i) {
      const Op& op = p.ops[i];
      bool hold = op.kind == OpKind::kOptimizerStep;
      if (op.kind == OpKind::kAllGather || op.kind == OpKind::kParamOffload)
        for (int d : op.deps) hold = hold || (held[d] && p.ops[d].layer_begin == op.layer_begin);
      held[i] = hold;
    }
    Op norm;
    norm.kind = OpKind::kGradNorm;
    norm.stream = Stream::kComm;
    norm.collective = norm_collective;
    norm.bytes = 2 * sizeof(double);
    for (int v = 0; v < num_vstages_; ++v)  // the reduced gradients of every ministage of the rank
      if (vstages_[v].group == group_of_rank_[p.rank])
        norm.reads.push_back(Buf(plan_.zero_stage == 0 ? BufferKind::kGrads : BufferKind::kGradShard, v));
    for (size_t i = 0; i < n; ++i)
      if (p.ops[i].kind == OpKind::kOptimizerStep)
        for (int d : p.ops[i].deps)
          if (!held[d]) norm.deps.push_back(d);  // the reduced gradients
    std::vector<int> index(n);
    std::vector<size_t> order;
    for (size_t i = 0; i < n; ++i)
      if (!held[i]) order.push_back(i);
    const int norm_at = static_cast<int>(order.size());
    for (size_t i = 0; i < n; ++i)
      if (held[i]) order.push_back(i);
    for (size_t k = 0; k < order.size(); ++k) index[order[k]] = static_cast<int>(k < static_cast<size_t>(norm_at) ? k : k + 1);
    auto remap = [&](const std::vector<int32_t>& deps, bool keep_held) {
      std::vector<int32_t> out;
      for (int d : deps)
        if (keep_held || !held[d]) out.push_back(index[d]);
      std::sort(out.begin(), out.end());
      out.erase(std::unique(out.begin(), out.end()), out.end());
      return out;
    };
    std::vector<Op> ops;
    ops.reserve(n + 1);
    for (size_t k = 0; k < order.size(); ++k) {
      if (static_cast<int>(k) == norm_at) {
        norm.deps = remap(norm.deps, false);
        ops.push_back(norm);
      }
      Op op = p.ops[order[k]];
      op.deps = remap(op.deps, held[order[k]]);
      if (op.kind == OpKind::kOptimizerStep) {
        op.deps.push_back(norm_at);
        std::sort(op.deps.begin(), op.deps.end());
      }
      ops.push_back(std::move(op));
    }
    if (norm_at == static_cast<int>(order.size())) {  // nothing held (a rank without updates)
      norm.deps = remap(norm.deps, false);
      ops.push_back(norm);
    }
    p.ops = std::move(ops);
  }
}

void Lowerer::AddBufferDeps() {
  for (Program& p : s_.programs) {
    std::map<Buffer, int> writer;
    std::map<Buffer, std::vector<int>> readers;
    for (int j = 0; j < static_cast<int>(p.ops.size()); ++j) {
      Op& op = p.ops[j];
      for (const Buffer& b : op.reads)
        if (auto w = writer.find(b); w != writer.end()) op.deps.push_back(w->second);
      for (const Buffer& b : op.writes) {
        if (auto w = writer.find(b); w != writer.end()) op.deps.push_back(w->second);
        for (int k : readers[b]) op.deps.push_back(k);
      }
      std::sort(op.deps.begin(), op.deps.end());
      op.deps.erase(std::unique(op.deps.begin(), op.deps.end()), op.deps.end());
      for (const Buffer& b : op.reads) readers[b].push_back(j);
      for (const Buffer& b : op.writes) {
        writer[b] = j;
        readers[b].clear();
      }
      // A buffer is one slot: writing it anew waits for the op that freed it (and its readers).
      for (const Buffer& b : op.frees) writer[b] = j;
    }
  }
}

void Lowerer::MarkCompleteGradients() {
  for (Program& p : s_.programs) {
    for (size_t i = 0; i < p.ops.size(); ++i) {
      if (p.ops[i].kind != OpKind::kBackward) continue;
      const int v = p.ops[i].ministage;
      bool complete = true;  // nothing after it on this rank: the step ends
      for (size_t j = i + 1; j < p.ops.size(); ++j) {
        const Op& next = p.ops[j];
        const auto reads_grads = std::any_of(next.reads.begin(), next.reads.end(), [&](const Buffer& b) {
          return b.ministage == v && (b.kind == BufferKind::kGrads || b.kind == BufferKind::kGradShard);
        });
        if (reads_grads) break;
        if (next.kind == OpKind::kBackward && next.ministage == v) {
          complete = false;
          break;
        }
      }
      p.ops[i].gradients_complete = complete;
    }
  }
}

void Lowerer::DescribeState() {
  s_.microbatch_sequences = sequences_;
  s_.sharded_optimizer = plan_.zero_stage >= 1;
  s_.sharded_params = plan_.zero_stage == 3 || plan_.offload_params;
  s_.activation_checkpointing = plan_.activation_checkpointing;
  for (int v = 0; v < num_vstages_; ++v) {
    const int g = vstages_[v].group;
    ScheduleMinistage m;
    m.group = g;
    m.index = vstages_[v].ministage;
    m.layer_begin = vstages_[v].layers.begin;
    m.layer_end = vstages_[v].layers.end;
    m.embedding = m.layer_begin == 0;
    m.head = m.layer_end == model_.num_layers;
    m.first_rank = group_ranks_[g].front();
    m.num_ranks = static_cast<int32_t>(group_ranks_[g].size());
    m.tp_degree = Tp(g);
    s_.ministages.push_back(m);
  }
  for (Program& p : s_.programs) {
    const int g = group_of_rank_[p.rank];
    const int at = p.rank - group_ranks_[g].front();
    p.group = g;
    p.tp_index = at % Tp(g);
    p.dp_index = at / Tp(g);
    p.dp_size = DpDegree(g);
    for (int v = 0; v < num_vstages_; ++v) {
      if (vstages_[v].group != g) continue;
      const bool on_host = policy_.offload_params && !Resident(v);  // between visits
      if (!s_.sharded_params) p.resident.push_back(Buf(BufferKind::kParams, v));
      if (plan_.zero_stage >= 1 && !on_host) p.resident.push_back(Buf(BufferKind::kShard, v));
      if (!on_host) p.resident.push_back(Buf(BufferKind::kMoments, v));
      if (plan_.zero_stage <= 1) p.resident.push_back(Buf(BufferKind::kGrads, v));
      if (plan_.zero_stage >= 1 && !policy_.offload_params) p.resident.push_back(Buf(BufferKind::kGradShard, v));
    }
  }
}

Result<Schedule> LowerPlan(const Plan& plan, const Cluster& cluster, const ModelSpec& model) {
  return Lowerer(plan, cluster, model).Run();
}

}  // namespace motley
