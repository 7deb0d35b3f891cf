// CopyEngine: the copies between device and host memory that offload and prefetch make.
//
// On a GPU they run on side streams — device-to-host and host-to-device apart, since the link is
// full duplex, and activations apart from parameters, so that a microbatch's boundary (megabytes,
// needed now) does not queue behind a ministage's moments (gigabytes, needed at its update) —
// into pinned host memory, so they overlap compute (Zorse §4.2). Each
// copy hands back a ticket; the compute stream waits for a ticket on the device (the host thread
// runs on) before it reads what the copy wrote. Memory safety across streams is the caching
// allocator's record-stream mechanism: a tensor used on another stream than the one it was made
// on is not reused until that stream's work is done.
//
// On CPU the copies are plain and synchronous: offloaded copies live outside the memory ledger
// (HostCopy), prefetched ones are new ledger-counted tensors; tickets stay empty. With
// `threads`, CPU copies are asynchronous instead, each direction and lane a worker thread that
// runs its copies in order (like a side stream) a little late, into a destination that holds NaN
// until then, and Wait() blocks the host until the copy is done: the asynchronous path the executor takes on
// a GPU — tickets, deferred gathers, reused host buffers — then runs in CPU tests, where a missing wait reads
// a half-made tensor.
//
// A parameter lane's copy (a ministage's shard and moments: gigabytes) is fed to its stream a
// piece at a time: Pump() (the executor calls it before every op) queues the next pieces of each
// direction, a bounded amount per call. A copy engine serves a direction's queued copies in the
// order they were queued, whatever their stream, so a parameter copy queued whole holds every
// activation copy queued after it (the GPU trace of issue #6: a backward waited 43 ms for a 2.5 GB
// prefetch); fed, it holds one for a few pieces at most. Waiting for a ticket (Wait, a later copy's
// `after`, Synchronize) queues what is left of it first; finished() is false until it is all queued.
//
// Device-generic c10 API only (c10::Stream, c10::Event, VirtualGuardImpl), so the same source
// builds against the CPU-only libtorch.
#pragma once

#include <deque>
#include <functional>
#include <future>
#include <memory>
#include <utility>
#include <vector>

#include <c10/core/Event.h>
#include <c10/core/Stream.h>
#include <torch/torch.h>

namespace motley {

class MemoryLedger;  // runtime/emulation/memory_ledger.h

/// Which side streams a copy takes.
enum class CopyLane { kParams, kActivations };

struct CopyJob;  // a parameter copy still being fed to its stream (copy_engine.cc)

/// An asynchronous copy's completion; empty when there is nothing to wait for.
struct CopyTicket {
  std::shared_ptr<c10::Event> done;       // on a GPU: recorded on the copy's side stream
  std::shared_future<void> done_on_host;  // CPU copies on threads: the copy's last task
  std::shared_ptr<CopyJob> job;           // a fed copy: `done` is recorded once all of it is queued
  bool pending() const { return done != nullptr || done_on_host.valid(); }
  /// The copy is done (asks; never waits).
  bool finished() const;
};

class CopyWorker;

class CopyEngine {
 public:
  /// `threads`: CPU copies on worker threads (see above; what they allocate counted by `ledger`, the
  /// rank's — the process's when null); ignored on a GPU.
  explicit CopyEngine(torch::Device device, bool threads = false, MemoryLedger* ledger = nullptr);
  ~CopyEngine();

  torch::Device device() const { return device_; }
  bool asynchronous() const { return device_.is_cuda() || threads_; }

  /// Starts copying `t` (on the device) to host memory once the work queued so far on the
  /// compute stream (which writes it) and `after` are done. `t` may be dropped at once. The host
  /// tensor must not be read on the host before Synchronize(). On a GPU, `reuse` (a host tensor
  /// this engine made, of t's shape, whose readers are covered by `after`) is written in place
  /// rather than a new pinned buffer allocated.
  torch::Tensor ToHost(const torch::Tensor& t, const CopyTicket& after, CopyTicket* done,
                       const torch::Tensor& reuse = {}, CopyLane lane = CopyLane::kParams);
  /// Starts copying a host tensor into a new device tensor, after `after` (the copy that filled
  /// the host tensor). Compute must Wait(*done) before reading the result.
  torch::Tensor ToDevice(const torch::Tensor& host, const CopyTicket& after, CopyTicket* done,
                         CopyLane lane = CopyLane::kParams);
  /// The compute stream waits for the copy (the host does not); the ticket is cleared.
  void Wait(CopyTicket& ticket);
  /// The host waits for every copy started so far.
  void Synchronize();
  /// Queues the next pieces of the parameter copies being fed: up to pump_bytes() each direction.
  void Pump();
  /// A parameter copy's piece, and how much of them each direction queues per Pump(): 64 and 128
  /// MiB on a GPU (~1.3 and 2.6 ms at 50 GB/s); 4 and 8 KiB with CPU threads, so that a test
  /// model's copy spans several ops there too.
  int64_t piece_bytes() const { return piece_bytes_; }
  int64_t pump_bytes() const { return pump_bytes_; }
  /// Bytes of parameter copies started but not yet queued on their streams.
  int64_t unqueued_bytes() const;

  /// GPU only: while on, every copy is bracketed by timing events on its side stream (a traced
  /// step's copy spans, see cuda_device.h's EventSeconds).
  void set_timed(bool on) { timed_ = on && asynchronous(); }
  struct TimedCopy {
    std::shared_ptr<c10::Event> start, done;
  };
  /// The timed copies started since the last call.
  std::vector<TimedCopy> TakeTimedCopies() { return std::exchange(timed_copies_, {}); }

 private:
  torch::Device device_;
  // Side streams (GPU only), by lane: [kParams, kActivations].
  std::unique_ptr<c10::Stream> to_host_[2], to_device_[2];
  // CPU copies on threads, by lane: [kParams, kActivations].
  bool threads_ = false;
  std::unique_ptr<CopyWorker> host_workers_[2], device_workers_[2];
  bool timed_ = false;
  std::vector<TimedCopy> timed_copies_;
  int64_t piece_bytes_ = 64LL << 20, pump_bytes_ = 128LL << 20;
  // Parameter copies being fed, by direction [to host, to device], in the order they were started.
  std::deque<std::shared_ptr<CopyJob>> feeding_[2];

  // CPU threads: the same on the lane's worker.
  void StartOnWorker(int direction, CopyLane lane, torch::Tensor dst, torch::Tensor src,
                     std::function<void()> first, CopyTicket* done);
  // GPU: copies `src` into `dst` on `side` after `first` (the waits the copy starts after): at once
  // for activations, fed in pieces for parameters. `direction`: 0 to host, 1 to device.
  void StartOnSide(int direction, CopyLane lane, const c10::Stream& side, torch::Tensor dst,
                   torch::Tensor src, std::function<void()> first, CopyTicket* done);
  // A parameter-lane copy of `src` into `dst` in pieces, fed by Pump(); `first` runs before the
  // first piece (the waits the copy starts after).
  void Feed(int direction, torch::Tensor dst, torch::Tensor src, std::function<void()> first,
            CopyTicket* done);
  void Queue(int direction, int64_t bytes);  // queues pieces of that direction's jobs, up to `bytes`
  void QueueAll(const CopyTicket& ticket);   // queues the rest of `ticket`'s copy (and those before it)
};

}  // namespace motley
