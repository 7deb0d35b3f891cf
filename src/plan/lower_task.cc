// One task (a ministage's forward or backward on a microbatch) on the ranks that run it: its
// receives, compute, activation copies, sends and tensor-parallel all-reduces.
#include <algorithm>
#include <cstdint>
#include <map>
#include <tuple>
#include <vector>

#include "core/check.h"
#include "plan/lowerer.h"

namespace motley::lowering {

void Lowerer::EmitTask(const Task& t) {
  const int leader = RankOf(t.v, t.m);
  if (Dropped(leader)) return;  // its program will be another's (PredictAlikeRanks)
  const int tp = Tp(ministages_[t.v].group);
  int collective = -1;
  if (tp > 1) {
    // Megatron-style: two all-reduces of the activations per layer (attention, MLP) in each pass —
    // a backward with recomputation runs the forward's again before its own. Each is a call of
    // its own (a latency each), inside the compute op at run time.
    const bool recompute = t.backward && plan_.activation_checkpointing;
    const LayerRange& layers = ministages_[t.v].layers;
    int calls = 2 * (recompute ? 2 : 1) * layers.size();
    double bytes = calls * Act(t.m);
    // The vocabulary split (runtime/model/tensor_parallel.h): the embedding's lookups are summed
    // where it runs forward (again in a checkpointed backward); the loss gathers each rank's three
    // figures a token wherever it is computed (a forward, a backward); the head's input gradient is
    // summed in backward.
    if (layers.begin == 0 && (!t.backward || recompute)) {
      calls += 1;
      bytes += Act(t.m);
    }
    if (layers.end == model_.num_layers) {
      calls += t.backward ? 2 : 1;
      bytes += 3.0 * Tokens(t.m) * sizeof(double) * tp + (t.backward ? Act(t.m) : 0);
    }
    collective = NewCollective(OpKind::kAllReduce, Members(leader), bytes);
    s_.collectives[collective].tensor_parallel = true;
    s_.collectives[collective].calls = calls;
  }
  tp_collective_ = collective;
  for (int k = 0; k < tp; ++k) EmitTaskOnRank(t, leader + k, k);
}

Op Lowerer::TaskOp(const TaskOnRank& c, OpKind kind, Stream stream) const {
  const PlacedMinistage& vs = ministages_[c.v];
  Op op = StageOp(kind, stream, c.v);
  op.embedding = vs.layers.begin == 0;
  op.head = vs.layers.end == model_.num_layers;
  op.microbatch = static_cast<int32_t>(c.m);
  op.sequences = sequences_[c.m];
  return op;
}

// Every rank of the receiving run gets the whole activation from the sending run's rank with the
// same index modulo its size.
int Lowerer::PeerIn(const TaskOnRank& c, int other_v) const {
  return RankOf(other_v, c.m) + c.k % Tp(ministages_[other_v].group);
}

std::vector<int> Lowerer::PeersOut(const TaskOnRank& c, int other_v) const {
  std::vector<int> out;
  for (int kk = 0; kk < Tp(ministages_[other_v].group); ++kk)
    if (kk % c.tp == c.k && RankOf(other_v, c.m) + kk != c.r) out.push_back(RankOf(other_v, c.m) + kk);
  return out;
}

bool Lowerer::KeptHere(const TaskOnRank& c, int other_v) const {
  return RankOf(other_v, c.m) <= c.r && c.r < RankOf(other_v, c.m) + Tp(ministages_[other_v].group);
}

void Lowerer::EmitTensorParallelAllReduce(const TaskOnRank& c, int compute_op) {
  if (tp_collective_ < 0) return;
  Op op = TaskOp(c, OpKind::kAllReduce, Stream::kComm);
  op.bytes = s_.collectives[tp_collective_].bytes;
  op.collective = tp_collective_;
  op.deps.push_back(compute_op);
  pending_tp_allreduce_[c.r] = Emit(c.r, std::move(op));
}

// The boundary ministage `from_v`'s run sends this task (its input, or its output's gradient).
int Lowerer::EmitReceive(const TaskOnRank& c, int from_v, bool backward, BufferKind kind) {
  Op recv = TaskOp(c, OpKind::kRecv, Stream::kComm);
  recv.peer = PeerIn(c, from_v);
  recv.tag = Tag(backward, c.v, c.m);
  recv.bytes = c.act;
  recv.device_alloc_bytes = c.act;
  recv.writes.push_back(Buf(kind, c.v, c.m));
  return Emit(c.r, std::move(recv));
}

// Every receiving rank gets its own copy; the boundary is freed after the last send (or kept for
// the ministage that runs here too). Where nobody downstream needs this rank's copy, the compute op
// never allocates it.
void Lowerer::EmitSends(const TaskOnRank& c, int other_v, bool backward, BufferKind kind, int after) {
  const std::vector<int> peers = PeersOut(c, other_v);
  const bool kept_here = KeptHere(c, other_v);
  std::vector<int32_t> sent;
  for (size_t i = 0; i < peers.size(); ++i) {
    Op send = TaskOp(c, OpKind::kSend, Stream::kComm);
    send.peer = peers[i];
    send.tag = Tag(backward, other_v, c.m);
    send.bytes = c.act;
    send.device_free_bytes = (i + 1 == peers.size() && !kept_here) ? c.act : 0;
    send.reads.push_back(Buf(kind, other_v, c.m));
    send.deps.push_back(after);
    if (send.device_free_bytes > 0) {  // the last use: after the other sends of it
      send.frees = send.reads;
      send.deps.insert(send.deps.end(), sent.begin(), sent.end());
    }
    sent.push_back(Emit(c.r, std::move(send)));
  }
  if (peers.empty() && !kept_here) s_.programs[c.r].ops[after].device_alloc_bytes -= c.act;
}

void Lowerer::EmitTaskOnRank(const Task& t, int r, int k) {
  const TaskOnRank c{
      t.v, t.m, r, k, Tp(ministages_[t.v].group), Act(t.m), static_cast<int64_t>(t.v) * num_mb_ + t.m};
  std::vector<int32_t> deps;
  if (gather_op_.has(r, t.v)) deps.push_back(gather_op_(r, t.v));
  if (pending_tp_allreduce_[r] >= 0) {
    deps.push_back(pending_tp_allreduce_[r]);
    pending_tp_allreduce_[r] = -1;
  }
  if (t.backward)
    EmitBackwardOnRank(c, std::move(deps));
  else
    EmitForwardOnRank(c, std::move(deps));
}

void Lowerer::EmitForwardOnRank(const TaskOnRank& c, std::vector<int32_t> deps) {
  const int v = c.v, r = c.r;
  const int64_t m = c.m;
  const double act = c.act;
  if (v > 0 && PeerIn(c, v - 1) != r)
    deps.push_back(EmitReceive(c, v - 1, /*backward=*/false, BufferKind::kInput));
  Op fwd = TaskOp(c, OpKind::kForward, Stream::kCompute);
  fwd.tp_degree = c.tp;
  fwd.flops = ForwardFlops(v, m) / c.tp;
  const double output = v + 1 < num_ministages_ ? act : 0;
  const double input = v == 0 ? act : 0;  // the embedding's output is made here
  const double work = WorkForward(v, m);
  fwd.device_alloc_bytes = work + SavedExtra(v, m) + output + input;
  fwd.device_free_bytes = work;
  fwd.deps.assign(deps.begin(), deps.end());
  // The input becomes the first saved boundary; the output is kept when a send or this rank's
  // next ministage takes it.
  fwd.reads.push_back(Buf(BufferKind::kParams, v));
  if (v > 0) {
    fwd.reads.push_back(Buf(BufferKind::kInput, v, m));
    fwd.frees.push_back(Buf(BufferKind::kInput, v, m));
  }
  fwd.writes.push_back(Buf(BufferKind::kSaved, v, m));
  if (v + 1 < num_ministages_ && (KeptHere(c, v + 1) || !PeersOut(c, v + 1).empty()))
    fwd.writes.push_back(Buf(BufferKind::kInput, v + 1, m));
  const int f = Emit(r, std::move(fwd));
  forward_op_(c.key, c.k) = f;
  last_compute_(r, v) = f;
  EmitTensorParallelAllReduce(c, f);
  if (plan_.offload_activations) {
    Op off = TaskOp(c, OpKind::kActOffload, Stream::kD2H);
    off.bytes = act + SavedExtra(v, m);
    off.device_free_bytes = off.bytes;
    off.host_alloc_bytes = off.bytes;
    off.reads = off.frees = {Buf(BufferKind::kSaved, v, m)};
    off.writes = {Buf(BufferKind::kHostSaved, v, m)};
    off.deps.push_back(f);
    act_offload_op_(c.key, c.k) = Emit(r, std::move(off));
  }
  if (v + 1 < num_ministages_) EmitSends(c, v + 1, /*backward=*/false, BufferKind::kInput, f);
}

void Lowerer::EmitBackwardOnRank(const TaskOnRank& c, std::vector<int32_t> deps) {
  const int v = c.v, r = c.r;
  const int64_t m = c.m;
  const double act = c.act;
  if (v + 1 < num_ministages_ && PeerIn(c, v + 1) != r)
    deps.push_back(EmitReceive(c, v + 1, /*backward=*/true, BufferKind::kOutputGrad));
  auto& bwd_list = backward_ops_[r];
  if (plan_.offload_activations) {
    Op pre = TaskOp(c, OpKind::kActPrefetch, Stream::kH2D);
    pre.bytes = act + SavedExtra(v, m);
    pre.device_alloc_bytes = pre.bytes;
    pre.host_free_bytes = pre.bytes;
    pre.reads = pre.frees = {Buf(BufferKind::kHostSaved, v, m)};
    pre.writes = {Buf(BufferKind::kSaved, v, m)};
    MOTLEY_CHECK(act_offload_op_.has(c.key, c.k));
    pre.deps.push_back(act_offload_op_(c.key, c.k));
    // One microbatch ahead: start when the backward two before this one has finished.
    if (bwd_list.size() >= 2) pre.deps.push_back(bwd_list[bwd_list.size() - 2]);
    deps.push_back(Emit(r, std::move(pre)));
  }
  Op bwd = TaskOp(c, OpKind::kBackward, Stream::kCompute);
  bwd.tp_degree = c.tp;
  bwd.flops = BackwardFlops(v, m) / c.tp;
  const double work = WorkBackward(v, m);
  const double input_grad = v > 0 ? act : 0;
  const double output_grad = v + 1 < num_ministages_ ? act : 0;
  const double full_grads = RankParams(v) * grad_bytes_;
  bwd.device_alloc_bytes = work + input_grad;
  if (plan_.zero_stage >= 2 && !grads_allocated_(r, v)) {
    bwd.device_alloc_bytes += full_grads;
    grads_allocated_(r, v) = true;
  }
  bwd.device_free_bytes = work + act + SavedExtra(v, m) + output_grad;
  bwd.deps.assign(deps.begin(), deps.end());
  bwd.reads = {Buf(BufferKind::kParams, v), Buf(BufferKind::kSaved, v, m)};
  if (v + 1 < num_ministages_) bwd.reads.push_back(Buf(BufferKind::kOutputGrad, v, m));
  bwd.frees = {bwd.reads.begin() + 1, bwd.reads.end()};
  bwd.writes.push_back(Buf(BufferKind::kGrads, v));
  if (v > 0 && (KeptHere(c, v - 1) || !PeersOut(c, v - 1).empty()))
    bwd.writes.push_back(Buf(BufferKind::kOutputGrad, v - 1, m));
  if (forward_op_.has(c.key, c.k)) bwd.deps.push_back(forward_op_(c.key, c.k));
  // The gradient buffer is reused: the previous microbatch's reduction must have read it. And at
  // most two gradient buffers are in flight: wait for the reduction before the latest one.
  if (last_reduce_.has(r, v)) {
    bwd.deps.push_back(last_reduce_(r, v));
    last_reduce_.erase(r, v);
  }
  if (policy_.reduce_per_microbatch && reduce_ops_[r].size() >= 2)
    bwd.deps.push_back(reduce_ops_[r][reduce_ops_[r].size() - 2]);
  const int b = Emit(r, std::move(bwd));
  bwd_list.push_back(b);
  last_compute_(r, v) = b;
  EmitTensorParallelAllReduce(c, b);
  if (v > 0) EmitSends(c, v - 1, /*backward=*/true, BufferKind::kOutputGrad, b);
}

}  // namespace motley::lowering
