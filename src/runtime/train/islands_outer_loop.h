// The outer loop of islands trained in one process (islands_trainer.cc): every `inner_steps` steps the
// islands' pseudo-gradients, as they would arrive over the link (compressed as the job says), are
// averaged — weighted by the tokens each island trained on since — and the outer optimizer moves the
// anchor, which every replica continues from. A round that overlaps the next inner steps
// (IslandsConfig::overlap_steps) is sent at its end and lands `overlap_steps` later, each island
// keeping what it learnt meanwhile. With IslandsConfig::fragments = F (Streaming DiLoCo's fragments)
// the model's parts fall into F fragments (IslandFragmentOf), each with its own outer optimizer and
// its own rounds, staggered through the inner steps; where the islands must hold one model
// (validation, a checkpoint, the run's end) every fragment's round is taken at once.
#pragma once

#include <cstdint>
#include <optional>
#include <string>
#include <utility>
#include <vector>

#include <torch/torch.h>

#include "core/job.h"
#include "runtime/islands/outer_optimizer.h"
#include "runtime/train/island_replica.h"

namespace motley::trainer_parts {

/// The fragment of the model a parameter falls in, by its name: the model's parts numbered — the
/// embedding 0, decoder layer l l + 1, the final norm and the head num_layers + 1 — mod `fragments`.
int64_t IslandFragmentOf(const std::string& name, int64_t num_layers, int64_t fragments);

class IslandsOuterLoop {
 public:
  /// The anchor: replica 0's parameters now. `momentum` by replica 0's shard (empty: none yet) and
  /// the outer steps taken, as a checkpoint held them.
  IslandsOuterLoop(const JobSpec& job, std::vector<Replica>& replicas,
                   const std::vector<torch::Tensor>& momentum, int64_t steps);

  /// At clock step `step` (the islands' steps taken): rounds in flight land when due, and rounds that
  /// end here are sent (overlapped) or taken at once. Returns whether a round ended here (the whole
  /// model's or a fragment's) and the largest compression error of its pseudo-gradients.
  std::pair<bool, double> At(int64_t step, int64_t total_steps, std::vector<Replica>& replicas);

  /// The outer momentum by replica 0's shard (undefined where a fragment has none yet).
  std::vector<torch::Tensor> Momentum(size_t shards) const;
  /// The outer steps of the whole model: its last fragment's (the one whose rounds end with a round).
  int64_t steps() const { return fragments_.back().outer.steps(); }

 private:
  // A round sent and not landed yet: the mean as it will arrive, and each island's values when sent.
  struct InFlight {
    std::vector<torch::Tensor> mean;
    std::vector<std::vector<torch::Tensor>> launched;  // by island, by the fragment's shard
    int64_t land_at_step = 0;
  };
  struct Fragment {
    std::vector<size_t> shards;  // its shards among a replica's
    OuterOptimizer outer;
    std::optional<InFlight> flight;
  };

  std::vector<torch::Tensor> RoundMean(Fragment& f, size_t k, std::vector<Replica>& replicas,
                                       double* worst) const;
  double TakeRound(Fragment& f, size_t k, std::vector<Replica>& replicas) const;
  InFlight SendRound(Fragment& f, size_t k, std::vector<Replica>& replicas, int64_t land_at_step,
                     double* worst) const;
  static void LandRound(Fragment& f, std::vector<Replica>& replicas);

  const JobSpec& job_;
  std::vector<Fragment> fragments_;
};

}  // namespace motley::trainer_parts
