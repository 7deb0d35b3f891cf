// AdamW with decoupled weight decay over parameter *shards*: each shard is a contiguous slice of a
// parameter that this rank owns (the whole parameter without ZeRO), with its own moments in fp32.
// ZeRO shards the optimizer state by handing each rank only its shards; the update is the same.
// The moments take the dtype of the parameter shard (the master weights: fp32, or fp64).
//
// Update, as torch.optim.AdamW: p *= 1 - lr * wd (when the shard decays); m = b1 m + (1 - b1) g;
// v = b2 v + (1 - b2) g^2; p -= lr * (m / (1 - b1^t)) / (sqrt(v / (1 - b2^t)) + eps).
#pragma once

#include <string>
#include <vector>

#include <torch/torch.h>

#include "core/job.h"

namespace motley {

struct ParamShard {
  std::string name;                   // the parameter's name (checkpoints key the moments by it)
  torch::Tensor param;                // a view into the parameter (updated in place)
  torch::Tensor grad;                 // the matching gradient slice
  bool decay = true;                  // weight decay applies (matrices); not to norms
  torch::Tensor exp_avg, exp_avg_sq;  // created on the first step, in param's dtype
};

class AdamW {
 public:
  explicit AdamW(OptimizerConfig config) : config_(config) {}
  /// One update of every shard with learning rate `lr`; `step` counts updates from 1.
  void Step(std::vector<ParamShard>& shards, double lr, int64_t step) const;

 private:
  OptimizerConfig config_;
};

/// The sum of the squares of `t`'s elements, accumulated in fp64, as a 0-dim fp64 tensor on t's
/// device. On the CPU it goes through cache-sized pieces: a whole fp64 copy of a large gradient
/// costs more (fresh pages) than the sum.
torch::Tensor SumOfSquares(const torch::Tensor& t);
/// The squared L2 norm of the shards' gradients (sum it over ranks for the global norm).
double GradNormSquared(const std::vector<ParamShard>& shards);
/// Scales gradients so that the global norm is at most `max_norm` (0 = no clipping); returns the
/// factor applied (1 when within the limit).
double ClipGradients(std::vector<ParamShard>& shards, double global_norm, double max_norm);

/// Whole-parameter shards of a module's parameters: decay for tensors of 2+ dimensions.
std::vector<ParamShard> WholeParameterShards(torch::nn::Module& module);

}  // namespace motley
