// Communicator: motley's collectives and point-to-point transfers over c10d — Gloo for CPU
// tensors (here, CI, emulated devices, and the small CPU-side exchanges of GPU runs), NCCL for
// GPU tensors (CommConfig::gpu; one GPU per rank). Each operation picks by its tensor's device.
// PyTorch's pip wheels ship no Gloo headers: built against one (scripts/build-gpu.sh), motley has
// NCCL only, and the CPU-side exchanges of a GPU run travel through the GPU. Every operation returns a
// Status: a timeout or a broken connection becomes an error naming the operation, its peers and the rank that
// stopped responding, never a hang.
//
// A watchdog thread beats a heartbeat in the rendezvous store every second and watches the other
// ranks': when one stops for `heartbeat_timeout_s` (it crashed or was killed), this process prints
// which rank and exits — even while its main thread is blocked in a collective. A rank that ends
// with an error (ReportFailure: out of memory, bad data) is named the same way, with its error.
//
// Gloo (libtorch 1.13) lacks reduce-scatter: it runs as all-to-all plus a local sum (the same
// traffic). Groups must be created by every rank of the world, in the same order.
//
// Point-to-point transfers match in the order they are issued, on every backend: rank a's k-th
// send to b meets b's k-th receive from a, whatever the tags (which name the transfer in errors).
// That is NCCL's rule; Gloo is made to follow it (one tag per pair), so that CPU runs test the
// order GPU runs rely on (plan/transfer_order.h checks that schedules keep it). On NCCL each
// direction of a pair has its own two-rank process group, made on first use: ProcessGroupNCCL
// puts both directions of a pair on one stream, where a's large send to b and b's to a, each
// waiting for a receive queued behind the other, would wait forever.
#pragma once

#include <atomic>
#include <functional>
#include <map>
#include <memory>
#include <mutex>
#include <optional>
#include <set>
#include <string>
#include <thread>
#include <vector>

#include <torch/torch.h>
#include <torch/csrc/distributed/c10d/Store.hpp>
#include <torch/csrc/distributed/c10d/Work.hpp>

#include "core/rendezvous.h"
#include "core/status.h"
#include "runtime/comm/nccl_backend.h"

namespace motley {

struct CommConfig {
  double timeout_s = 120;          // one operation's limit
  double connect_timeout_s = 120;  // waiting for every rank at start-up
  double heartbeat_interval_s = 1;
  double heartbeat_timeout_s = 15;  // silence after which a rank counts as dead; 0 = no watchdog
  bool gpu = false;                 // also an NCCL group beside each Gloo one, for CUDA tensors
};

/// A set of ranks that communicate together (the world, a pipeline stage's ZeRO group, ...).
struct CommGroup {
  std::vector<int> ranks;  // world ranks, in order
  int index = -1;          // this rank's position in `ranks`; -1 when not a member
  std::string name;
  c10::intrusive_ptr<CommBackend> pg;      // Gloo: CPU tensors (null in builds without Gloo)
  c10::intrusive_ptr<CommBackend> gpu_pg;  // NCCL: CUDA tensors (CommConfig::gpu)
  int size() const { return static_cast<int>(ranks.size()); }
};

/// An operation in flight (a non-blocking send, receive or collective). Wait() blocks until it is
/// done, then runs its completion step (reduce-scatter's local sum); a second Wait() returns at once.
class PendingTransfer {
 public:
  PendingTransfer() = default;
  PendingTransfer(c10::intrusive_ptr<c10d::Work> work, std::string what, class Communicator* comm,
                  std::function<void()> then = {});
  /// Several operations that complete together (issued in this order on every member).
  PendingTransfer(std::vector<c10::intrusive_ptr<c10d::Work>> works, std::string what,
                  class Communicator* comm, std::function<void()> then = {});
  Status Wait();
  /// Whether Wait() would return at once (never blocks).
  bool Done() const;

 private:
  std::vector<c10::intrusive_ptr<c10d::Work>> works_;
  std::string what_;
  class Communicator* comm_ = nullptr;
  std::function<void()> then_;
};

class Communicator {
 public:
  /// Connects to the rendezvous store (rank 0 hosts it) and builds the world group.
  static Result<std::unique_ptr<Communicator>> Connect(const Rendezvous& rv, const CommConfig& config = {});
  ~Communicator();  // tells the watchdogs this rank finished normally

  int rank() const { return rv_.rank; }
  int world_size() const { return rv_.world_size; }
  CommGroup& world() { return *world_; }
  /// Collective over the world: every rank calls it with the same `ranks`, in the same order.
  Result<CommGroup*> NewGroup(std::vector<int> ranks);
  /// A world of its own inside this one (an island of a run across islands): `ranks` (world ranks,
  /// in order; this rank among them) numbered from 0, with its own groups and transfers, keyed under
  /// `name` in this world's store. Failures are this world's: a report, a diagnosis and the watchdog
  /// go through it (naming world ranks). Called by the members only, each once for `name`; it must
  /// not outlive this communicator.
  Result<std::unique_ptr<Communicator>> Within(const std::vector<int>& ranks, const std::string& name);

  // Blocking collectives; the Start* forms return at once (the tensors must stay alive and
  // untouched until Wait()). A group of one completes at once.
  Status AllReduceSum(CommGroup& g, torch::Tensor& t);
  /// An all-reduce that reaches the backend even in a group of one (which AllReduceSum skips):
  /// NCCL sets up its communicator and buffers on its first collective (profile's reserve probe).
  Status AllReduceOnBackend(CommGroup& g, torch::Tensor& t);
  Result<PendingTransfer> StartAllReduceSum(CommGroup& g, torch::Tensor& t);
  Result<PendingTransfer> StartAllGather(CommGroup& g, const torch::Tensor& shard, torch::Tensor& out,
                                         const std::vector<int64_t>& counts = {});
  Result<PendingTransfer> StartReduceScatterSum(CommGroup& g, const torch::Tensor& in, torch::Tensor& out,
                                                const std::vector<int64_t>& counts = {});
  /// `out` = the members' `shard`s concatenated in group order: equal sizes, or member i's
  /// `counts[i]` elements (uneven state shares); `shard` may be this member's own part of `out`
  /// (in place).
  Status AllGather(CommGroup& g, const torch::Tensor& shard, torch::Tensor& out,
                   const std::vector<int64_t>& counts = {});
  /// `out` = this member's chunk of the sum of every member's `in` (in split into size() equal
  /// chunks, or into chunks of `counts[i]` elements).
  Status ReduceScatterSum(CommGroup& g, const torch::Tensor& in, torch::Tensor& out,
                          const std::vector<int64_t>& counts = {});
  Status Broadcast(CommGroup& g, torch::Tensor& t, int root_index);
  /// The members' `t` summed into the root's `t` (the others' `t` are left undefined in value).
  Status ReduceSum(CommGroup& g, torch::Tensor& t, int root_index);
  Status Barrier(CommGroup& g);
  Result<PendingTransfer> Send(const torch::Tensor& t, int peer, int64_t tag);
  Result<PendingTransfer> Recv(torch::Tensor& t, int peer, int64_t tag);

  /// Why an operation failed: a rank that reported a failure, the ranks whose heartbeats stopped
  /// (waits up to the heartbeat timeout for the evidence), or that none did.
  std::string DiagnoseFailure();
  /// Whether another rank has reported a failure (ReportFailure) before any of this rank's: this
  /// rank's own error is then a consequence, and it exits as kExitPeerFailed (core/exit_codes.h).
  bool AnotherRankFailedFirst();
  /// This rank ends with an error: says so in the rendezvous store, where every other rank's
  /// watchdog reads it within a heartbeat and exits naming this rank and `why` — instead of waiting
  /// in a collective with it until the operation's timeout.
  void ReportFailure(const std::string& why);

  /// Live islands: this rank goes on when one of `ranks` (world ranks) is lost — its heartbeat stops
  /// for the heartbeat timeout, or it reports a failure: the watchdog records it (ArrivedOrLost counts it
  /// lost) instead of ending this process, and its report is not taken for this rank's cause. Called before a
  /// loss.
  void Tolerate(const std::vector<int>& ranks);
  /// Waits until each of `ranks` has either arrived — set `key` + "/<its rank>" (SetValue) — or is lost
  /// (at most the operation timeout): the lost among them.
  Result<std::vector<int>> ArrivedOrLost(const std::vector<int>& ranks, const std::string& key);
  /// A value under `key` in this world's rendezvous store, and the wait for one (up to the operation
  /// timeout; an error names the key).
  Status SetValue(const std::string& key, const std::string& value);
  void DeleteValue(const std::string& key);  // (best effort: the store keeps nothing it no longer needs)
  Result<std::string> WaitValue(const std::string& key);
  /// The value under `key` if one is set (never waits).
  Result<std::optional<std::string>> ValueIfSet(const std::string& key);
  /// Sets `value` under `key` unless a value is there already: the value there after (the first
  /// writer's — of ranks racing to write one word, all read the same).
  Result<std::string> SetValueOnce(const std::string& key, const std::string& value);
  /// Live islands: whether `rank` (a tolerated one) is lost in this rank's view.
  bool Lost(int rank);
  double timeout_s() const { return config_.timeout_s; }

 private:
  Communicator() = default;
  Status Run(const std::string& what, const std::function<c10::intrusive_ptr<c10d::Work>()>& start);
  /// The group's process group for tensors on `t`'s device.
  Result<CommBackend*> For(CommGroup& g, const torch::Tensor& t);
  /// An all-reduce started on the group's backend, whatever the group's size.
  Result<PendingTransfer> StartBackendAllReduce(CommGroup& g, torch::Tensor& t);
  /// A CPU tensor that must travel through the GPU (no Gloo in this build): its GPU copy, and the
  /// completion step that copies the result back (none for inputs). Otherwise `t` itself.
  torch::Tensor Stage(CommGroup& g, const torch::Tensor& t, bool result, std::function<void()>* back);
  /// Where a transfer between this rank and `peer` goes: the process group, the peer's rank in
  /// it, and the tag the backend sees.
  struct Route {
    CommBackend* pg = nullptr;
    int peer = -1;
    int tag = 0;
  };
  Result<Route> RouteFor(const torch::Tensor& t, int peer, bool sending);
  /// Gloo (and NCCL with CommConfig::gpu) process groups for group `g` as member `index` of `size`.
  Status MakeProcessGroups(CommGroup& g, const std::string& prefix);
  /// The error for `what` failing with `e`, with DiagnoseFailure()'s verdict.
  Status Failed(const std::string& what, const std::exception& e);
  void Watch();

  Rendezvous rv_;
  CommConfig config_;
  Communicator* outer_ = nullptr;    // Within's: the world this one lies in
  torch::Device gpu_ = torch::kCPU;  // this rank's GPU with CommConfig::gpu
  c10::intrusive_ptr<c10d::Store> store_, watch_store_;
  std::unique_ptr<CommGroup> world_;
  std::vector<std::unique_ptr<CommGroup>> groups_;
  std::mutex links_mutex_;
  std::map<std::pair<int, int>, c10::intrusive_ptr<CommBackend>> links_;  // NCCL, (from, to) -> group of two
  std::thread watchdog_;
  std::atomic<bool> stop_{false};
  std::atomic<bool> reported_{false};  // ReportFailure was called
  // Live islands: the ranks whose loss this rank survives, those lost, and when each rank's heartbeat
  // last changed (the watchdog's view).
  std::mutex watch_mutex_;
  std::set<int> tolerated_, lost_;
  bool Tolerated(int rank);
  void Lose(int rank, const std::string& why);
  friend class PendingTransfer;
};

}  // namespace motley
