// Executor::RunStep: one step of this rank's program — the ops in program order (Start), the
// tensors between them (boundaries, received activations and gradients, offloaded copies), the
// forward, the backward, the optimizer step, and the step's loss, gradient norm and memory report.
// Transfers and collectives: executor_transfers.cc; the step's clock: executor_clock.cc.
#include "runtime/executor/executor_step.h"

#include <cmath>
#include <limits>
#include <optional>

#include <fmt/format.h>

#include "runtime/device/cuda_device.h"
#include "runtime/emulation/memory_ledger.h"
#include "runtime/optim/adamw.h"

namespace motley {
using namespace step_run;

Result<RankStepReport> Executor::StepRun::Run() {
  std::optional<MemoryLedgerScope> scope;  // this rank's ledger, when it has one of its own
  if (ex_.config_.ledger != nullptr) scope.emplace(ex_.config_.ledger);
  MemoryLedger& ledger = MemoryLedger::Current();
  ledger.ResetPeak();
  const torch::Device device = ex_.config_.device;
  if (device.is_cuda()) ResetPeakDeviceMemory(device);
  loss_sum_ = torch::zeros({}, Float64());
  norm_sq_ = torch::zeros({}, Float64());
  inject_overflow_ = in_.faults.inject_overflow;
  start_ = Clock::now();
  device_timed_ = ex_.config_.record_trace && device.is_cuda();
  ex_.copies_->set_timed(device_timed_);
  if (device_timed_) origin_ = RecordTimingEvent(ex_.copies_->device());
  try {
    // The program as the lowering wrote it: with gradient clipping, its updates already wait
    // for the kGradNorm op (plan/lower.cc).
    ProgramWalker walker(prog_, this, &ex_.schedule_.collectives);
    struct Watch {  // the walker the compute ops poll while they run (PollInCompute)
      ProgramWalker** at;
      ~Watch() { *at = nullptr; }
    } watch{&walker_};
    walker_ = &walker;
    MOTLEY_RETURN_IF_ERROR(walker.Run());
    MOTLEY_RETURN_IF_ERROR(FinishSends());
    // Without clipping nothing needed them earlier: the loss and the squared gradient norm,
    // summed over ranks, for the report.
    if (!norm_known_) MOTLEY_RETURN_IF_ERROR(SumLossAndNorm());
  } catch (const c10::OutOfMemoryError& e) {
    return Status::OutOfMemory(fmt::format("rank {}: {}", ex_.rank_, e.what_without_backtrace()));
  }
  // The step's copies and kernels are done (on a GPU the host ran ahead of them).
  ex_.copies_->Synchronize();
  if (device.is_cuda()) SynchronizeDevice(device);
  if (!compute_spans_.empty()) {
    report_.compute_s = 0;
    for (const DeviceSpan& span : compute_spans_) report_.compute_s += EventSeconds(*span.start, *span.end);
  }
  if (device_timed_) {
    ex_.copies_->set_timed(false);
    for (size_t k = 0; k < report_.trace.size(); ++k) {
      report_.trace[k].host_start_s = report_.trace[k].start_s;
      report_.trace[k].host_end_s = report_.trace[k].end_s;
      report_.trace[k].start_s = EventSeconds(*origin_, *device_spans_[k].start);
      report_.trace[k].end_s = EventSeconds(*origin_, *device_spans_[k].end);
    }
  }
  if (!boundary_.empty() || !host_boundary_.empty() || !activations_.empty() || !recvs_.empty())
    return Status::Internal(
        fmt::format("rank {}: the step ended with tensors left between ops ({} boundaries, {} "
                    "offloaded, {} activations and gradients, {} receives)",
                    ex_.rank_, boundary_.size(), host_boundary_.size(), activations_.size(), recvs_.size()));
  report_.step_s = Since(start_);
  report_.peak_memory_bytes =
      static_cast<double>(device.is_cuda() ? PeakDeviceMemoryBytes(device) : ledger.peak_bytes());
  return std::move(report_);
}

const torch::Tensor& Executor::StepRun::Tokens(int64_t m) {
  auto it = tokens_.find(m);
  if (it == tokens_.end()) {
    torch::Tensor host = in_.tokens(ex_.microbatch_first_[m], Sequences(m));
    // On a GPU through pinned memory: the host does not wait for the queued kernels.
    if (ex_.config_.device.is_cuda()) host = host.pin_memory();
    it = tokens_.emplace(m, host.to(ex_.config_.device, /*non_blocking=*/true)).first;
  }
  return it->second;
}

torch::Tensor Executor::StepRun::Loss(const torch::Tensor& logits, int64_t m) {
  const int64_t seq = logits.size(1);
  double share = static_cast<double>(Sequences(m)) / static_cast<double>(ex_.batch_sequences_);
  if (in_.faults.loss_factor_microbatch < 0 || in_.faults.loss_factor_microbatch == m)
    share *= in_.faults.loss_factor;
  return ex_.model_->Loss(logits, Tokens(m).narrow(1, 1, seq)) * share;
}

torch::Tensor Executor::StepRun::BackwardLoss(const torch::Tensor& logits, int64_t m) {
  torch::Tensor loss = Loss(logits, m);
  return ex_.schedule_.loss_scaling ? loss * in_.loss_scale : loss;
}

Result<torch::Tensor> Executor::StepRun::Take(const Buffer& b) {
  if (auto it = recvs_.find(b); it != recvs_.end()) {
    const auto t = Clock::now();
    MOTLEY_RETURN_IF_ERROR(it->second.transfer.Wait());
    report_.comm_s += Since(t);
    torch::Tensor out = it->second.buffer;
    recvs_.erase(it);
    return out;
  }
  auto it = activations_.find(b);
  if (it == activations_.end())
    return Status::Internal(fmt::format("rank {}: no {}", ex_.rank_, BufferName(b)));
  torch::Tensor out = it->second;
  activations_.erase(it);
  return out;
}

Status Executor::StepRun::Free(const Buffer& b) {
  torch::NoGradGuard no_grad;
  if (b.kind == BufferKind::kParams) State(b.ministage).ReleaseFlat();
  if (b.kind == BufferKind::kShard) State(b.ministage).DropDeviceShard();  // an offloaded shard, gathered
  if (b.kind == BufferKind::kGradShard) State(b.ministage).ReleaseGradShard();  // updated, not kept
  return Status::Ok();
}

Result<bool> Executor::StepRun::Start(int index) {
  const size_t i = static_cast<size_t>(index);
  const Op& op = prog_.ops[i];
  if (op.kind == OpKind::kOptimizerStep)
    State(op.ministage).WaitReady(true);  // a prefetched shard and moments
  const auto t = Clock::now();
  const double op_start_s = Since(start_);
  // Waits for received data and the tensor-parallel all-reduces inside the op count as communication.
  const double comm_before_s = report_.comm_s + ex_.tp_clock_.host_s();
  if (IsCompute(op.kind) && ex_.emulation_.stretches()) segment_ = SegmentMark();
  // On a GPU the host only queues the kernels: the op's compute time is the device's, between
  // timing events on the compute stream (after the waits for its inputs queued above).
  std::shared_ptr<c10::Event> device_start;
  if (IsCompute(op.kind) && ex_.config_.device.is_cuda())
    device_start = RecordTimingEvent(ex_.copies_->device());
  switch (op.kind) {
    case OpKind::kForward:
      MOTLEY_RETURN_IF_ERROR(Forward(op));
      break;
    case OpKind::kBackward:
      MOTLEY_RETURN_IF_ERROR(Backward(op));
      break;
    case OpKind::kOptimizerStep:
      MOTLEY_RETURN_IF_ERROR(OptimizerStep(op));
      break;
    case OpKind::kGradNorm:  // its deps, the gradient reductions, are complete (above)
      for (const auto& [v, state] : ex_.ministages_) norm_sq_ += NormSquared(v);
      // Loss scaling: a rank whose gradients overflowed makes the sum non-finite on every rank
      // (whether or not its own elements count toward the norm), so every rank skips the step.
      if (ex_.schedule_.loss_scaling && !LocalGradientsFinite())
        norm_sq_ += std::numeric_limits<double>::infinity();
      MOTLEY_RETURN_IF_ERROR(SumLossAndNorm());
      break;
    case OpKind::kSend:
      MOTLEY_RETURN_IF_ERROR(Send(op));
      break;
    case OpKind::kRecv:
      MOTLEY_RETURN_IF_ERROR(Recv(op));
      break;
    case OpKind::kAllGather:
    case OpKind::kReduceScatter:
    case OpKind::kAllReduce:
      // A tensor-parallel team's activation all-reduces ran inside the compute op before it.
      if (ex_.schedule_.collectives[op.collective].tensor_parallel) break;
      if (ex_.schedule_.collectives[op.collective].tied_embedding) {
        MOTLEY_RETURN_IF_ERROR(SumTiedCopies(i, op));
        break;
      }
      MOTLEY_RETURN_IF_ERROR(Collective(i, op));
      break;
    case OpKind::kParamPrefetch:
      State(op.ministage).Prefetch(/*with_moments=*/Has(op.writes, BufferKind::kMoments));
      break;
    case OpKind::kParamOffload:
      State(op.ministage).Offload();
      break;
    case OpKind::kActOffload: {
      auto it = boundary_.find({op.ministage, op.microbatch});
      MOTLEY_CHECK(it != boundary_.end());
      host_boundary_[it->first] =
          ex_.copies_->ToHost(it->second, {}, &host_boundary_done_[it->first], {}, CopyLane::kActivations);
      boundary_.erase(it);
      break;
    }
    case OpKind::kActPrefetch: {
      auto it = host_boundary_.find({op.ministage, op.microbatch});
      MOTLEY_CHECK(it != host_boundary_.end());
      boundary_[it->first] = ex_.copies_->ToDevice(it->second, host_boundary_done_[it->first],
                                                   &boundary_ready_[it->first], CopyLane::kActivations);
      host_boundary_done_.erase(it->first);
      host_boundary_.erase(it);
      break;
    }
    case OpKind::kOuterReduce:
    case OpKind::kOuterStep:  // an outer round's (runtime/train/planned_islands.cc runs those)
      return Status::Internal(fmt::format("rank {}: op {} of a step is an outer round's {}", ex_.rank_, index,
                                          OpKindName(op.kind)));
  }
  MOTLEY_RETURN_IF_ERROR(std::exchange(poll_status_, Status::Ok()));
  double elapsed = Since(t);
  if (IsCompute(op.kind)) {
    const double waited_s = report_.comm_s + ex_.tp_clock_.host_s() - comm_before_s;
    const auto compute_start = Clock::now();
    StretchSegment();  // the compute since the op's last wait (or its start)
    segment_.reset();
    report_.compute_s += elapsed - waited_s + Since(compute_start);
    if (device_start) compute_spans_.push_back({device_start, RecordTimingEvent(ex_.copies_->device())});
  } else if (op.kind == OpKind::kParamPrefetch || op.kind == OpKind::kParamOffload ||
             op.kind == OpKind::kActOffload || op.kind == OpKind::kActPrefetch) {
    report_.copy_s += elapsed;
  }
  const bool finished = !in_flight_.count(index);
  if (ex_.config_.record_trace && finished) Trace(index, op_start_s);
  return finished;
}

Status Executor::StepRun::Forward(const Op& op) {
  const int v = op.ministage;
  const int64_t m = op.microbatch;
  const ModelSlice slice = Slice(v);
  torch::Tensor input;
  if (slice.embedding) {
    input = EmbeddingInput(m);
  } else {
    MOTLEY_ASSIGN_OR_RETURN(input, Take(Find(op.reads, BufferKind::kInput)));
  }
  torch::Tensor out;
  if (ex_.schedule_.activation_checkpointing) {
    // Checkpoints at layer boundaries (Zorse §4.1.3): keeps each layer's input — and the head's —
    // in one tensor (what activation offload moves), from which the backward recomputes one layer
    // at a time; the activations inside a layer are dropped.
    torch::NoGradGuard no_grad;
    const int n = Pieces(slice);
    torch::Tensor x = slice.embedding ? ex_.model_->Run(EmbeddingOf(slice), input, false) : input;
    torch::Tensor saved;
    for (int k = 0; k < n; ++k) {
      if (!saved.defined()) {
        std::vector<int64_t> shape = x.sizes().vec();
        shape.insert(shape.begin(), n);
        saved = torch::empty(shape, x.options());
      }
      saved.select(0, k).copy_(x);
      x = ex_.model_->Run(Piece(slice, k), x, false);
    }
    out = x;
    MOTLEY_CHECK(saved.defined());  // a ministage has a layer or the head
    boundary_[{v, m}] = saved;
  } else {
    torch::Tensor leaf = slice.embedding ? input : input.detach().requires_grad_(true);
    out = ex_.model_->Run(slice, leaf, false);
    graph_[{v, m}] = {leaf, out};
  }
  if (slice.head) {  // every rank of a team computes the loss (its gather is the team's); one counts it
    torch::NoGradGuard no_grad;
    torch::Tensor loss = Loss(out, m).to(torch::kFloat64);  // on the device: no wait for the GPU here
    if (ex_.tp_index_ == 0) loss_sum_ += loss;
  }
  for (const Buffer& b : op.writes)  // the next ministage's input, when a send or this rank takes it
    if (b.kind == BufferKind::kInput) activations_[b] = out.detach();
  return Status::Ok();
}

Status Executor::StepRun::Backward(const Op& op) {
  const int v = op.ministage;
  const int64_t m = op.microbatch;
  const ModelSlice slice = Slice(v);
  torch::Tensor grad_out;
  if (!slice.head) {
    MOTLEY_ASSIGN_OR_RETURN(grad_out, Take(Find(op.reads, BufferKind::kOutputGrad)));
  }
  MinistageState& state = State(v);
  // Back-propagates `grad` (undefined: `root` is the loss) from `root` to the ministage's
  // parameters (added into its gradients) and to `leaf`, whose gradient it returns.
  auto back_propagate = [&](const torch::Tensor& root, const torch::Tensor& leaf, const torch::Tensor& grad) {
    std::vector<torch::Tensor> inputs;
    for (const auto& p : state.params()) inputs.push_back(p.param);
    if (leaf.defined()) inputs.push_back(leaf);
    std::vector<torch::Tensor> grads = torch::autograd::grad({root}, inputs, {grad}, /*retain_graph=*/false,
                                                             /*create_graph=*/false, /*allow_unused=*/true);
    torch::NoGradGuard no_grad;
    for (size_t k = 0; k < state.params().size(); ++k)
      if (grads[k].defined()) state.AccumulateGrad(k, grads[k]);
    return leaf.defined() ? grads.back() : torch::Tensor();
  };
  torch::Tensor grad_in;  // the gradient of the ministage's input
  if (ex_.schedule_.activation_checkpointing) {
    auto it = boundary_.find({v, m});
    if (it == boundary_.end())
      return Status::Internal(
          fmt::format("rank {}: no saved boundary for stage {} microbatch {}", ex_.rank_, v, m));
    if (auto ready = boundary_ready_.find({v, m}); ready != boundary_ready_.end()) {
      ex_.copies_->Wait(ready->second);  // a prefetched boundary
      boundary_ready_.erase(ready);
    }
    const torch::Tensor saved = it->second;
    boundary_.erase(it);
    // The head, then each layer from the last: recomputed from its saved input, back-propagated,
    // its activations freed before the next.
    torch::Tensor grad = grad_out;
    for (int k = Pieces(slice) - 1; k >= 0; --k) {
      const torch::Tensor leaf = saved.select(0, k).detach().requires_grad_(true);
      torch::Tensor root = ex_.model_->Run(Piece(slice, k), leaf, false);
      if (IsHead(slice, k)) root = BackwardLoss(root, m);
      grad = back_propagate(root, leaf, grad);
    }
    if (slice.embedding)
      back_propagate(ex_.model_->Run(EmbeddingOf(slice), EmbeddingInput(m), false), {}, grad);
    grad_in = grad;
  } else {
    auto it = graph_.find({v, m});
    MOTLEY_CHECK(it != graph_.end());
    auto [leaf, root] = it->second;
    graph_.erase(it);
    if (slice.head) root = BackwardLoss(root, m);
    grad_in = back_propagate(root, slice.embedding ? torch::Tensor() : leaf,
                             slice.head ? torch::Tensor() : grad_out);
  }
  torch::NoGradGuard no_grad;
  for (const Buffer& b : op.writes)  // the previous ministage's output gradient, when taken
    if (b.kind == BufferKind::kOutputGrad) activations_[b] = grad_in;
  if (ex_.flextp_ && op.gradients_complete) {  // FlexTP migration: the borrowed units' gradients go home
    MOTLEY_RETURN_IF_ERROR(
        ex_.flextp_->ReturnGradients(slice.layer_begin, slice.layer_end,
                                     [&](int layer, int k, int dim, int64_t begin, const torch::Tensor& g) {
                                       const std::string prefix = fmt::format("model.layers.{}.", layer);
                                       for (size_t i = 0; i < state.params().size(); ++i) {
                                         const std::string& name = state.params()[i].name;
                                         if (name.rfind(prefix, 0) == 0 && LayerWeightIndex(name) == k)
                                           state.AccumulateGradPart(i, dim, begin, g);
                                       }
                                     }));
  }
  return Status::Ok();
}

Status Executor::StepRun::OptimizerStep(const Op& op) {
  torch::NoGradGuard no_grad;
  const int v = op.ministage;
  MinistageState& state = State(v);
  std::vector<ParamShard> shards = state.OptimizerShards();
  if (report_
          .diverged) {  // the loss or the norm is not finite: no rank updates (the run stops or rolls back)
    state.ClearGradients();
    return Status::Ok();
  }
  if (ex_.schedule_.loss_scaling) {
    if (report_.skipped) {  // some rank's gradients overflowed: no rank updates this step
      state.ClearGradients();
      return Status::Ok();
    }
    for (auto& s : shards)
      if (s.grad.defined()) s.grad.div_(in_.loss_scale);
  }
  if (norm_known_) {
    ClipGradients(shards, report_.grad_norm, ex_.config_.optimizer.grad_clip_norm);
  } else {
    norm_sq_ += NormSquared(v);  // for the report only
  }
  AdamW(ex_.config_.optimizer).Step(shards, in_.lr, in_.update);
  state.ClearGradients();
  return Status::Ok();
}

bool Executor::StepRun::LocalGradientsFinite() {
  torch::NoGradGuard no_grad;
  bool finite = true;
  for (const auto& [v, unused] : ex_.ministages_) {
    MinistageState& state = State(v);
    torch::Tensor g = state.sharded() ? state.GradShard() : state.GradFlat();
    if (!g.defined() || g.numel() == 0) continue;
    if (inject_overflow_) {
      g.view(-1)[0] = std::numeric_limits<double>::infinity();
      inject_overflow_ = false;
    }
    finite = finite && torch::isfinite(g).all().item<bool>();
  }
  return finite;
}

torch::Tensor Executor::StepRun::NormSquared(int v) {
  torch::NoGradGuard no_grad;
  MinistageState& state = State(v);
  if (!state.sharded() && ex_.program().dp_index != 0) return torch::zeros({}, Float64());
  if (ex_.model_->head_is_tied_copy() && v + 1 == static_cast<int>(ex_.schedule_.ministages.size())) {
    // The head's copy of a tied embedding holds the embedding's gradient: it counts there, once.
    const bool first = ex_.tp_index_ == 0;
    return state.GradSquaredSum([first](const std::string& name) {
      return name != "lm_head.weight" && (first || IsSplitParameter(name));
    });
  }
  if (ex_.tp_index_ != 0)  // the team's replicated parameters (the norms) count on index 0
    return state.GradSquaredSum([](const std::string& name) { return IsSplitParameter(name); });
  const torch::Tensor& g = state.sharded() ? state.GradShard() : state.GradFlat();
  return SumOfSquares(g);
}

Status Executor::StepRun::SumLossAndNorm() {
  const auto t = Clock::now();
  const int world = ex_.comm_->world_size();
  torch::Tensor sums = torch::zeros({2 + 2 * world}, torch::kFloat64);
  sums.narrow(0, 0, 2).copy_(torch::stack({loss_sum_, norm_sq_}).to(torch::kCPU));
  const double* local = sums.data_ptr<double>();
  if (!std::isfinite(local[0])) sums[2 + ex_.rank_] = 1.0;
  if (!std::isfinite(local[1])) sums[2 + world + ex_.rank_] = 1.0;
  MOTLEY_RETURN_IF_ERROR(ex_.comm_->AllReduceSum(ex_.comm_->world(), sums));
  report_.comm_s += Since(t);
  report_.loss = sums[0].item<double>();
  report_.grad_norm = std::sqrt(sums[1].item<double>());
  if (ex_.schedule_.loss_scaling) {
    report_.skipped = !std::isfinite(report_.grad_norm) || !std::isfinite(report_.loss);
    report_.grad_norm /= in_.loss_scale;
  } else if (!std::isfinite(report_.loss) || !std::isfinite(report_.grad_norm)) {
    report_.diverged = true;
    // Where it began: the ranks whose own loss was not finite (their gradients then spread it
    // through every reduction), else those whose own gradients were not.
    for (const int part : {0, 1}) {
      for (int r = 0; r < world; ++r)
        if (sums[2 + part * world + r].item<double>() != 0) report_.diverged_ranks.push_back(r);
      report_.diverged_in = part == 0 ? "loss" : "gradients";
      if (!report_.diverged_ranks.empty()) break;
    }
  }
  norm_known_ = true;
  return Status::Ok();
}

Result<RankStepReport> Executor::RunStep(const StepInputs& in) {
  double slowdown = 1, matmul_slowdown = 1;
  for (const EmulatedStraggler& s : config_.stragglers)
    if (s.rank == rank_ && in.step + 1 >= s.from_step && (s.to_step == 0 || in.step + 1 <= s.to_step))
      (s.slows == "matmul" ? matmul_slowdown : slowdown) *= s.slowdown;
  emulation_.set_slowdown(slowdown);
  emulation_.set_matmul_slowdown(matmul_slowdown);
  tp_clock_.Reset();
  if (flextp_) MOTLEY_RETURN_IF_ERROR(flextp_->BeginStep(in.step, last_compute_s_));
  StepRun run(*this, in);
  MOTLEY_ASSIGN_OR_RETURN(RankStepReport report, run.Run());
  // On a GPU the waits inside compute ops are device time within the compute ops' spans (the
  // device is done with the step here); on CPU the host time, already left out of compute.
  const double device_waits_s = tp_clock_.DeviceSeconds();
  report.compute_s -= device_waits_s;
  report.comm_s += tp_clock_.host_s() + device_waits_s;
  last_compute_s_ = report.compute_s;
  if (flextp_) {
    report.pruned_fraction = flextp_->pruned_fraction();
    report.migrated_units = flextp_->migrated_units();
    report.flextp = flextp_->load();
  }
  return report;
}

}  // namespace motley
