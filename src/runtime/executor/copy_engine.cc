#include "runtime/executor/copy_engine.h"

#include <algorithm>
#include <chrono>
#include <condition_variable>
#include <deque>
#include <functional>
#include <limits>
#include <mutex>
#include <optional>
#include <thread>

#include <c10/core/StreamGuard.h>
#include <c10/core/impl/VirtualGuardImpl.h>

#include "runtime/emulation/memory_ledger.h"

namespace motley {
namespace {

std::shared_ptr<c10::Event> RecordOn(const c10::Stream& stream, bool timed = false) {
  // Events time only when asked: timing costs a little on every record.
  auto e = std::make_shared<c10::Event>(
      stream.device_type(), timed ? c10::EventFlag::BACKEND_DEFAULT : c10::EventFlag::PYTORCH_DEFAULT);
  e->record(stream);
  return e;
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

// A CPU side stream: one thread running the copies queued on it, in order (what they allocate
// counted by `ledger`: the rank's, or the process's when null).
class CopyWorker {
 public:
  explicit CopyWorker(MemoryLedger* ledger) : ledger_(ledger), thread_([this] { Run(); }) {}
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
    std::optional<MemoryLedgerScope> scope;
    if (ledger_ != nullptr) scope.emplace(ledger_);
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
  MemoryLedger* ledger_ = nullptr;
  std::thread thread_;
};

// A parameter copy in pieces, queued on its stream (or CPU worker) by Pump() a few at a time.
struct CopyJob {
  std::deque<std::function<void()>> pieces;  // each queues one piece (the first also its waits)
  std::deque<int64_t> piece_bytes;
  std::function<void()> finish;  // after the last piece: completes the ticket
  bool all_queued = false;
};

bool CopyTicket::finished() const {
  if (job != nullptr && !job->all_queued) return false;
  if (done != nullptr) return done->query();
  return !done_on_host.valid() || done_on_host.wait_for(std::chrono::seconds(0)) == std::future_status::ready;
}

CopyEngine::~CopyEngine() = default;

CopyEngine::CopyEngine(torch::Device device, bool threads, MemoryLedger* ledger) : device_(device) {
  if (!device_.is_cuda()) {
    threads_ = threads;
    piece_bytes_ = 4 << 10;
    pump_bytes_ = 8 << 10;
    for (int lane = 0; lane < 2 && threads_; ++lane) {
      host_workers_[lane] = std::make_unique<CopyWorker>(ledger);
      device_workers_[lane] = std::make_unique<CopyWorker>(ledger);
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
  QueueAll(after);                     // its completion is recorded before this copy waits for it
  torch::Tensor src = t.contiguous();  // (a copy kernel on the compute stream when t is a view)
  if (threads_) {
    const bool fits = reuse.defined() && reuse.sizes() == src.sizes() && reuse.dtype() == src.dtype() &&
                      reuse.is_contiguous() && reuse.is_cpu();
    torch::Tensor host = fits ? reuse : HostEmptyLike(src);
    auto first = [host, after]() mutable {
      if (after.pending()) after.done_on_host.get();
      Poison(host);
      std::this_thread::sleep_for(kCpuCopyDelay);
    };
    StartOnWorker(0, lane, host, src, first, done);
    return host;
  }
  const c10::Stream& side = *to_host_[static_cast<int>(lane)];
  c10::impl::VirtualGuardImpl impl(device_.type());
  const c10::Stream compute = impl.getStream(device_);
  std::shared_ptr<c10::Event> produced = RecordOn(compute);  // the producer's kernels, that copy included
  torch::Tensor host;
  {
    c10::StreamGuard on_side(side);
    const bool fits = reuse.defined() && reuse.sizes() == src.sizes() && reuse.dtype() == src.dtype() &&
                      reuse.is_pinned() && reuse.is_contiguous();
    host = fits ? reuse : torch::empty(src.sizes(), src.options().device(torch::kCPU).pinned_memory(true));
  }
  // `src` may be freed by the caller now: its memory is not reused until the copy is done.
  impl.recordDataPtrOnStream(src.storage().data_ptr(), side);
  StartOnSide(
      0, lane, side, host, src,
      [produced, after, side] {
        produced->block(side);
        if (after.pending()) after.done->block(side);
      },
      done);
  return host;
}

torch::Tensor CopyEngine::ToDevice(const torch::Tensor& host, const CopyTicket& after, CopyTicket* done,
                                   CopyLane lane) {
  *done = {};
  if (!asynchronous()) return host.clone();
  QueueAll(after);
  if (threads_) {
    torch::Tensor out = torch::empty(host.sizes(), host.options());  // counted by the ledger, as on a device
    Poison(out);
    auto first = [after] {
      if (after.pending()) after.done_on_host.get();
      std::this_thread::sleep_for(kCpuCopyDelay);
    };
    StartOnWorker(1, lane, out, host, first, done);
    return out;
  }
  const c10::Stream& side = *to_device_[static_cast<int>(lane)];
  c10::impl::VirtualGuardImpl impl(device_.type());
  const c10::Stream compute = impl.getStream(device_);
  torch::Tensor out;
  {
    // Allocated on the copy stream: the block cannot be one the compute stream still uses.
    c10::StreamGuard on_side(side);
    out = torch::empty(host.sizes(), host.options().device(device_));
  }
  // The compute stream reads (and later frees) it: not reused before that work is done.
  impl.recordDataPtrOnStream(out.storage().data_ptr(), compute);
  StartOnSide(
      1, lane, side, out, host,
      [after, side] {
        if (after.pending()) after.done->block(side);
      },
      done);
  return out;
}

void CopyEngine::StartOnWorker(int direction, CopyLane lane, torch::Tensor dst, torch::Tensor src,
                               std::function<void()> first, CopyTicket* done) {
  if (lane == CopyLane::kParams) {
    Feed(direction, std::move(dst), std::move(src), std::move(first), done);
    return;
  }
  CopyWorker& worker = *(direction == 0 ? host_workers_ : device_workers_)[static_cast<int>(lane)];
  done->done_on_host = worker.Submit([dst, src, first]() mutable {
    first();
    dst.copy_(src);
  });
}

void CopyEngine::StartOnSide(int direction, CopyLane lane, const c10::Stream& side, torch::Tensor dst,
                             torch::Tensor src, std::function<void()> first, CopyTicket* done) {
  if (lane == CopyLane::kParams) {
    Feed(direction, std::move(dst), std::move(src), std::move(first), done);
    return;
  }
  first();
  std::shared_ptr<c10::Event> start = timed_ ? RecordOn(side, true) : nullptr;
  {
    c10::StreamGuard on_side(side);
    dst.copy_(src, /*non_blocking=*/true);
  }
  done->done = RecordOn(side, timed_);
  if (timed_) timed_copies_.push_back({start, done->done});
}

void CopyEngine::Feed(int direction, torch::Tensor dst, torch::Tensor src, std::function<void()> first,
                      CopyTicket* done) {
  auto job = std::make_shared<CopyJob>();
  torch::Tensor d = dst.view(-1), s = src.view(-1);  // both contiguous
  const int64_t piece = std::max<int64_t>(1, piece_bytes_ / static_cast<int64_t>(s.element_size()));
  const int64_t n = s.numel();
  const int64_t count = std::max<int64_t>(1, (n + piece - 1) / piece);
  if (threads_) {
    CopyWorker* worker =
        (direction == 0 ? host_workers_ : device_workers_)[static_cast<int>(CopyLane::kParams)].get();
    auto finished = std::make_shared<std::promise<void>>();
    auto failed = std::make_shared<bool>(false);  // read and written on the worker only
    done->done_on_host = finished->get_future().share();
    for (int64_t k = 0; k < count; ++k) {
      const int64_t at = k * piece, len = std::min(piece, n - at);
      const bool last = k + 1 == count;
      std::function<void()> before = k == 0 ? first : std::function<void()>();
      job->pieces.push_back([worker, d, s, at, len, last, before, finished, failed] {
        worker->Submit([d, s, at, len, last, before, finished, failed]() mutable {
          if (*failed) return;
          try {
            if (before) before();
            if (len > 0) d.narrow(0, at, len).copy_(s.narrow(0, at, len));
            if (last) finished->set_value();
          } catch (...) {
            *failed = true;
            finished->set_exception(std::current_exception());
          }
        });
      });
      job->piece_bytes.push_back(len * static_cast<int64_t>(s.element_size()));
    }
    job->finish = [] {};
  } else {
    const c10::Stream side = *(direction == 0 ? to_host_ : to_device_)[static_cast<int>(CopyLane::kParams)];
    std::shared_ptr<c10::Event> start =
        timed_ ? std::make_shared<c10::Event>(side.device_type(), c10::EventFlag::BACKEND_DEFAULT) : nullptr;
    done->done = std::make_shared<c10::Event>(
        side.device_type(), timed_ ? c10::EventFlag::BACKEND_DEFAULT : c10::EventFlag::PYTORCH_DEFAULT);
    for (int64_t k = 0; k < count; ++k) {
      const int64_t at = k * piece, len = std::min(piece, n - at);
      std::function<void()> before = k == 0 ? first : std::function<void()>();
      job->pieces.push_back([side, d, s, at, len, before, start]() mutable {
        if (before) before();
        if (start && before) start->record(side);
        c10::StreamGuard on_side(side);
        if (len > 0) d.narrow(0, at, len).copy_(s.narrow(0, at, len), /*non_blocking=*/true);
      });
      job->piece_bytes.push_back(len * static_cast<int64_t>(s.element_size()));
    }
    job->finish = [side, event = done->done] { event->record(side); };
    if (timed_) timed_copies_.push_back({start, done->done});
  }
  done->job = job;
  feeding_[direction].push_back(job);
  Queue(direction, pump_bytes_);
}

void CopyEngine::Queue(int direction, int64_t bytes) {
  auto& jobs = feeding_[direction];
  while (!jobs.empty() && bytes > 0) {
    CopyJob& job = *jobs.front();
    bytes -= job.piece_bytes.front();
    job.pieces.front()();  // the piece's tensors are released once it is queued
    job.pieces.pop_front();
    job.piece_bytes.pop_front();
    if (job.pieces.empty()) {
      job.finish();
      job.finish = nullptr;
      job.all_queued = true;
      jobs.pop_front();
    }
  }
}

void CopyEngine::QueueAll(const CopyTicket& ticket) {
  if (ticket.job == nullptr) return;
  for (int direction = 0; direction < 2 && !ticket.job->all_queued; ++direction)
    if (std::find(feeding_[direction].begin(), feeding_[direction].end(), ticket.job) !=
        feeding_[direction].end())
      while (!ticket.job->all_queued) Queue(direction, 1);  // a piece at a time, up to and including it
}

int64_t CopyEngine::unqueued_bytes() const {
  int64_t bytes = 0;
  for (const auto& jobs : feeding_)
    for (const auto& job : jobs)
      for (int64_t b : job->piece_bytes) bytes += b;
  return bytes;
}

void CopyEngine::Pump() {
  for (int direction = 0; direction < 2; ++direction) Queue(direction, pump_bytes_);
}

void CopyEngine::Wait(CopyTicket& ticket) {
  QueueAll(ticket);
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

void CopyEngine::Synchronize() {
  if (!asynchronous()) return;
  for (int direction = 0; direction < 2; ++direction) Queue(direction, std::numeric_limits<int64_t>::max());
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
