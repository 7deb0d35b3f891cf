// Executor::StepRun's clock: an emulated device's compute stretched segment by segment (between the
// waits inside a compute op), the communication looked at from inside compute meanwhile, and each
// op's span kept for the trace (host times on CPU, timing events on a GPU).
#include "runtime/executor/executor_step.h"

#include "runtime/device/cuda_device.h"

namespace motley {
using namespace step_run;

void Executor::StepRun::PollInCompute() {
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

void Executor::StepRun::StretchSegment() {
  if (!segment_) return;
  ex_.emulation_.StretchCompute(
      Since(segment_->wall) - (report_.comm_s - segment_->comm_s), ComputeCpuSeconds() - segment_->cpu_s,
      MatmulCpuSeconds() - segment_->matmul_s, &report_.late_s, [this] { PollInCompute(); });
}

void Executor::StepRun::Trace(int i, double start_s) {
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

}  // namespace motley
