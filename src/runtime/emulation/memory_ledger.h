// MemoryLedger: the memory of an emulated device (docs/design.md, "Device
// emulation"). Installed as libtorch's CPU allocator, it counts every byte the process's tensors hold
// — the rank's "device" memory — and refuses an allocation that would pass the emulated capacity
// with c10::OutOfMemoryError, the error a GPU's allocator raises, so the profiler and the runtime
// handle emulated and real out-of-memory alike. Host memory (offloaded parameters, activations)
// is allocated outside the ledger (HostTensor), as pinned host memory is outside a GPU's.
#pragma once

#include <atomic>
#include <cstdint>
#include <string>

#include <torch/torch.h>

namespace motley {

class MemoryLedger {
 public:
  /// The process's ledger, installed on first use (it wraps the default CPU allocator).
  static MemoryLedger& Install();
  /// The ledger the calling thread's allocations go to: its MemoryLedgerScope's, else the process's
  /// (installing it).
  static MemoryLedger& Current();
  /// A ledger of its own, for one rank of several run as threads of one process (an in-process
  /// test): allocations go to it on a thread inside its MemoryLedgerScope. The process's ledger
  /// must be installed (Install) for any ledger to count.
  MemoryLedger() = default;
  MemoryLedger(const MemoryLedger&) = delete;
  MemoryLedger& operator=(const MemoryLedger&) = delete;

  /// 0 = no limit (count only).
  void set_capacity_bytes(int64_t bytes) { capacity_bytes_ = bytes; }
  int64_t capacity_bytes() const { return capacity_bytes_; }
  /// Named in out-of-memory messages ("rank 2 (device 2, emulated)").
  void set_owner(std::string owner);
  int64_t used_bytes() const { return used_bytes_; }
  int64_t peak_bytes() const { return peak_bytes_; }
  /// Starts a new peak measurement from the current use.
  void ResetPeak() { peak_bytes_ = used_bytes_.load(); }
  /// Host memory: what tensors made in a HostMemoryScope hold (never limited), and its peak since
  /// ResetHostPeak — e.g. what a checkpoint gathers onto a rank.
  int64_t host_used_bytes() const { return host_used_bytes_; }
  int64_t host_peak_bytes() const { return host_peak_bytes_; }
  void ResetHostPeak() { host_peak_bytes_ = host_used_bytes_.load(); }

  // Allocator plumbing (memory_ledger.cc).
  bool Reserve(int64_t bytes);
  void Release(int64_t bytes) { used_bytes_ -= bytes; }
  void ReserveHost(int64_t bytes) {
    const int64_t now = host_used_bytes_ += bytes;
    for (int64_t peak = host_peak_bytes_; now > peak && !host_peak_bytes_.compare_exchange_weak(peak, now);) {
    }
  }
  void ReleaseHost(int64_t bytes) { host_used_bytes_ -= bytes; }
  std::string OutOfMemoryMessage(int64_t bytes) const;

 private:
  std::atomic<int64_t> capacity_bytes_{0};
  std::atomic<int64_t> used_bytes_{0};
  std::atomic<int64_t> peak_bytes_{0};
  std::atomic<int64_t> host_used_bytes_{0};
  std::atomic<int64_t> host_peak_bytes_{0};
  std::string owner_ = "this process";
};

/// While one is alive on a thread, the tensors that thread allocates are counted by `ledger` (and
/// released to it when freed, on any thread); nests. Work libtorch hands to its own threads (an
/// intra-op pool) counts in the process's ledger: give ranks in threads one torch thread each.
class MemoryLedgerScope {
 public:
  explicit MemoryLedgerScope(MemoryLedger* ledger);
  ~MemoryLedgerScope();
  MemoryLedgerScope(const MemoryLedgerScope&) = delete;
  MemoryLedgerScope& operator=(const MemoryLedgerScope&) = delete;

 private:
  MemoryLedger* previous_;
};

/// While one is alive on a thread, the tensors that thread allocates are host memory, outside the
/// ledger (and stay outside it when freed): the whole model gathered onto a rank for validation or
/// a checkpoint, as a GPU rank gathers it to the CPU. Nests.
class HostMemoryScope {
 public:
  HostMemoryScope();
  ~HostMemoryScope();
  HostMemoryScope(const HostMemoryScope&) = delete;
  HostMemoryScope& operator=(const HostMemoryScope&) = delete;
  /// Whether the calling thread is in one.
  static bool active();
};

/// A CPU tensor outside the ledger: host memory of an emulated device (pinned when CUDA is in use),
/// holding a copy of `src`.
torch::Tensor HostCopy(const torch::Tensor& src);
/// An uninitialised CPU tensor outside the ledger (not pinned), of `like`'s shape and dtype.
torch::Tensor HostEmptyLike(const torch::Tensor& like);

}  // namespace motley
