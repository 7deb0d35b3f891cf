// FlexTpTeam: one rank's side of FlexTP in a tensor-parallel team (issue #9 §3-§6). Each step it
//   1. all-gathers the team's compute times of the step before and asks the FlexTpBalancer for this
//      step's balance (every rank gets the same one);
//   2. builds each layer's LayerWork when the layer first runs: the units this rank prunes, chosen by
//      priority — smallest weight variation first (FlexTP §III-B), variation measured every
//      `stats_interval_steps` and kept for units pruned meanwhile (the incremental update that
//      keeps a pruned unit from looking idle forever), ties broken round-robin — and the units
//      it borrows from stragglers: each straggler broadcasts its migrated block to the team and each
//      receiver computes its run of it (FlexTP §IV-A; `migration = "point-to-point"`: the owner
//      sends each receiver just its run, and in each forward the key and value of the groups its
//      lent query heads touch — their gradients come back in the backward — so that no receiver
//      computes them again);
//   3. after each backward, returns the borrowed units' gradients to their owner: one sum-reduce of
//      each straggler's blocks of every layer the backward ran, every receiver's runs in place (point
//      to point: each receiver sends its runs, all layers' posted before any is waited for). Outputs and
//      input gradients need no transfer of their own: the borrowed part's joins the rank's own before the
//      block's all-reduce (reduce merging).
// The per-layer pruning ratios differ by how much each layer's weights moved (LayerPruneRatios);
// the priority, its incremental refresh and the lineage are UnitPriority's (unit_priority.h).
#pragma once

#include <chrono>
#include <cstdint>
#include <functional>
#include <map>
#include <vector>

#include <torch/torch.h>

#include "core/cluster.h"
#include "core/job.h"
#include "core/model.h"
#include "core/status.h"
#include "cost/flextp_balancer.h"
#include "runtime/comm/comm_clock.h"
#include "runtime/comm/communicator.h"
#include "runtime/flextp/layer_work.h"
#include "runtime/flextp/unit_priority.h"

namespace motley {

class FlexTpTeam : private KeyValueLink {
 public:
  struct Options {
    TensorParallelConfig config;
    ModelSpec spec;
    int tp = 2;        // team size
    int index = 0;     // this rank's place in the team
    bool gpu = false;  // CUDA tensors (NCCL), else CPU (Gloo): `migration = "auto"` follows it
    Communicator* comm = nullptr;
    CommGroup* team = nullptr;  // the team's communicator group (its ranks in team order)
    FlexTpCosts costs;
    CommClock* clock = nullptr;  // accumulates the time in the moves of units and their gradient returns
    // FlexTP's pre-test (Pretest): the device and dtype a layer's MLP computes in, and the tokens of
    // a microbatch (0: no pre-test).
    torch::Device device = torch::kCPU;
    torch::Dtype dtype = torch::kFloat32;
    int64_t pretest_tokens = 0;
  };
  explicit FlexTpTeam(Options options);

  /// A step begins: all-gathers the last step's compute time (0 before the first step; the first
  /// step's is not judged: no change), re-balances, forgets the last step's borrowed weights. Before
  /// the first step of a `semi` team solved by the cost model, runs the pre-test. Collective over
  /// the team.
  Status BeginStep(int64_t step, double last_compute_s);

  /// FlexTP's pre-test (Algorithm 2, line 1): ZERO-resizing's own cost at pruning ratios 1/8, 1/4
  /// and 1/2 — an MLP slice's forward and backward on a microbatch with that share of its units
  /// pruned, its time beyond (1 - ratio) of the unpruned one's, as a fraction of that — a borrowed
  /// unit's compute against an own one's (TimeBorrowedCost), and one layer pass's migration of 1/8,
  /// 1/4 and 1/2 of a rank's units (a broadcast from the team's first rank, or a send to its second,
  /// as the team migrates). Every rank's figures are all-gathered; the resize fractions' and the
  /// borrowed cost's medians and the transfers' slowest rank make the samples, the same on every
  /// rank. Collective over the team; returns what it measured.
  Result<SemiPretest> Pretest();

  /// Layer `layer`'s MLP work this step (null: all own units, nothing borrowed). The first call
  /// for a layer in a step moves the stragglers' units (broadcast, or point to point). Every rank
  /// of the team calls it for the same layers in the same order, as they run the same ops. Throws
  /// std::runtime_error when a transfer fails (it runs inside a layer's forward).
  LayerWork* Work(int layer, const std::vector<torch::Tensor>& w);

  /// After a backward through layers [begin, end): returns the borrowed units' gradients to their
  /// owners (a sum-reduce per straggler and kind for all those layers, or each receiver's runs point
  /// to point, all at once), who get them through
  /// `add(layer, k, dim, begin, part)` — the gradient of the part of their layer weight k
  /// (DecoderLayerImpl::weights() order) from `begin` along `dim`.
  using AddGradient =
      std::function<void(int layer, int k, int dim, int64_t begin, const torch::Tensor& part)>;
  Status ReturnGradients(int begin, int end, const AddGradient& add);

  const TeamBalance& balance() const { return balancer_.balance(); }
  double pruned_fraction() const { return balance().pruned_fraction(options_.costs.units); }
  int64_t migrated_units() const { return balance().migrated_units(); }
  /// This rank's part of the balance it runs this step.
  FlexTpRankLoad load() const { return RankLoad(balance(), options_.index); }

 private:
  struct Borrowed {
    int from = 0;
    int64_t begin = 0, count = 0,
            at = 0;          // the owner's units [begin, begin + count) at rows [at, at + count)
    bool attention = false;  // query heads, else MLP units
    size_t move = 0;         // its index in the balance's moves (the transfers' tag)
  };
  struct Layer {
    int64_t built_step = -1;
    torch::Device device = torch::kCPU;
    torch::Dtype dtype = torch::kFloat32;  // the master weights' (and their gradients')
    LayerWork work;
    bool active = false;  // work has something in it this step
    std::vector<Borrowed> borrowed;
    UnitPriority priority;            // which own units ZERO-resizing prunes first
    UnitPriority attention_priority;  // ... and which hidden features of the attention's projections
    // The last step's receive buffers (by kind: MLP units, query heads) and gradient accumulators,
    // reused while the balance keeps their shapes (rather than allocated, zeroed or concatenated
    // anew each step).
    torch::Tensor received[2];
    torch::Tensor grad_gate, grad_up, grad_down, grad_attention;
  };
  // The rows (MLP units or query heads) this rank computes for stragglers this step, each
  // sent by its owner (`own_rows(begin, count)`: this rank's rows, when it is one), received into
  // `buffer` (reused when it has the step's shape); their runs go to `out`.
  using OwnRows = std::function<torch::Tensor(int64_t begin, int64_t count)>;
  torch::Tensor Borrow(int layer, bool attention, const OwnRows& own_rows, std::vector<int64_t> row_shape,
                       torch::TensorOptions options, torch::Tensor& buffer, std::vector<Borrowed>* out);
  // The tag of move `move`'s transfer for `layer`: its weights out, or its gradients back.
  static int64_t Tag(int layer, bool attention, bool gradients, size_t move);
  // Lent query heads' keys and values (KeyValueLink), point to point: sends are kept in
  // `key_value_sent_` until WaitKeyValueSends (after each backward, and before a step).
  void Send(int layer, int peer, size_t move, int64_t forward, bool gradient, torch::Tensor t) override;
  void Receive(int layer, int peer, size_t move, int64_t forward, bool gradient, torch::Tensor& t) override;
  Status WaitKeyValueSends();
  // Runs `communicate` (on tensors on `device`), counting its time as the migration's.
  Status Timed(const torch::Device& device, const std::function<Status()>& communicate);
  // Waits for `transfers` (of tensors on `device`), counting the time as communication; the first
  // failure, if any.
  Status WaitAll(std::vector<Result<PendingTransfer>>& transfers, const torch::Device& device);
  // A straggler's migrated block this step: its last `count` units (or heads), from `begin`.
  struct Block {
    int from = 0;
    int64_t begin = 0, count = 0;
  };
  std::vector<Block> Blocks(bool attention) const;
  bool broadcast_reduce() const { return UsesBroadcastReduce(options_.config, options_.gpu); }
  torch::Tensor Keep(Layer& l, double ratio, torch::Device device);

  Options options_;
  FlexTpBalancer balancer_;
  bool pretested_ = false;
  int64_t steps_begun_ = 0;  // BeginStep calls so far
  int64_t step_ = 0;
  CommClock migration_clock_;  // this step's time in the migration's moves and gradient returns
  std::map<int, Layer> layers_;
  std::vector<torch::Tensor> key_value_sent_;
  std::vector<Result<PendingTransfer>> key_value_sends_;
  std::map<int, double> layer_ratio_;  // this step's pruning ratio per layer (this rank)
};

/// A unit's weights as one row: gate row, up row, down column ([units, 3 * hidden]) of a slice.
torch::Tensor UnitRows(const std::vector<torch::Tensor>& w);

}  // namespace motley
