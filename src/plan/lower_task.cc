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

void Lowerer::EmitTaskOnRank(const Task& t, int r, int k) {
  const int v = t.v;
  const int64_t m = t.m;
  const PlacedMinistage& vs = ministages_[v];
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
  auto peer_in = [&](int other_v) { return RankOf(other_v, m) + k % Tp(ministages_[other_v].group); };
  auto peers_out = [&](int other_v) {
    std::vector<int> out;
    for (int kk = 0; kk < Tp(ministages_[other_v].group); ++kk)
      if (kk % tp == k && RankOf(other_v, m) + kk != r) out.push_back(RankOf(other_v, m) + kk);
    return out;
  };
  std::vector<int32_t> deps;
  if (gather_op_.has(r, v)) deps.push_back(gather_op_(r, v));
  if (pending_tp_allreduce_[r] >= 0) {
    deps.push_back(pending_tp_allreduce_[r]);
    pending_tp_allreduce_[r] = -1;
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
    if (v + 1 < num_ministages_) {
      const bool kept_here = RankOf(v + 1, m) <= r && r < RankOf(v + 1, m) + Tp(ministages_[v + 1].group);
      if (kept_here || !peers_out(v + 1).empty()) fwd.writes.push_back(Buf(BufferKind::kInput, v + 1, m));
    }
    const int f = Emit(r, std::move(fwd));
    forward_op_(key, k) = f;
    last_compute_(r, v) = f;
    tp_allreduce(f);
    if (plan_.offload_activations) {
      Op off = base_op(OpKind::kActOffload, Stream::kD2H);
      off.bytes = act + SavedExtra(v, m);
      off.device_free_bytes = off.bytes;
      off.host_alloc_bytes = off.bytes;
      off.reads = off.frees = {Buf(BufferKind::kSaved, v, m)};
      off.writes = {Buf(BufferKind::kHostSaved, v, m)};
      off.deps.push_back(f);
      act_offload_op_(key, k) = Emit(r, std::move(off));
    }
    if (v + 1 < num_ministages_) {
      const std::vector<int> peers = peers_out(v + 1);
      // Every receiving rank gets its own copy; the output is freed after the last send (or kept
      // for the next ministage when it runs here too).
      std::vector<int32_t> sent;
      for (size_t i = 0; i < peers.size(); ++i) {
        Op send = base_op(OpKind::kSend, Stream::kComm);
        send.peer = peers[i];
        send.tag = Tag(false, v + 1, m);
        send.bytes = act;
        const bool kept_here = RankOf(v + 1, m) <= r && r < RankOf(v + 1, m) + Tp(ministages_[v + 1].group);
        send.device_free_bytes = (i + 1 == peers.size() && !kept_here) ? act : 0;
        send.reads.push_back(Buf(BufferKind::kInput, v + 1, m));
        send.deps.push_back(f);
        if (send.device_free_bytes > 0) {  // the last use: after the other sends of it
          send.frees = send.reads;
          send.deps.insert(send.deps.end(), sent.begin(), sent.end());
        }
        sent.push_back(Emit(r, std::move(send)));
      }
      if (peers.empty() && !(RankOf(v + 1, m) <= r && r < RankOf(v + 1, m) + Tp(ministages_[v + 1].group))) {
        s_.programs[r].ops[f].device_alloc_bytes -= output;  // nobody downstream needs this rank's copy
      }
    }
    return;
  }

  // Backward.
  if (v + 1 < num_ministages_ && peer_in(v + 1) != r) {
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
    MOTLEY_CHECK(act_offload_op_.has(key, k));
    pre.deps.push_back(act_offload_op_(key, k));
    // One microbatch ahead: start when the backward two before this one has finished.
    if (bwd_list.size() >= 2) pre.deps.push_back(bwd_list[bwd_list.size() - 2]);
    deps.push_back(Emit(r, std::move(pre)));
  }
  Op bwd = base_op(OpKind::kBackward, Stream::kCompute);
  bwd.tp_degree = tp;
  bwd.flops = BackwardFlops(v, m) / tp;
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
  if (v > 0) {
    const bool kept_here = RankOf(v - 1, m) <= r && r < RankOf(v - 1, m) + Tp(ministages_[v - 1].group);
    if (kept_here || !peers_out(v - 1).empty()) bwd.writes.push_back(Buf(BufferKind::kOutputGrad, v - 1, m));
  }
  if (forward_op_.has(key, k)) bwd.deps.push_back(forward_op_(key, k));
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
  tp_allreduce(b);
  if (v > 0) {
    const std::vector<int> peers = peers_out(v - 1);
    const bool kept_here = RankOf(v - 1, m) <= r && r < RankOf(v - 1, m) + Tp(ministages_[v - 1].group);
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

}  // namespace motley::lowering
