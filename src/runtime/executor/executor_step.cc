// Executor::RunStep: one step of this rank's program — the ops in program order, the tensors
// between them (boundaries, received activations and gradients, offloaded copies), collectives
// in flight until an op depends on them, and the step's timing, trace and memory report.
#include <chrono>
#include <csignal>
#include <algorithm>
#include <cmath>
#include <cstdint>
#include <limits>
#include <future>
#include <optional>
#include <set>
#include <utility>

#include <fmt/format.h>

#include "core/check.h"
#include "plan/program_walker.h"
#include "runtime/train/adamw.h"
#include "runtime/device/cuda_device.h"
#include "runtime/executor/executor.h"
#include "runtime/emulation/memory_ledger.h"

namespace motley {
namespace {

using Clock = std::chrono::steady_clock;
double Since(Clock::time_point t) { return std::chrono::duration<double>(Clock::now() - t).count(); }

bool Has(const Buffers& buffers, BufferKind kind) {
  return std::any_of(buffers.begin(), buffers.end(), [&](const Buffer& b) { return b.kind == kind; });
}
// The op's buffer of `kind` (the activation a send reads, a receive writes, ...). REQUIRES: one.
const Buffer& Find(const Buffers& buffers, BufferKind kind) {
  auto it = std::find_if(buffers.begin(), buffers.end(), [&](const Buffer& b) { return b.kind == kind; });
  MOTLEY_CHECK(it != buffers.end());
  return *it;
}

}  // namespace

// One step on this rank: the per-step tensors between ops and the timing.
class Executor::StepRun : public OpRunner {
 public:
  StepRun(Executor& ex, const StepInputs& in) : ex_(ex), in_(in), prog_(ex.schedule_.programs[ex.rank_]) {
    // An emulated device computes at its own speed between the waits inside a compute op (a
    // tensor-parallel team's all-reduces, FlexTP's moves), so the team meets at each one when the
    // devices it stands for would: the compute before a wait is stretched there, not only at the
    // op's end. (Stretched once at the end, a rank waited at every all-reduce for a partner the
    // host had paused — CPU-scale jitter, summed over ~100 waits a step — and a slower
    // partner's lag showed up only after the op.)
    ex_.tp_clock_.set_hooks([this] { StretchSegment(); }, [this] { if (segment_) segment_ = SegmentMark(); });
  }
  ~StepRun() override { ex_.tp_clock_.set_hooks(nullptr, nullptr); }
  StepRun(const StepRun&) = delete;
  StepRun& operator=(const StepRun&) = delete;

  Result<RankStepReport> Run() {
    MemoryLedger& ledger = MemoryLedger::Install();
    ledger.ResetPeak();
    const torch::Device device = ex_.config_.device;
    if (device.is_cuda()) ResetPeakDeviceMemory(device);
    loss_sum_ = torch::zeros({}, Float64());
    norm_sq_ = torch::zeros({}, Float64());
    inject_overflow_ = in_.inject_overflow;
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
      return Status::Internal(fmt::format("rank {}: the step ended with tensors left between ops ({} boundaries, {} "
                                          "offloaded, {} activations and gradients, {} receives)",
                                          ex_.rank_, boundary_.size(), host_boundary_.size(), activations_.size(),
                                          recvs_.size()));
    report_.step_s = Since(start_);
    report_.peak_memory_bytes =
        static_cast<double>(device.is_cuda() ? PeakDeviceMemoryBytes(device) : ledger.peak_bytes());
    return std::move(report_);
  }

 private:
  using Key = std::pair<int, int64_t>;  // (ministage, microbatch)
  struct InFlight;                       // a collective started and not yet finished
  struct PendingRecv {
    PendingTransfer transfer;
    torch::Tensor buffer;
  };

  MinistageState& State(int v) { return *ex_.ministages_.at(v); }
  int64_t Sequences(int64_t m) const { return ex_.schedule_.microbatch_sequences[m]; }
  ModelSlice Slice(int v) const {
    const ScheduleMinistage& s = ex_.schedule_.ministages[v];
    return {s.embedding, s.layer_begin, s.layer_end, s.head};
  }
  torch::Dtype ActDtype() const { return ex_.config_.compute_dtype.value_or(ex_.config_.master_dtype); }

  const torch::Tensor& Tokens(int64_t m) {
    auto it = tokens_.find(m);
    if (it == tokens_.end()) {
      torch::Tensor host = in_.tokens(ex_.microbatch_first_[m], Sequences(m));
      // On a GPU through pinned memory: the host does not wait for the queued kernels.
      if (ex_.config_.device.is_cuda()) host = host.pin_memory();
      it = tokens_.emplace(m, host.to(ex_.config_.device, /*non_blocking=*/true)).first;
    }
    return it->second;
  }
  torch::Tensor EmbeddingInput(int64_t m) { return Tokens(m).narrow(1, 0, Tokens(m).size(1) - 1); }
  // A checkpointed ministage's pieces: its layers, then the head when it has it; piece k runs on
  // the k-th saved boundary.
  static int Pieces(const ModelSlice& s) { return s.layer_end - s.layer_begin + (s.head ? 1 : 0); }
  static bool IsHead(const ModelSlice& s, int k) { return s.layer_begin + k == s.layer_end; }
  static ModelSlice Piece(const ModelSlice& s, int k) {
    const int l = s.layer_begin + k;
    return IsHead(s, k) ? ModelSlice{false, l, l, true} : ModelSlice{false, l, l + 1, false};
  }
  static ModelSlice EmbeddingOf(const ModelSlice& s) { return {true, s.layer_begin, s.layer_begin, false}; }
  torch::Tensor Loss(const torch::Tensor& logits, int64_t m) {
    const int64_t seq = logits.size(1);
    double share = static_cast<double>(Sequences(m)) / static_cast<double>(ex_.batch_sequences_);
    if (in_.loss_factor_microbatch < 0 || in_.loss_factor_microbatch == m) share *= in_.loss_factor;
    return ex_.model_->Loss(logits, Tokens(m).narrow(1, 1, seq)) * share;
  }
  // What a backward differentiates: the loss, times the step's scale under loss scaling.
  torch::Tensor BackwardLoss(const torch::Tensor& logits, int64_t m) {
    torch::Tensor loss = Loss(logits, m);
    return ex_.schedule_.loss_scaling ? loss * in_.loss_scale : loss;
  }

  // An input activation or output gradient, at its last use here: a receive's buffer or what this
  // rank made itself.
  Result<torch::Tensor> Take(const Buffer& b) {
    if (auto it = recvs_.find(b); it != recvs_.end()) {
      const auto t = Clock::now();
      MOTLEY_RETURN_IF_ERROR(it->second.transfer.Wait());
      report_.comm_s += Since(t);
      torch::Tensor out = it->second.buffer;
      recvs_.erase(it);
      return out;
    }
    auto it = activations_.find(b);
    if (it == activations_.end()) return Status::Internal(fmt::format("rank {}: no {}", ex_.rank_, BufferName(b)));
    torch::Tensor out = it->second;
    activations_.erase(it);
    return out;
  }

  // ---- OpRunner: what each op does (ProgramWalker decides when: plan/program_walker.h) ----
  Status BeforeOp(int i) override {
    if (in_.die_mid_step && i == static_cast<int>(prog_.ops.size()) / 2) ::raise(SIGKILL);
    if (device_timed_) op_start_event_[i] = RecordTimingEvent(ex_.copies_->device());
    ex_.copies_->Pump();  // the next pieces of the parameter copies in flight
    MOTLEY_RETURN_IF_ERROR(CollectDeliveredSends());
    return StartArrivedGathers();
  }
  // Sent activations go once delivered (the simulator frees them at the send's end too).
  Status CollectDeliveredSends() {
    for (auto it = sends_.begin(); it != sends_.end();) {
      if (!it->first.Done()) {
        ++it;
        continue;
      }
      MOTLEY_RETURN_IF_ERROR(it->first.Wait());  // done: reports a failure, does not wait
      it = sends_.erase(it);
    }
    for (auto it = emulated_sends_.begin(); it != emulated_sends_.end();) {
      if (it->wait_for(std::chrono::seconds(0)) != std::future_status::ready) {
        ++it;
        continue;
      }
      MOTLEY_RETURN_IF_ERROR(it->get());
      it = emulated_sends_.erase(it);
    }
    return Status::Ok();
  }
  // The host looks at its communication from inside a compute op while an emulated device's
  // compute is stretched (about every millisecond): what was sent and delivered goes, collectives
  // done finish and the next queued one starts (ProgramWalker::Poll; never the gradient norm,
  // which blocks). So a rank's collectives follow one another as they end rather than only between
  // ops, as on a device's communication stream. (Not between layers: what a collective held would
  // then go before or after the op's own peak by a race of a few milliseconds; the simulator counts
  // it held through the op's layers.) The host's time here is left out of the op's stretch.
  void PollInCompute() {
    if (walker_ == nullptr || polling_ || !poll_status_.ok()) return;
    polling_ = true;
    const double cpu_s = ComputeCpuSeconds(), matmul_s = MatmulCpuSeconds();
    const auto wall = Clock::now();
    Status st = CollectDeliveredSends();
    if (st.ok()) st = walker_->Poll(/*may_block=*/false);
    if (!st.ok()) poll_status_ = st;
    if (segment_) {
      segment_->cpu_s += ComputeCpuSeconds() - cpu_s;
      segment_->matmul_s += MatmulCpuSeconds() - matmul_s;
      segment_->wall += Clock::now() - wall;
    }
    polling_ = false;
  }
  // Collectives stay in flight (on the comm stream) until an op needs them; the rest finish here.
  bool Done(int i) override {
    auto it = in_flight_.find(i);
    return it != in_flight_.end() && !it->second.deferred && it->second.transfer.Done() &&
           Since(start_) >= it->second.ready_s;
  }
  Status Finish(int i) override { return Complete(i); }
  Status Free(const Buffer& b) override {
    torch::NoGradGuard no_grad;
    if (b.kind == BufferKind::kParams) State(b.ministage).ReleaseFlat();
    if (b.kind == BufferKind::kShard) State(b.ministage).DropDeviceShard();  // an offloaded shard, gathered
    if (b.kind == BufferKind::kGradShard) State(b.ministage).ReleaseGradShard();  // updated, not kept
    return Status::Ok();
  }

  Result<bool> Start(int index) override {
    const size_t i = static_cast<size_t>(index);
    const Op& op = prog_.ops[i];
    if (op.kind == OpKind::kOptimizerStep) State(op.ministage).WaitReady(true);  // a prefetched shard and moments
    const auto t = Clock::now();
    const double op_start_s = Since(start_);
    // Waits for received data and the tensor-parallel all-reduces inside the op count as communication.
    const double comm_before_s = report_.comm_s + ex_.tp_clock_.host_s();
    if (IsCompute(op.kind) && ex_.emulation_.stretches()) segment_ = SegmentMark();
    // On a GPU the host only queues the kernels: the op's compute time is the device's, between
    // timing events on the compute stream (after the waits for its inputs queued above).
    std::shared_ptr<c10::Event> device_start;
    if (IsCompute(op.kind) && ex_.config_.device.is_cuda()) device_start = RecordTimingEvent(ex_.copies_->device());
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
        boundary_[it->first] =
            ex_.copies_->ToDevice(it->second, host_boundary_done_[it->first], &boundary_ready_[it->first],
                                  CopyLane::kActivations);
        host_boundary_done_.erase(it->first);
        host_boundary_.erase(it);
        break;
      }
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

  // Where the compute op running now stands since its start or its last wait: wall time, CPU time,
  // CPU time in matrix multiplications (set only while a compute op runs on an emulated device).
  // The op's other waits inside the segment — for the data it receives — are not compute either:
  // a device cannot start on what has not arrived, so they are left out of the stretch.
  struct Segment {
    Clock::time_point wall;
    double cpu_s = 0, matmul_s = 0, comm_s = 0;
  };
  Segment SegmentMark() const { return {Clock::now(), ComputeCpuSeconds(), MatmulCpuSeconds(), report_.comm_s}; }
  void StretchSegment() {
    if (!segment_) return;
    ex_.emulation_.StretchCompute(Since(segment_->wall) - (report_.comm_s - segment_->comm_s),
                                  ComputeCpuSeconds() - segment_->cpu_s, MatmulCpuSeconds() - segment_->matmul_s,
                                  &report_.late_s, [this] { PollInCompute(); });
  }
  std::optional<Segment> segment_;
  ProgramWalker* walker_ = nullptr;  // the step's, while it runs
  bool polling_ = false;
  Status poll_status_ = Status::Ok();  // a failure seen by PollInCompute, returned after the op

  // Keeps op i's span for the trace: host times on CPU; on a GPU (where the host runs ahead) timing
  // events on the compute stream, or on the side streams for the copies the op started.
  void Trace(int i, double start_s) {
    report_.trace.push_back({ex_.rank_, i, start_s, Since(start_)});
    if (!device_timed_) return;
    const std::vector<CopyEngine::TimedCopy> copies = ex_.copies_->TakeTimedCopies();
    const OpKind kind = prog_.ops[i].kind;
    const bool copy = kind == OpKind::kParamPrefetch || kind == OpKind::kParamOffload ||
                      kind == OpKind::kActOffload || kind == OpKind::kActPrefetch;
    if (copy && !copies.empty()) {
      device_spans_.push_back({copies.front().start, copies.back().done});
    } else {
      device_spans_.push_back({op_start_event_.at(i), RecordTimingEvent(ex_.copies_->device())});
    }
    op_start_event_.erase(i);
  }

  Status Forward(const Op& op) {
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

  Status Backward(const Op& op) {
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
        return Status::Internal(fmt::format("rank {}: no saved boundary for stage {} microbatch {}", ex_.rank_, v, m));
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
      if (slice.embedding) back_propagate(ex_.model_->Run(EmbeddingOf(slice), EmbeddingInput(m), false), {}, grad);
      grad_in = grad;
    } else {
      auto it = graph_.find({v, m});
      MOTLEY_CHECK(it != graph_.end());
      auto [leaf, root] = it->second;
      graph_.erase(it);
      if (slice.head) root = BackwardLoss(root, m);
      grad_in = back_propagate(root, slice.embedding ? torch::Tensor() : leaf, slice.head ? torch::Tensor() : grad_out);
    }
    torch::NoGradGuard no_grad;
    for (const Buffer& b : op.writes)  // the previous ministage's output gradient, when taken
      if (b.kind == BufferKind::kOutputGrad) activations_[b] = grad_in;
    if (ex_.flextp_ && op.gradients_complete) {  // FlexTP migration: the borrowed units' gradients go home
      MOTLEY_RETURN_IF_ERROR(ex_.flextp_->ReturnGradients(
          slice.layer_begin, slice.layer_end, [&](int layer, int k, int dim, int64_t begin, const torch::Tensor& g) {
            const std::string prefix = fmt::format("model.layers.{}.", layer);
            for (size_t i = 0; i < state.params().size(); ++i) {
              const std::string& name = state.params()[i].name;
              if (name.rfind(prefix, 0) == 0 && LayerWeightIndex(name) == k) state.AccumulateGradPart(i, dim, begin, g);
            }
          }));
    }
    return Status::Ok();
  }

  Status OptimizerStep(const Op& op) {
    torch::NoGradGuard no_grad;
    const int v = op.ministage;
    MinistageState& state = State(v);
    std::vector<ParamShard> shards = state.OptimizerShards();
    if (report_.diverged) {  // the loss or the norm is not finite: no rank updates (the run stops or rolls back)
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

  // Whether every gradient this rank holds for its updates is finite (loss scaling's found-inf).
  // With fault injection (tests), one of them is made infinite first, as an fp16 overflow would.
  bool LocalGradientsFinite() {
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

  // This rank's part of the squared global gradient norm for stage v. Each element counts once:
  // ZeRO >= 1 owners hold disjoint shards; with ZeRO-0 every member holds the whole, so only the first counts.
  torch::Tensor NormSquared(int v) {
    torch::NoGradGuard no_grad;
    MinistageState& state = State(v);
    if (!state.sharded() && ex_.program().dp_index != 0) return torch::zeros({}, Float64());
    if (ex_.model_->head_is_tied_copy() && v + 1 == static_cast<int>(ex_.schedule_.ministages.size())) {
      // The head's copy of a tied embedding holds the embedding's gradient: it counts there, once.
      const bool first = ex_.tp_index_ == 0;
      return state.GradSquaredSum(
          [first](const std::string& name) { return name != "lm_head.weight" && (first || IsSplitParameter(name)); });
    }
    if (ex_.tp_index_ != 0)  // the team's replicated parameters (the norms) count on index 0
      return state.GradSquaredSum([](const std::string& name) { return IsSplitParameter(name); });
    const torch::Tensor& g = state.sharded() ? state.GradShard() : state.GradFlat();
    return SumOfSquares(g);
  }
  // The step's loss and global gradient norm: this rank's parts summed over every rank.
  // With them, two flags a rank: whether its own part of the loss, and of the norm, was not finite
  // (where a divergence began, for the message; the sums alone would only say that it did).
  Status SumLossAndNorm() {
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
  torch::TensorOptions Float64() const { return torch::TensorOptions().dtype(torch::kFloat64).device(ex_.config_.device); }

  Status Send(const Op& op) {
    MOTLEY_CHECK_EQ(op.reads.size(), 1u);
    auto it = activations_.find(op.reads[0]);
    if (it == activations_.end())
      return Status::Internal(fmt::format("rank {}: no {} to send to rank {}", ex_.rank_, BufferName(op.reads[0]), op.peer));
    torch::Tensor t = it->second.contiguous();
    if (!op.frees.empty()) activations_.erase(it);  // the last send of it
    report_.bytes_sent += static_cast<double>(t.nbytes());
    const double delay = ex_.emulation_.TransferSeconds(static_cast<double>(t.nbytes()),
                                                        ex_.schedule_.programs[op.peer].device);
    Communicator* comm = ex_.comm_;
    const int peer = op.peer;
    const int64_t tag = op.tag;
    if (delay <= 0 && !link_free_.valid()) {
      MOTLEY_ASSIGN_OR_RETURN(PendingTransfer p, comm->Send(t, peer, tag));
      sends_.push_back({std::move(p), t});
      return Status::Ok();
    }
    // An emulated link: the transfer occupies it for its duration, after the ones before it went
    // onto it; it completes once the peer has posted its receive (as on the simulator's link), and
    // the sent tensor goes then, as the schedule frees it. (Waiting for each transfer's receive
    // before the next could go out let a send to a peer that posts its receive late hold back one
    // to a peer that needed it first: a deadlock in 1F1B with microbatches routed over devices.)
    auto posted = std::make_shared<std::promise<void>>();
    std::shared_future<void> previous = link_free_;
    link_free_ = posted->get_future().share();
    emulated_sends_.push_back(std::async(std::launch::async, [=]() mutable -> Status {
                                if (previous.valid()) previous.wait();
                                SleepSeconds(delay);
                                Result<PendingTransfer> p = Status::Internal("the send did not start");
                                try {
                                  p = comm->Send(t, peer, tag);
                                } catch (...) {
                                  posted->set_value();
                                  throw;
                                }
                                posted->set_value();
                                if (!p.ok()) return p.status();
                                const Status sent = p->Wait();
                                t = torch::Tensor();
                                return sent;
                              }).share());
    return Status::Ok();
  }

  Status Recv(const Op& op) {
    const auto& spec = ex_.model_->spec();
    torch::Tensor buffer = torch::empty({Sequences(op.microbatch), ex_.schedule_.seq_len, spec.hidden_size},
                                        torch::TensorOptions().dtype(ActDtype()).device(ex_.config_.device));
    MOTLEY_ASSIGN_OR_RETURN(PendingTransfer p, ex_.comm_->Recv(buffer, op.peer, op.tag));
    MOTLEY_CHECK_EQ(op.writes.size(), 1u);
    recvs_[op.writes[0]] = {std::move(p), buffer};
    return Status::Ok();
  }

  Status FinishSends() {
    const auto t = Clock::now();
    for (auto& [transfer, tensor] : sends_) MOTLEY_RETURN_IF_ERROR(transfer.Wait());
    sends_.clear();
    for (std::shared_future<Status>& sent : emulated_sends_) MOTLEY_RETURN_IF_ERROR(sent.get());
    emulated_sends_.clear();
    link_free_ = {};
    report_.comm_s += Since(t);
    return Status::Ok();
  }

  // Collectives start here and finish when an op that depends on them runs (or at the end of
  // the step), so communication overlaps compute as on the schedule's comm stream. What follows
  // a collective (adding a reduced shard, freeing the gradient buffer) runs at its completion.
  Status Collective(size_t i, const Op& op) {
    torch::NoGradGuard no_grad;
    CommGroup* g = ex_.collective_group_.at(op.collective);
    MOTLEY_CHECK(g != nullptr);
    const int v = op.ministage;
    MinistageState& state = State(v);
    InFlight f;
    f.start = Clock::now();
    f.start_s = Since(start_);
    f.ministage = v;
    int passes = 1;
    if (op.kind == OpKind::kAllGather) {
      // On a GPU, a group of one's gather (a copy on the compute stream) whose shard is still
      // being prefetched starts once the copy is done (or when its result is needed): started
      // now, it would hold the compute stream behind the copy. A group's gather starts in program
      // order, since its members' collectives match in the order they are issued (NCCL).
      f.deferred = ex_.copies_->asynchronous() && g->size() == 1 && !state.ShardArrived();
      if (!f.deferred) MOTLEY_RETURN_IF_ERROR(StartGather(static_cast<int>(i), f));
      in_flight_[static_cast<int>(i)] = std::move(f);
      return Status::Ok();
    } else if (op.kind == OpKind::kReduceScatter) {
      torch::Tensor full = state.GradFlat();
      // A group of one has nothing to reduce: the full gradients are its shard's (no copy). The
      // first reduction after an update writes into the (zeroed) shard itself: no second buffer.
      torch::Tensor out = g->size() == 1 ? full : state.TakeZeroGradShard();
      if (!out.defined()) out = torch::empty({state.shard_numel()}, full.options());
      MOTLEY_ASSIGN_OR_RETURN(f.transfer, ex_.comm_->StartReduceScatterSum(*g, full, out, state.shard_counts()));
      f.bytes = static_cast<double>(full.nbytes());
      const bool release = Has(op.frees, BufferKind::kGrads);  // ZeRO >= 2: only the shard stays
      f.then = [&state, out, full, release]() mutable {
        if (release) {
          state.ReleaseGradFlat();
          state.AddToGradShard(out);  // may keep `out` (a group of one's: the full gradients) as the shard
        } else {
          state.GradShard();          // allocated (zeros) before: `out` is added, never adopted
          state.AddToGradShard(out);  // (nothing to add when it is the shard itself)
          full.zero_();
        }
      };
    } else {
      torch::Tensor& full = state.GradFlat();
      MOTLEY_ASSIGN_OR_RETURN(f.transfer, ex_.comm_->StartAllReduceSum(*g, full));
      f.bytes = static_cast<double>(full.nbytes());
      passes = 2;
    }
    const double n = g->size();
    report_.bytes_sent += passes * (n - 1) / n * f.bytes;
    std::vector<int> devices;
    for (int r : g->ranks) devices.push_back(ex_.schedule_.programs[r].device);
    // Uneven pieces: paced by the largest, as the simulator times it.
    f.needed_s = ex_.emulation_.CollectiveSeconds(f.bytes * ex_.schedule_.collectives[op.collective].uneven_factor,
                                                  devices, passes);
    QueueOnEmulatedLink(f);
    in_flight_[static_cast<int>(i)] = std::move(f);
    return Status::Ok();
  }

  // A tied model in several ministages (Collective::tied_embedding): the embedding's and the head's
  // copies of the matrix this rank holds are summed here, then over the collective's members (the
  // two groups' ranks with the same vocabulary rows), of whom each group's first replica keeps the
  // sum and the others zeros — so that each group's reduction gives both copies the whole sum.
  Status SumTiedCopies(size_t i, const Op& op) {
    torch::NoGradGuard no_grad;
    const int head = static_cast<int>(ex_.schedule_.ministages.size()) - 1;
    torch::Tensor embedding, copy;
    if (ex_.ministages_.count(0)) embedding = State(0).GradFlatOf("model.embed_tokens.weight");
    if (ex_.ministages_.count(head)) copy = State(head).GradFlatOf("lm_head.weight");
    MOTLEY_CHECK(embedding.defined() || copy.defined());
    torch::Tensor sum = embedding.defined() ? embedding : copy;
    if (embedding.defined() && copy.defined()) {
      embedding.add_(copy);
      copy.copy_(embedding);
    }
    CommGroup* g = ex_.collective_group_.at(op.collective);
    if (g == nullptr || g->size() == 1) return Status::Ok();
    InFlight f;
    f.start = Clock::now();
    f.start_s = Since(start_);
    f.ministage = op.ministage;
    MOTLEY_ASSIGN_OR_RETURN(f.transfer, ex_.comm_->StartAllReduceSum(*g, sum));
    f.bytes = static_cast<double>(sum.nbytes());
    const bool keeps = ex_.program().dp_index == 0;
    f.then = [sum, keeps]() mutable {
      if (!keeps) sum.zero_();
    };
    const double n = g->size();
    report_.bytes_sent += 2 * (n - 1) / n * f.bytes;
    std::vector<int> devices;
    for (int r : g->ranks) devices.push_back(ex_.schedule_.programs[r].device);
    f.needed_s = ex_.emulation_.CollectiveSeconds(f.bytes, devices, 2);
    QueueOnEmulatedLink(f);
    in_flight_[static_cast<int>(i)] = std::move(f);
    return Status::Ok();
  }

  // Starts the parameter gather of op i into its stage's full parameters, after the shard's prefetch.
  Status StartGather(int i, InFlight& f) {
    torch::NoGradGuard no_grad;
    const Op& op = prog_.ops[i];
    CommGroup* g = ex_.collective_group_.at(op.collective);
    MinistageState& state = State(f.ministage);
    f.deferred = false;
    f.start = Clock::now();
    state.WaitReady(false);
    torch::Tensor& flat = state.AllocateFlat();
    torch::Tensor& shard = state.shard();
    MOTLEY_CHECK(shard.defined());
    MOTLEY_ASSIGN_OR_RETURN(f.transfer, ex_.comm_->StartAllGather(*g, shard, flat, state.shard_counts()));
    f.bytes = static_cast<double>(flat.nbytes());
    const double n = g->size();
    report_.bytes_sent += (n - 1) / n * f.bytes;
    std::vector<int> devices;
    for (int r : g->ranks) devices.push_back(ex_.schedule_.programs[r].device);
    f.needed_s = ex_.emulation_.CollectiveSeconds(f.bytes * ex_.schedule_.collectives[op.collective].uneven_factor,
                                                  devices, 1);
    QueueOnEmulatedLink(f);
    return Status::Ok();
  }

  // An emulated collective is done once its link time has passed since it started. (Collectives in
  // flight together each take their own link time here, while the simulator runs a rank's
  // collectives one after another; queueing them here would hold their buffers longer than the
  // simulator counts unless their start waited too.)
  void QueueOnEmulatedLink(InFlight& f) { f.ready_s = Since(start_) + f.needed_s; }

  // Starts the deferred gathers whose shards have arrived.
  Status StartArrivedGathers() {
    for (auto& [i, f] : in_flight_)
      if (f.deferred && State(f.ministage).ShardArrived()) MOTLEY_RETURN_IF_ERROR(StartGather(i, f));
    return Status::Ok();
  }

  // Finishes the collective started by op i, if it is still in flight.
  Status Complete(int i) {
    auto it = in_flight_.find(i);
    if (it == in_flight_.end()) return Status::Ok();
    if (it->second.deferred) MOTLEY_RETURN_IF_ERROR(StartGather(i, it->second));
    InFlight f = std::move(it->second);
    in_flight_.erase(it);
    const auto t = Clock::now();
    MOTLEY_RETURN_IF_ERROR(f.transfer.Wait());
    SleepSeconds(f.ready_s - Since(start_));  // an emulated link is slower than this machine's
    {
      torch::NoGradGuard no_grad;
      if (f.then) f.then();
    }
    report_.comm_s += Since(t);
    if (ex_.config_.record_trace) Trace(i, f.start_s);
    return Status::Ok();
  }
  Executor& ex_;
  const StepInputs& in_;
  bool inject_overflow_ = false;  // StepInputs::inject_overflow, until it is done
  const Program& prog_;
  Clock::time_point start_;
  RankStepReport report_;
  torch::Tensor loss_sum_, norm_sq_;  // float64 scalars on the device
  bool norm_known_ = false;           // the global norm was summed (kGradNorm; clipping)
  std::map<int64_t, torch::Tensor> tokens_;
  std::map<Key, torch::Tensor> boundary_, host_boundary_;
  std::map<Buffer, torch::Tensor> activations_;  // inputs and output gradients made here, until taken
  std::map<Key, CopyTicket> boundary_ready_, host_boundary_done_;  // activation prefetches and offloads in flight
  std::map<Key, std::pair<torch::Tensor, torch::Tensor>> graph_;  // no checkpointing: (input leaf, output)
  std::map<Buffer, PendingRecv> recvs_;                           // by the buffer they write
  std::vector<std::pair<PendingTransfer, torch::Tensor>> sends_;
  std::vector<std::shared_future<Status>> emulated_sends_;  // over an emulated link: done once received
  std::shared_future<void> link_free_;                      // the last of them has gone onto the link
  struct InFlight {
    PendingTransfer transfer;
    Clock::time_point start;
    double start_s = 0;   // from the step's start (trace)
    double bytes = 0;
    double needed_s = 0;  // what the emulated link needs; 0 when not emulated
    double ready_s = 0;   // when the emulated link has carried it (from the step's start)
    std::function<void()> then;
    int ministage = -1;
    bool deferred = false;  // a gather not started yet: its shard is still being prefetched
  };
  std::map<int, InFlight> in_flight_;  // collectives by op index
  // A traced step on a GPU: the step's first event, each running op's first, each trace entry's pair.
  struct DeviceSpan {
    std::shared_ptr<c10::Event> start, end;
  };
  bool device_timed_ = false;
  std::shared_ptr<c10::Event> origin_;
  std::map<int, std::shared_ptr<c10::Event>> op_start_event_;
  std::vector<DeviceSpan> device_spans_;  // parallel to report_.trace
  std::vector<DeviceSpan> compute_spans_;  // on a GPU: every compute op's, on the device
};

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
