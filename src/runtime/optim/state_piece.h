// StatePiece: a piece of what one rank's optimizer owns — parameter values and AdamW moments —
// as the executor hands it to a sharded checkpoint (runtime/train/checkpoint.h writes it).
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include <torch/torch.h>

namespace motley {

/// A piece of one rank's state for a sharded checkpoint: elements [begin, begin + count) of a
/// parameter (or of its tensor-parallel slice `tp_index` of `tp_degree`), values and moments, 1-D.
struct StatePiece {
  std::string param;
  std::vector<int64_t> shape;  // the whole parameter's
  int tp_degree = 1, tp_index = 0;
  int64_t begin = 0;
  torch::Tensor values, exp_avg, exp_avg_sq;
  int64_t padded_rows = 0;       // a padded vocabulary's rows over the slices (ShardedParameter::padded_rows)
  torch::Tensor outer_momentum;  // a run of islands' (#52): the outer momentum of the elements; or none
};

}  // namespace motley
