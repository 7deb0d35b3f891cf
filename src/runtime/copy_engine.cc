#include "runtime/copy_engine.h"

#include <algorithm>
#include <chrono>
#include <condition_variable>
#include <deque>
#include <functional>
#include <limits>
#include <mutex>
#include <thread>

#include <c10/core/StreamGuard.h>
#include <c10/core/impl/VirtualGuardImpl.h>

#include "runtime/memory_ledger.h"

namespace motley {
namespace {

std::shared_ptr<c10::Event> RecordOn(const c10::Stream& stream, bool timed = false) {
  // Events time only when asked: timing costs a little on every record.
  auto e = std::make_shared<c10::Event>(stream.device_type(),
                                        timed ? c10::EventFlag::BACKEND_DEFAULT : c10::EventFlag::PYTORCH_DEFAULT);
  e->record(stream);
  return e;
}

// A parameter lane's copy goes in pieces of this size: a DMA engine serves its queues a command at
// a time, so a microbatch's activations (megabytes, needed now) queued on the other lane of the
// same direction wait for one piece (~1 ms at 50 GB/s) rather than a whole ministage's moments
// (GBs). The GPU trace of issue #6 showed backward ops waiting 27-33 ms for such copies.
constexpr int64_t kParamCopyPieceBytes = 64LL << 20;

// dst.copy_(src) on the current stream, in pieces for the parameter lane (both contiguous).
void CopyInPieces(torch::Tensor& dst, const torch::Tensor& src, CopyLane lane) {
  const int64_t piece = kParamCopyPieceBytes / static_cast<int64_t>(src.element_size());
  if (lane != CopyLane::kParams || src.numel() <= piece || !src.is_contiguous() || !dst.is_contiguous()) {
    dst.copy_(src, /*non_blocking=*/true);
    return;
  }
  torch::Tensor d = dst.view(-1), s = src.view(-1);
  for (int64_t at = 0; at < s.numel(); at += piece) {
    const int64_t n = std::min(piece, s.numel() - at);
    d.narrow(0, at, n).copy_(s.narrow(0, at, n), /*non_blocking=*/true);
  }
}

// How late a worker thread starts each CPU copy: long enough that reading a copy's result without
// waiting for it reads what was there before, not what the copy brings.
constexpr auto kCpuCopyDelay = std::chrono::milliseconds(5);

// What a CPU copy's destination holds until the copy writes it: NaN (or -1 for integers), so
// that whatever reads it too early fails loudly instead of finding the old values in reused memory.
void Poison(torch::Tensor& t) {
  if (t.is_floating_point()) {
    t.fill_(std::numeric_limits<double>::quiet_NaN());
  } else {
    t.fill_(-1);
  }
}

}  // namespace

// A CPU side stream: one thread running the copies queued on it, in order.
class CopyWorker {
 public:
  CopyWorker() : thread_([this] { Run(); }) {}
  ~CopyWorker() {
    {
      std::lock_guard<std::mutex> lock(mutex_);
      stop_ = true;
    }
    wake_.notify_one();
    thread_.join();
  }
  std::shared_future<void> Submit(std::function<void()> copy) {
    std::packaged_task<void()> task(std::move(copy));
    std::shared_future<void> done = task.get_future().share();
    {
      std::lock_guard<std::mutex> lock(mutex_);
      queue_.push_back(std::move(task));
    }
    wake_.notify_one();
    return done;
  }

 private:
  void Run() {
    for (;;) {
      std::packaged_task<void()> task;
      {
        std::unique_lock<std::mutex> lock(mutex_);
        wake_.wait(lock, [this] { return stop_ || !queue_.empty(); });
        if (queue_.empty()) return;
        task = std::move(queue_.front());
        queue_.pop_front();
      }
      task();  // an exception reaches whoever waits for the ticket
    }
  }
  std::mutex mutex_;
  std::condition_variable wake_;
  std::deque<std::packaged_task<void()>> queue_;
  bool stop_ = false;
  std::thread thread_;
};

bool CopyTicket::finished() const {
  if (done != nullptr) return done->query();
  return !done_on_host.valid() || done_on_host.wait_for(std::chrono::seconds(0)) == std::future_status::ready;
}

CopyEngine::~CopyEngine() = default;

CopyEngine::CopyEngine(torch::Device device, bool threads) : device_(device) {
  if (!device_.is_cuda()) {
    threads_ = threads;
    for (int lane = 0; lane < 2 && threads_; ++lane) {
      host_workers_[lane] = std::make_unique<CopyWorker>();
      device_workers_[lane] = std::make_unique<CopyWorker>();
    }
    return;
  }
  if (!device_.has_index()) device_ = torch::Device(device_.type(), 0);
  c10::impl::VirtualGuardImpl impl(device_.type());
  for (int lane = 0; lane < 2; ++lane) {
    to_host_[lane] = std::make_unique<c10::Stream>(impl.getStreamFromGlobalPool(device_));
    to_device_[lane] = std::make_unique<c10::Stream>(impl.getStreamFromGlobalPool(device_));
  }
}

torch::Tensor CopyEngine::ToHost(const torch::Tensor& t, const CopyTicket& after, CopyTicket* done,
                                 const torch::Tensor& reuse, CopyLane lane) {
  *done = {};
  if (!asynchronous()) return HostCopy(t);
  if (threads_) {
    torch::Tensor src = t.contiguous();
    const bool fits = reuse.defined() && reuse.sizes() == src.sizes() && reuse.dtype() == src.dtype() &&
                      reuse.is_contiguous() && reuse.is_cpu();
    torch::Tensor host = fits ? reuse : HostEmptyLike(src);
    done->done_on_host = host_workers_[static_cast<int>(lane)]->Submit([src, host, after]() mutable {
      if (after.pending()) after.done_on_host.get();
      Poison(host);
      std::this_thread::sleep_for(kCpuCopyDelay);
      host.copy_(src);
    });
    return host;
  }
  const c10::Stream& side = *to_host_[static_cast<int>(lane)];
  c10::impl::VirtualGuardImpl impl(device_.type());
  const c10::Stream compute = impl.getStream(device_);
  torch::Tensor src = t.contiguous();   // (a copy kernel on the compute stream when t is a view)
  RecordOn(compute)->block(side);  // the producer's kernels come first, that copy included
  if (after.pending()) after.done->block(side);
  std::shared_ptr<c10::Event> start = timed_ ? RecordOn(side, true) : nullptr;
  torch::Tensor host;
  {
    c10::StreamGuard on_side(side);
    const bool fits = reuse.defined() && reuse.sizes() == src.sizes() && reuse.dtype() == src.dtype() &&
                      reuse.is_pinned() && reuse.is_contiguous();
    host = fits ? reuse : torch::empty(src.sizes(), src.options().device(torch::kCPU).pinned_memory(true));
    CopyInPieces(host, src, lane);
  }
  // `src` may be freed by the caller now: its memory is not reused until the copy is done.
  impl.recordDataPtrOnStream(src.storage().data_ptr(), side);
  done->done = RecordOn(side, timed_);
  if (timed_) timed_copies_.push_back({start, done->done});
  return host;
}

torch::Tensor CopyEngine::ToDevice(const torch::Tensor& host, const CopyTicket& after, CopyTicket* done,
                                   CopyLane lane) {
  *done = {};
  if (!asynchronous()) return host.clone();
  if (threads_) {
    torch::Tensor out = torch::empty(host.sizes(), host.options());  // counted by the ledger, as on a device
    Poison(out);
    done->done_on_host = device_workers_[static_cast<int>(lane)]->Submit([host, out, after]() mutable {
      if (after.pending()) after.done_on_host.get();
      std::this_thread::sleep_for(kCpuCopyDelay);
      out.copy_(host);
    });
    return out;
  }
  const c10::Stream& side = *to_device_[static_cast<int>(lane)];
  c10::impl::VirtualGuardImpl impl(device_.type());
  const c10::Stream compute = impl.getStream(device_);
  if (after.pending()) after.done->block(side);
  std::shared_ptr<c10::Event> start = timed_ ? RecordOn(side, true) : nullptr;
  torch::Tensor out;
  {
    // Allocated on the copy stream: the block cannot be one the compute stream still uses.
    c10::StreamGuard on_side(side);
    out = torch::empty(host.sizes(), host.options().device(device_));
    CopyInPieces(out, host, lane);
  }
  // The compute stream reads (and later frees) it: not reused before that work is done.
  impl.recordDataPtrOnStream(out.storage().data_ptr(), compute);
  done->done = RecordOn(side, timed_);
  if (timed_) timed_copies_.push_back({start, done->done});
  return out;
}

void CopyEngine::Wait(CopyTicket& ticket) const {
  if (!ticket.pending()) return;
  if (ticket.done_on_host.valid()) {
    ticket.done_on_host.get();  // the host is this device's compute stream
    ticket = {};
    return;
  }
  c10::impl::VirtualGuardImpl impl(device_.type());
  ticket.done->block(impl.getStream(device_));
  ticket = {};
}

void CopyEngine::Synchronize() const {
  if (!asynchronous()) return;
  if (threads_) {  // each worker runs in order: a copy queued now ends after all before it
    for (const auto* workers : {host_workers_, device_workers_})
      for (int lane = 0; lane < 2; ++lane) workers[lane]->Submit([] {}).get();
    return;
  }
  c10::impl::VirtualGuardImpl impl(device_.type());
  for (int lane = 0; lane < 2; ++lane) {
    impl.synchronizeStream(*to_host_[lane]);
    impl.synchronizeStream(*to_device_[lane]);
  }
}

}  // namespace motley
