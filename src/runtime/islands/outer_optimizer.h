// The outer loop of a run across islands (issue #52; DiLoCo, Douillard et al. 2023): islands train
// on their own for H inner steps, then exchange only their pseudo-gradient — the change of their
// parameters since the last outer step — and an outer optimizer, SGD with Nesterov momentum, moves
// the shared parameters by the islands' average. One rank's part of it: the pieces of the model the
// rank holds (its master weights; a ZeRO shard, a stage's layers, a tensor-parallel slice) and the
// outer state for them (the anchor — the parameters of the last outer step — and the momentum), in
// the pieces' precision (fp32 or fp64 masters). A rank exchanges its pieces with the ranks of the
// other islands that hold the same pieces (island_exchange.h), so no rank gathers a whole model.
#pragma once

#include <string>
#include <vector>

#include <torch/torch.h>

#include "core/job.h"

namespace motley {

class OuterOptimizer {
 public:
  /// `pieces`: this rank's parameter pieces (views, updated in place by Step); their values now
  /// are the first anchor.
  OuterOptimizer(OuterConfig config, std::vector<torch::Tensor> pieces);

  /// The pieces where they are now (an executor may move its masters between steps: an offloaded
  /// shard lives on the host); the same shapes, in the same order.
  void Attach(std::vector<torch::Tensor> pieces);
  /// Each piece's pseudo-gradient since the last outer step: anchor - current.
  std::vector<torch::Tensor> PseudoGradients() const;
  /// One outer step with the islands' average pseudo-gradients (PseudoGradients' shapes): as
  /// torch.optim.SGD on the anchor with the average as its gradient — m = momentum m + g; the
  /// anchor moves by -lr (g + momentum m) (Nesterov) or -lr m — and every piece takes the anchor's
  /// value.
  void Step(const std::vector<torch::Tensor>& average);
  /// The same, piece by piece (an outer round's ops, plan/outer_round.h): piece `i`'s part of the step
  /// with its average; FinishStep once every piece has taken its part.
  void StepPiece(size_t i, const torch::Tensor& average);
  /// The same for a round that landed after inner steps overlapped it (IslandsConfig::overlap_steps):
  /// the anchor moves as above, and the piece keeps what it learnt since it was sent — it moves by
  /// the new anchor less `launched`, its value when the pseudo-gradient was taken.
  void StepPiece(size_t i, const torch::Tensor& average, const torch::Tensor& launched);
  void FinishStep() { ++steps_; }
  /// Piece `i`'s pseudo-gradient since the last outer step: anchor - current.
  torch::Tensor PseudoGradient(size_t i) const;

  // The outer state, for checkpoints: the anchor and the momentum (undefined before the first step).
  const std::vector<torch::Tensor>& anchor() const { return anchor_; }
  const std::vector<torch::Tensor>& momentum() const { return momentum_; }
  int64_t steps() const { return steps_; }
  const OuterConfig& config() const { return config_; }
  /// Resuming: the momentum (the pieces' shapes; empty: none yet) and the outer steps taken. The
  /// anchor is the pieces' values at construction (a checkpoint is taken at an outer step).
  void Restore(std::vector<torch::Tensor> momentum, int64_t steps);

 private:
  OuterConfig config_;
  std::vector<torch::Tensor> pieces_, anchor_, momentum_;
  int64_t steps_ = 0;
};

}  // namespace motley
