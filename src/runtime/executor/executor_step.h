// Executor::StepRun: one step of this rank's program (internal to runtime/executor/). Its work is
// in three rooms:
//   executor_step.cc      the step — run the program, forward, backward, the optimizer step, the
//                         loss and the gradient norm;
//   executor_transfers.cc sends and receives, collectives in flight until an op needs them;
//   executor_clock.cc     the step's clock — an emulated device's compute stretched segment by
//                         segment, the communication looked at from inside compute, the trace.
// ProgramWalker (plan/program_walker.h) decides when each op runs; this class what it does.
#pragma once

#include <algorithm>
#include <chrono>
#include <cstdint>
#include <functional>
#include <future>
#include <map>
#include <memory>
#include <optional>
#include <utility>
#include <vector>

#include "core/check.h"
#include "plan/program_walker.h"
#include "runtime/executor/executor.h"

namespace motley {
namespace step_run {

using Clock = std::chrono::steady_clock;
inline double Since(Clock::time_point t) { return std::chrono::duration<double>(Clock::now() - t).count(); }

inline bool Has(const Buffers& buffers, BufferKind kind) {
  return std::any_of(buffers.begin(), buffers.end(), [&](const Buffer& b) { return b.kind == kind; });
}
// The op's buffer of `kind` (the activation a send reads, a receive writes, ...). REQUIRES: one.
inline const Buffer& Find(const Buffers& buffers, BufferKind kind) {
  auto it = std::find_if(buffers.begin(), buffers.end(), [&](const Buffer& b) { return b.kind == kind; });
  MOTLEY_CHECK(it != buffers.end());
  return *it;
}

}  // namespace step_run

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
    ex_.tp_clock_.set_hooks([this] { StretchSegment(); },
                            [this] {
                              if (segment_) segment_ = SegmentMark();
                            });
  }
  ~StepRun() override { ex_.tp_clock_.set_hooks(nullptr, nullptr); }
  StepRun(const StepRun&) = delete;
  StepRun& operator=(const StepRun&) = delete;

  Result<RankStepReport> Run();

 private:
  using Clock = step_run::Clock;
  using Key = std::pair<int, int64_t>;  // (ministage, microbatch)
  struct InFlight;                      // a collective started and not yet finished
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

  const torch::Tensor& Tokens(int64_t m);
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
  torch::Tensor Loss(const torch::Tensor& logits, int64_t m);
  // What a backward differentiates: the loss, times the step's scale under loss scaling.
  torch::Tensor BackwardLoss(const torch::Tensor& logits, int64_t m);

  // An input activation or output gradient, at its last use here: a receive's buffer or what this
  // rank made itself.
  Result<torch::Tensor> Take(const Buffer& b);

  // ---- OpRunner: what each op does (ProgramWalker decides when: plan/program_walker.h) ----
  Status BeforeOp(int i) override;
  // Sent activations go once delivered (the simulator frees them at the send's end too).
  Status CollectDeliveredSends();
  // The host looks at its communication from inside a compute op while an emulated device's
  // compute is stretched (about every millisecond): what was sent and delivered goes, collectives
  // done finish and the next queued one starts (ProgramWalker::Poll; never the gradient norm,
  // which blocks). So a rank's collectives follow one another as they end rather than only between
  // ops, as on a device's communication stream. (Not between layers: what a collective held would
  // then go before or after the op's own peak by a race of a few milliseconds; the simulator counts
  // it held through the op's layers.) The host's time here is left out of the op's stretch.
  void PollInCompute();
  // Collectives stay in flight (on the comm stream) until an op needs them; the rest finish here.
  bool Done(int i) override;
  Status Finish(int i) override { return Complete(i); }
  Status Free(const Buffer& b) override;

  Result<bool> Start(int index) override;
  // Where the compute op running now stands since its start or its last wait: wall time, CPU time,
  // CPU time in matrix multiplications (set only while a compute op runs on an emulated device).
  // The op's other waits inside the segment — for the data it receives — are not compute either:
  // a device cannot start on what has not arrived, so they are left out of the stretch.
  struct Segment {
    Clock::time_point wall;
    double cpu_s = 0, matmul_s = 0, comm_s = 0;
  };
  Segment SegmentMark() const {
    return {Clock::now(), ComputeCpuSeconds(), MatmulCpuSeconds(), report_.comm_s};
  }
  void StretchSegment();
  std::optional<Segment> segment_;
  ProgramWalker* walker_ = nullptr;  // the step's, while it runs
  bool polling_ = false;
  Status poll_status_ = Status::Ok();  // a failure seen by PollInCompute, returned after the op

  // Keeps op i's span for the trace: host times on CPU; on a GPU (where the host runs ahead) timing
  // events on the compute stream, or on the side streams for the copies the op started.
  void Trace(int i, double start_s);

  Status Forward(const Op& op);
  Status Backward(const Op& op);

  Status OptimizerStep(const Op& op);
  // Whether every gradient this rank holds for its updates is finite (loss scaling's found-inf).
  // With fault injection (tests), one of them is made infinite first, as an fp16 overflow would.
  bool LocalGradientsFinite();

  // This rank's part of the squared global gradient norm for stage v. Each element counts once:
  // ZeRO >= 1 owners hold disjoint shards; with ZeRO-0 every member holds the whole, so only the first
  // counts.
  torch::Tensor NormSquared(int v);
  // The step's loss and global gradient norm: this rank's parts summed over every rank.
  // With them, two flags a rank: whether its own part of the loss, and of the norm, was not finite
  // (where a divergence began, for the message; the sums alone would only say that it did).
  Status SumLossAndNorm();
  torch::TensorOptions Float64() const {
    return torch::TensorOptions().dtype(torch::kFloat64).device(ex_.config_.device);
  }

  Status Send(const Op& op);
  Status Recv(const Op& op);

  Status FinishSends();
  // Collectives start here and finish when an op that depends on them runs (or at the end of
  // the step), so communication overlaps compute as on the schedule's comm stream. What follows
  // a collective (adding a reduced shard, freeing the gradient buffer) runs at its completion.
  Status Collective(size_t i, const Op& op);

  // A tied model in several ministages (Collective::tied_embedding): the embedding's and the head's
  // copies of the matrix this rank holds are summed here, then over the collective's members (the
  // two groups' ranks with the same vocabulary rows), of whom each group's first replica keeps the
  // sum and the others zeros — so that each group's reduction gives both copies the whole sum.
  Status SumTiedCopies(size_t i, const Op& op);

  // Starts the parameter gather of op i into its stage's full parameters, after the shard's prefetch.
  Status StartGather(int i, InFlight& f);

  // An emulated collective is done once its link time has passed since it started. (Collectives in
  // flight together each take their own link time here, while the simulator runs a rank's
  // collectives one after another; queueing them here would hold their buffers longer than the
  // simulator counts unless their start waited too.)
  void QueueOnEmulatedLink(InFlight& f) { f.ready_s = step_run::Since(start_) + f.needed_s; }

  // Starts the deferred gathers whose shards have arrived.
  Status StartArrivedGathers();

  // Finishes the collective started by op i, if it is still in flight.
  Status Complete(int i);
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
  std::map<Key, CopyTicket> boundary_ready_,
      host_boundary_done_;  // activation prefetches and offloads in flight
  std::map<Key, std::pair<torch::Tensor, torch::Tensor>> graph_;  // no checkpointing: (input leaf, output)
  std::map<Buffer, PendingRecv> recvs_;                           // by the buffer they write
  std::vector<std::pair<PendingTransfer, torch::Tensor>> sends_;
  std::vector<std::shared_future<Status>> emulated_sends_;  // over an emulated link: done once received
  std::shared_future<void> link_free_;                      // the last of them has gone onto the link
  struct InFlight {
    PendingTransfer transfer;
    Clock::time_point start;
    double start_s = 0;  // from the step's start (trace)
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
  std::vector<DeviceSpan> device_spans_;   // parallel to report_.trace
  std::vector<DeviceSpan> compute_spans_;  // on a GPU: every compute op's, on the device
};

}  // namespace motley
