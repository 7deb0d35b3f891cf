// MlpWork: what one tensor-parallel rank computes of a layer's MLP in a step when FlexTP balances
// the team (flextp_team.h). Its own units may be pruned — `keep` lists the ones it computes; the
// weights are index-selected, so autograd scatters their gradients back to the kept rows and
// columns and leaves zeros (the imputation) for the pruned ones: `keep` is this layer's entry of the
// lineage table — and it may compute units borrowed from a straggler, whose weights arrived by
// broadcast and whose gradients accumulate in `grad_*` until they are returned. The borrowed
// units' partial output joins this rank's own before the block's all-reduce, so migration adds no
// reduce of its own (FlexTP §IV-A, reduce merging).
#pragma once

#include <torch/torch.h>

namespace motley {

struct MlpWork {
  torch::Tensor keep;            // int64 indices of this rank's own units it computes; undefined: all
  torch::Tensor gate, up, down;  // borrowed units' weights [n, hidden], [n, hidden], [hidden, n]; undefined: none
  torch::Tensor grad_gate, grad_up, grad_down;  // their gradients, accumulated (fp32, same shapes)
};

/// The SwiGLU MLP of one rank: its own units (`gate_w`, `up_w`, `down_w`, restricted to work->keep)
/// plus the borrowed ones; `m` is the normalised input [batch, seq, hidden]; the result is this
/// rank's partial output (before the all-reduce). Weights are cast to m's dtype. `work` may be null.
/// The borrowed units' gradients are taken in the backward of `m`: m must require a gradient (in a
/// layer it does, through the norm's weight).
torch::Tensor MlpWithWork(const torch::Tensor& m, const torch::Tensor& gate_w, const torch::Tensor& up_w,
                          const torch::Tensor& down_w, MlpWork* work);

}  // namespace motley
