// Executor: runs one rank's program of a Schedule (plan/schedule.h) with tensors — the runtime
// twin of the simulator. Ops run in program order on one thread; sends and receives are
// non-blocking and waited for by the op that needs their data, collectives block. Because every
// program is a subsequence of one global order in which each receive follows its send
// (plan/lower.h), this cannot deadlock.
//
// What each op does:
//   Forward      the ministage on microbatch m without keeping a graph (checkpointing: only its
//                input, the layer boundary, is kept); the last ministage also computes the loss.
//   Backward     recomputes the ministage from its boundary with a graph, back-propagates the
//                received output gradient (or the loss) and adds the parameter gradients into the
//                flat gradient buffer.
//   Send/Recv    activations (forward) and their gradients (backward) between ranks.
//   AllGather    the parameter shards into the full flat buffer (ZeRO-3 and offload before a
//                visit; ZeRO-1/2 after the optimizer step).
//   ReduceScatter / AllReduce   the gradients, summed (token-weighted: each microbatch's loss is
//                its mean cross-entropy times its share of the global batch).
//   OptimizerStep AdamW on the owned shard.
//   Param/ActOffload, Param/ActPrefetch   copies to and from host memory (CopyEngine: on side
//                streams on a GPU, waited for by the first op that reads what they wrote).
//   GradNorm     gradient clipping: the global gradient norm and the loss, summed over every rank
//                (the lowering puts the updates after it).
// The executor follows the schedule alone: what each op reads, writes and frees (Op::reads,
// writes, frees), the state a step starts from (Program::resident), the ministages and how their
// state is held (Schedule) — never the Plan.
//
// Device emulation: compute ops are stretched by the rank's speed factor, transfers to the
// cluster's link bandwidths; the memory ledger enforces the emulated capacity.
#pragma once

#include <functional>
#include <map>
#include <memory>
#include <optional>
#include <set>
#include <string>
#include <tuple>
#include <vector>

#include <torch/torch.h>

#include "core/cluster.h"
#include "core/job.h"
#include "core/status.h"
#include "plan/schedule.h"
#include "runtime/comm/comm_clock.h"
#include "runtime/comm/communicator.h"
#include "runtime/emulation/device_emulation.h"
#include "runtime/executor/copy_engine.h"
#include "runtime/executor/ministage_state.h"
#include "runtime/flextp/flextp_team.h"
#include "runtime/model/llama_model.h"
#include "runtime/model/tensor_parallel.h"
#include "runtime/optim/state_piece.h"
#include "sim/simulator.h"

namespace motley {

class MemoryLedger;  // runtime/emulation/memory_ledger.h

using ShardSource = std::function<Status(const std::string& name, int64_t begin, torch::Tensor dest)>;

struct ExecutorConfig {
  torch::Device device = torch::kCPU;
  torch::Dtype master_dtype = torch::kFloat32;  // parameters, gradients, moments (fp64 in fp64)
  std::optional<torch::Dtype> compute_dtype;    // mixed precision's bf16; unset: the master dtype
  OptimizerConfig optimizer;
  bool record_trace = false;                  // keep every op's start and end (seconds from the step's start)
  TensorParallelConfig tensor_parallel;       // FlexTP in tensor-parallel teams (flextp_team.h)
  std::vector<EmulatedStraggler> stragglers;  // run-time slowdowns of ranks
  bool cpu_copy_threads =
      false;  // tests: CPU offload copies asynchronous on threads, as on a GPU (copy_engine.h)
  /// Where a ZeRO-3 rank's master shard comes from when the model holds placeholders for its
  /// parameters (LlamaModelImpl's `materialize`: a run that starts from a folder reads its shards
  /// only): elements [begin, begin + dest.numel()) of parameter `name`, flattened, into `dest`.
  ShardSource shard_source;
  /// This rank's memory ledger (memory_ledger.h), counting what the executor and its copy threads
  /// allocate — for ranks run as threads of one process; null: the process's ledger.
  MemoryLedger* ledger = nullptr;
};

/// One step's inputs on this rank.
/// Faults a test injects into one rank's step (TrainOptions::faults says which rank and step).
struct StepFaults {
  bool die_mid_step = false;  // SIGKILL this process halfway through the program
  // This rank's loss of global microbatch `loss_factor_microbatch` (every microbatch it computes
  // the loss of, when -1) is multiplied by `loss_factor` — 0 drops the microbatch, 1 + 1e-6 scales
  // its gradients slightly (a comparison must see it), NaN makes the run diverge.
  double loss_factor = 1;
  int64_t loss_factor_microbatch = -1;
  bool inject_overflow = false;  // an infinite gradient on this rank this step (loss scaling)
};

struct StepInputs {
  int64_t step = 0;  // 0-based
  double lr = 0;
  int64_t update = 1;  // AdamW's step count, from 1
  /// Token windows [n, seq + 1] (int64, CPU) for the global batch's sequences [first, first + n).
  std::function<torch::Tensor(int64_t first, int64_t n)> tokens;
  /// Loss scaling (Schedule::loss_scaling): the backwards run on the loss times this; the updates
  /// divide it out, or are all skipped when any rank's gradients overflowed.
  double loss_scale = 1;
  StepFaults faults;  // tests only
};

/// What one rank did in one step.
struct RankStepReport {
  double loss = 0;       // the global batch's mean loss (the same on every rank)
  double grad_norm = 0;  // global, before clipping (the same on every rank); unscaled
  bool skipped = false;  // loss scaling: a gradient overflowed on some rank, so no rank updated
  // The step's loss or gradient norm was not finite (without loss scaling): where the norm was
  // summed before the updates (clipping), no rank updated; the ranks whose own part was not finite.
  bool diverged = false;
  std::vector<int>
      diverged_ranks;       // where it began: the ranks whose own loss was not finite, else own gradients
  std::string diverged_in;  // "loss" or "gradients"
  double step_s = 0;
  double compute_s = 0;  // forward, backward and optimizer ops (emulated slowness included)
  double comm_s = 0;     // collectives and waits for transfers (waiting for peers included)
  double copy_s = 0;     // offload and prefetch copies
  // Emulated devices: how far compute ran past the emulated speed because the host made it wait
  // (ranks sharing its cores), less what later ops of the step made up (DeviceEmulation::StretchCompute).
  double late_s = 0;
  double bytes_sent = 0;          // point-to-point and this rank's share of collective traffic
  double peak_memory_bytes = 0;   // the memory ledger's peak during the step
  double pruned_fraction = 0;     // FlexTP: the share of this rank's team's MLP units pruned (lossy modes)
  int64_t migrated_units = 0;     // FlexTP: MLP units its team's stragglers had computed by others
  FlexTpRankLoad flextp;          // FlexTP: this rank's part of its team's balance this step
  std::vector<TraceEvent> trace;  // with ExecutorConfig::record_trace
};

/// The parameters (Hugging Face names) `rank` holds under `schedule`: its group's ministages'.
std::set<std::string> RankParameterNames(const Schedule& schedule, int rank, LlamaModelImpl& model);

class Executor {
 public:
  /// Builds this rank's state: its ministages' flat buffers and shards (from the model's current
  /// parameters), the communication groups. Collective: every rank calls it with the same schedule.
  /// The cluster is for device emulation only.
  static Result<std::unique_ptr<Executor>> Create(const Schedule& schedule, const Cluster& cluster,
                                                  LlamaModel model, Communicator* comm,
                                                  const ExecutorConfig& config);

  Result<RankStepReport> RunStep(const StepInputs& in);

  /// The full parameters and AdamW moments of every ministage, on rank 0 (empty elsewhere), keyed
  /// by parameter name, in the model's shapes. Collective.
  struct FullState {
    std::map<std::string, torch::Tensor> params, exp_avg, exp_avg_sq;
  };
  Result<FullState> GatherFullState();
  /// The state this rank owns, for a sharded checkpoint: each piece once across the cluster (a
  /// ZeRO-0 replica other than the first, and a tensor-parallel rank's copy of a weight its team does
  /// not split, hold copies and give none). On the CPU.
  std::vector<StatePiece> OwnedState();
  /// An outer round's piece of ministage `v` (plan/outer_round.h): the master values this rank
  /// updates, as a view to write in place — its ZeRO shard (offloaded: the host copy, which the next
  /// prefetch carries to the device), or with ZeRO-0 its even part of the replicated parameters. An
  /// error where a step would not see the change (a full copy kept gathered apart from the shard).
  Result<torch::Tensor> OuterPiece(int v);
  /// Where ministage `v`'s outer-round piece begins in its flat parameters, and its values.
  std::pair<int64_t, int64_t> OuterRange(int v) const;
  /// Streaming fragments (plan/outer_round.h): where the values of fragment `fragment` of `fragments`
  /// (the parameters of the model's parts numbered so, ModelPartOf) lie in ministage `v`'s outer-round
  /// piece — [begin, begin + count) each, in order, none touching the next; one fragment: the piece.
  std::vector<std::pair<int64_t, int64_t>> OuterFragmentRanges(int v, int fragment, int fragments) const;
  /// After the outer step of ministage `v`'s pieces: the island's replicas of it (`group` over `comm`,
  /// in replica order) gather each other's new pieces into their full parameters.
  Status GatherOuterPieces(int v, Communicator& comm, CommGroup& group);
  /// Islands' checkpoints (planned_islands.cc): the whole outer state of every ministage, gathered on
  /// rank 0 as GatherFullState's exp_avg, from this rank's outer-round pieces of it (`pieces`: by
  /// ministage, OuterPiece's layout; a ZeRO-0 replica's part joined with the others' over `replicas`,
  /// its ministages' gather groups in the round). Collective over this rank's world (and those groups).
  Result<std::map<std::string, torch::Tensor>> GatherOuterState(const std::map<int, torch::Tensor>& pieces,
                                                                Communicator& comm,
                                                                const std::map<int, CommGroup*>& replicas);
  /// A sharded checkpoint of islands: OwnedState with each piece's outer momentum
  /// (StatePiece::outer_momentum) from this rank's outer-round pieces of it (`pieces`, `replicas`: as
  /// GatherOuterState takes them). Nothing is gathered but a ZeRO-0 replica's parts (over `replicas`).
  Result<std::vector<StatePiece>> OwnedStateWithOuter(const std::map<int, torch::Tensor>& pieces,
                                                      Communicator& comm,
                                                      const std::map<int, CommGroup*>& replicas);
  /// Resuming islands: ministage `v`'s outer-round piece (OuterPiece's layout) of a state held as whole
  /// parameters by name (a checkpoint's); `names` before, the parameters it needs.
  Result<torch::Tensor> OuterPieceFrom(int v, const std::map<std::string, torch::Tensor>& whole);
  std::vector<std::string> ParameterNames(int v) const;
  /// Islands of unlike shapes (plan/outer_round.h) exchange whole fragments: a fragment's parameters
  /// (an outer-round op's embedding, head or layer), by ParameterNames' names, in order;
  std::vector<std::string> FragmentNames(const Op& op) const;
  /// this rank's values of them in `piece` (ministage `v`'s outer-round piece, OuterPiece's layout),
  /// each whole-shaped with zeros where another rank of the island holds the value — each value counts
  /// on one rank of the island (a team's copies of a parameter it does not split on its first rank, a
  /// tied head's copy on the embedding's), so that the island's sum is the fragment;
  std::map<std::string, torch::Tensor> OuterPieceAsWhole(int v, const torch::Tensor& piece,
                                                         const std::vector<std::string>& names);
  /// and back: `piece`'s values of the parameters in `whole` (a tied head's copy: the embedding's).
  void OuterPieceFill(int v, const std::map<std::string, torch::Tensor>& whole, torch::Tensor& piece);
  /// Resuming: sets this rank's part of the AdamW moments from whole-parameter ones (a checkpoint's).
  Status LoadMoments(const std::map<std::string, torch::Tensor>& exp_avg,
                     const std::map<std::string, torch::Tensor>& exp_avg_sq);

  const Program& program() const { return schedule_.programs[rank_]; }
  void set_record_trace(bool on) { config_.record_trace = on; }

 private:
  /// The outer state of every ministage (GatherOuterState's `pieces`, `replicas`) put in place of the
  /// first moment, whole where a ZeRO-0 replica holds a part; `swapped` holds the moments, to put back
  /// by swapping again.
  Status SwapOuterIntoFirstMoment(const std::map<int, torch::Tensor>& pieces, Communicator& comm,
                                  const std::map<int, CommGroup*>& replicas,
                                  std::map<int, torch::Tensor>* swapped);
  Executor() = default;
  class StepRun;
  friend class StepRun;

  Schedule schedule_;
  const Cluster* cluster_ = nullptr;
  LlamaModel model_{nullptr};
  Communicator* comm_ = nullptr;
  ExecutorConfig config_;
  DeviceEmulation emulation_;
  std::unique_ptr<CopyEngine> copies_;  // offload and prefetch (side streams on a GPU)
  int rank_ = 0;
  std::map<int, std::vector<std::pair<std::string, std::vector<int64_t>>>>
      ministage_params_;  // all ministages' (name, shape)
  std::map<int, std::unique_ptr<MinistageState>>
      ministages_;                            // by Schedule::ministages index, the ones this rank runs
  std::vector<CommGroup*> collective_group_;  // per schedule collective (null: not a member)
  std::vector<int64_t> microbatch_first_;     // global sequence offset per microbatch
  int64_t batch_sequences_ = 0;
  // Tensor parallelism (tensor_parallel.h): this rank's place in its team and the team's region.
  int tp_degree_ = 1, tp_index_ = 0;
  TensorParallelRegion tp_region_;
  CommClock tp_clock_;  // time inside the team's all-reduces and FlexTP's moves (communication)
  std::unique_ptr<FlexTpTeam> flextp_;  // mode != off
  double last_compute_s_ = 0;           // the last step's compute time (FlexTP's straggler detection)
};

}  // namespace motley
