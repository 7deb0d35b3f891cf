// A ministage's parameter and gradient traffic: bringing parameters in before a visit, dropping
// them after, the reduction, the optimizer step and what follows it.
#include <algorithm>
#include <cstdint>
#include <functional>
#include <map>
#include <tuple>
#include <utility>
#include <vector>

#include "core/check.h"
#include "plan/lowerer.h"

namespace motley::lowering {

// Before a visit to ministage v (a pass over its microbatches): bring the parameters in.
void Lowerer::EmitVisitPrepare(int g, int v, bool backward, bool continuation,
                               const std::vector<int>& ranks) {
  const double full = RankParams(v) * param_bytes_;
  const int key = (backward ? 1 : 0) * num_ministages_ + v;
  const int visit = visit_number_[{g, key}];
  // The backward visit brings the moments for the update that follows it, unless the update waits
  // for the global norm (then it brings them back itself: EmitReduceAndStep).
  const bool with_moments = backward && !StateReturnsForTheUpdate(v);
  // All the ranks at once: gathers of their own (data parallelism prepares a ministage again for
  // each microbatch); a few at a time: the visit's gathers, made by the first to emit.
  std::vector<int> own_gathers;
  std::vector<int>* gathers = ranks.empty() ? &own_gathers : &prepare_gathers_[{g, key}];
  for (const int r : ranks.empty() ? group_ranks_[g] : ranks) {
    int prefetch = -1;
    if (policy_.offload_params && !Resident(v) && (!continuation || with_moments)) {
      // (A continuation without moments: the parameters are still gathered, nothing to bring.)
      Op op = StageOp(OpKind::kParamPrefetch, Stream::kH2D, v);
      op.bytes = ShardOf(g, r, RankParams(v)) * (param_bytes_ + (with_moments ? opt_bytes_ : 0));
      op.device_alloc_bytes = op.bytes;
      op.writes.push_back(Buf(BufferKind::kShard, v));
      if (with_moments) op.writes.push_back(Buf(BufferKind::kMoments, v));
      // At most two ministages resident: wait until the one two visits back is gone.
      if (auto it = release_op_.find({r, visit - 2}); it != release_op_.end()) op.deps.push_back(it->second);
      prefetch = Emit(r, std::move(op));
    }
    if (continuation) continue;
    const int gather = EmitCollectiveOnRank(OpKind::kAllGather, g, v, full, r, gathers);
    Op& op = s_.programs[r].ops[gather];
    op.device_alloc_bytes = full;
    op.reads.push_back(Buf(BufferKind::kShard, v));
    op.writes.push_back(Buf(BufferKind::kParams, v));
    if (prefetch >= 0) {
      op.deps.push_back(prefetch);
      if (!with_moments) {  // the shard is not needed after the gather
        op.device_free_bytes = ShardOf(g, r, RankParams(v)) * param_bytes_;
        op.frees.push_back(Buf(BufferKind::kShard, v));
      }
    } else if (auto it = release_op_.find({r, visit - 2}); it != release_op_.end()) {
      op.deps.push_back(it->second);
    }
    gather_op_(r, v) = gather;
    last_compute_.erase(r, v);
  }
}

// After the forward visit: drop the gathered parameters (after the last compute that used them).
void Lowerer::EmitFinishForward(int g, int v) {
  const double full = RankParams(v) * param_bytes_;
  const int visit = visit_number_[{g, v}];
  for (int r : group_ranks_[g]) {
    const int release = last_compute_.has(r, v) ? last_compute_(r, v) : gather_op_(r, v);
    MOTLEY_CHECK(release >= 0);
    s_.programs[r].ops[release].device_free_bytes += full;
    s_.programs[r].ops[release].frees.push_back(Buf(BufferKind::kParams, v));
    release_op_[{r, visit}] = release;
  }
}

// Gradient reduction, the sharded optimizer step and what follows it, for ministage v.
void Lowerer::EmitReduceAndStep(int g, int v) {
  const int d = DpDegree(g);
  const double params = RankParams(v);
  const double full_grads = params * grad_bytes_;
  const OpKind reduce = plan_.zero_stage == 0 ? OpKind::kAllReduce : OpKind::kReduceScatter;
  std::vector<int> ops = EmitCollective(reduce, g, v, full_grads);
  for (size_t i = 0; i < ops.size(); ++i) {
    const int r = group_ranks_[g][i];
    const double shard = plan_.zero_stage == 0 ? params : ShardOf(g, r, params);
    reduce_ops_[r].push_back(ops[i]);
    Op& op = s_.programs[r].ops[ops[i]];
    if (last_compute_.has(r, v)) op.deps.push_back(last_compute_(r, v));
    op.reads.push_back(Buf(BufferKind::kGrads, v));
    // ZeRO-0 reduces in place; ZeRO-1 clears the full gradients after; ZeRO >= 2 frees them.
    if (plan_.zero_stage <= 1) op.writes.push_back(Buf(BufferKind::kGrads, v));
    if (plan_.zero_stage >= 1) op.writes.push_back(Buf(BufferKind::kGradShard, v));
    if (plan_.zero_stage >= 2) {
      // The full gradient buffer goes away once reduced; the shard stays.
      if (!grads_allocated_(r, v)) {  // a device with no microbatch contributes zeros
        op.device_alloc_bytes = full_grads;
        op.writes.push_back(Buf(BufferKind::kGrads, v));
      }
      op.device_free_bytes = full_grads;
      op.frees.push_back(Buf(BufferKind::kGrads, v));
      grads_allocated_(r, v) = false;
    }
    if (reduce == OpKind::kReduceScatter) CountReduceOutput(op, r, v, shard * grad_bytes_, d);
    if (reduce == OpKind::kReduceScatter) AddGlooReduceScatterBuffer(op, g, r, full_grads);
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
    if (StateReturnsForTheUpdate(v)) {  // the shard and moments come back for the update
      Op back = StageOp(OpKind::kParamPrefetch, Stream::kH2D, v);
      back.bytes = shard * (param_bytes_ + opt_bytes_);
      back.device_alloc_bytes = back.bytes;
      back.writes = {Buf(BufferKind::kShard, v), Buf(BufferKind::kMoments, v)};
      step.deps.push_back(Emit(r, std::move(back)));
    }
    if (policy_.offload_params) {
      step.device_free_bytes = shard * grad_bytes_;
      step.frees.push_back(grads);
    }
    const int step_op = Emit(r, std::move(step));
    last_compute_(r, v) = step_op;
  }
  if (plan_.zero_stage == 1 || (plan_.zero_stage == 2 && !policy_.offload_params)) {
    // Replicated parameters: gather the updated shards.
    std::vector<int> gathers = EmitCollective(OpKind::kAllGather, g, v, params * param_bytes_);
    for (size_t i = 0; i < gathers.size(); ++i) {
      const int r = group_ranks_[g][i];
      Op& op = s_.programs[r].ops[gathers[i]];
      MOTLEY_CHECK(last_compute_.has(r, v));
      op.deps.push_back(last_compute_(r, v));
      op.reads.push_back(Buf(BufferKind::kShard, v));
      op.writes.push_back(Buf(BufferKind::kParams, v));
    }
  }
}

void Lowerer::EmitFinishBackward(int g, int v) {
  const double params = RankParams(v);
  const bool sharded = policy_.gather_per_visit || policy_.gather_once;
  // With sharded parameters the full ones go after the visit's last backward (the optimizer step
  // updates the shard, not them) — so gradient clipping, which holds the steps until the global
  // norm, does not hold every ministage's full parameters with them.
  std::map<int, int> last_use;
  for (int r : group_ranks_[g]) {
    last_use[r] = last_compute_.has(r, v) ? last_compute_(r, v) : gather_op_(r, v);
  }
  const int visit = visit_number_[{g, num_ministages_ + v}];
  for (int r : group_ranks_[g]) {
    if (!sharded) continue;
    s_.programs[r].ops[last_use[r]].device_free_bytes += params * param_bytes_;
    s_.programs[r].ops[last_use[r]].frees.push_back(Buf(BufferKind::kParams, v));
    release_op_[{r, visit}] = last_use[r];
  }
  if (policy_.reduce_per_microbatch) return;
  ReduceAfterTiedSum(v, [this, g, v, params, sharded, visit] {
    EmitReduceAndStep(g, v);
    for (int r : group_ranks_[g]) {
      if (!sharded || !policy_.offload_params || Resident(v)) continue;
      // The updated shard and moments go back to the host.
      Op off = StageOp(OpKind::kParamOffload, Stream::kD2H, v);
      off.bytes = ShardOf(g, r, params) * (param_bytes_ + opt_bytes_);
      off.device_free_bytes = off.bytes;
      off.reads = {Buf(BufferKind::kShard, v), Buf(BufferKind::kMoments, v)};
      off.frees = off.reads;
      MOTLEY_CHECK(last_compute_.has(r, v));
      off.deps.push_back(last_compute_(r, v));  // the update
      release_op_[{r, visit}] = Emit(r, std::move(off));
    }
  });
}

void Lowerer::ReduceAfterTiedSum(int v, std::function<void()> reduce) {
  if (!HoldsTiedCopy(v)) {
    reduce();
    return;
  }
  held_reduction_[v == 0 ? 0 : 1] = std::move(reduce);
  if (!held_reduction_[0] || !held_reduction_[1]) return;
  EmitTiedGradSum();
  std::exchange(held_reduction_[1], nullptr)();
  std::exchange(held_reduction_[0], nullptr)();
}

// The tied copies' gradients summed (Collective::tied_embedding): on each rank of one group that
// holds both ministages, alone; across two groups, by the ranks of the same place in their
// tensor-parallel teams (each holds the same vocabulary rows). After the last backward of each
// copy's ministage; the reductions wait for it.
void Lowerer::EmitTiedGradSum() {
  const int e = 0, h = num_ministages_ - 1;
  const int ge = ministages_[e].group, gh = ministages_[h].group;
  const int tp = Tp(gh);
  MOTLEY_CHECK(ge == gh || Tp(ge) == tp);  // ValidatePlan
  const double bytes = EmbeddingParamsPerRank(model_, tp) * grad_bytes_;
  std::vector<std::vector<int>> sets;
  if (ge == gh) {
    for (int r : group_ranks_[ge]) sets.push_back({r});
  } else {
    for (int k = 0; k < tp; ++k) {
      sets.emplace_back();
      for (int g : {ge, gh})
        for (int r : group_ranks_[g])
          if ((r - group_ranks_[g].front()) % tp == k) sets.back().push_back(r);
    }
  }
  for (const std::vector<int>& members : sets) {
    const int c = NewCollective(OpKind::kAllReduce, members, bytes);
    s_.collectives[c].tied_embedding = true;
    for (int r : members) {
      Op op = StageOp(OpKind::kAllReduce, Stream::kComm, group_of_rank_[r] == ge ? e : h);
      op.embedding = true;
      op.head = true;
      op.bytes = bytes;
      op.collective = c;
      for (int u : {e, h}) {
        if (ministages_[u].group != group_of_rank_[r]) continue;
        if (last_compute_.has(r, u)) op.deps.push_back(last_compute_(r, u));
        op.reads.push_back(Buf(BufferKind::kGrads, u));
        op.writes.push_back(Buf(BufferKind::kGrads, u));
        if (plan_.zero_stage >= 2 && !grads_allocated_(r, u)) {  // no microbatch here: zeros
          op.device_alloc_bytes += RankParams(u) * grad_bytes_;
          grads_allocated_(r, u) = true;
        }
      }
      const int i = Emit(r, std::move(op));
      for (int u : {e, h})
        if (ministages_[u].group == group_of_rank_[r]) last_compute_(r, u) = i;
    }
  }
}

}  // namespace motley::lowering
