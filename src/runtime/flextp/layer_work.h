// LayerWork: what one tensor-parallel rank computes of a decoder layer in a step when FlexTP
// balances its team (flextp_team.h).
//   - MLP: its own units may be pruned — `keep` lists the ones it computes; the weights are
//     index-selected, so autograd scatters their gradients back to the kept rows and columns and
//     leaves zeros (the imputation) for the pruned ones: `keep` is this layer's entry of the lineage
//     table — and it may compute units borrowed from a straggler, whose weights arrived from their owner
//     and whose gradients accumulate in `grad_*` until they are returned.
//   - Attention: it may compute only its first `attention_keep` groups (a key/value head and its
//     query heads; a straggler's last groups are computed elsewhere) and groups borrowed from a
//     straggler (`attention`, packed by AttentionGroupRows).
// The borrowed part's output joins this rank's own before the block's all-reduce, so migration
// adds no reduce of its own (FlexTP §IV-A, reduce merging).
#pragma once

#include <torch/torch.h>

#include "core/model.h"

namespace motley {

struct LayerWork {
  torch::Tensor keep;            // int64 indices of this rank's own MLP units it computes; undefined: all
  torch::Tensor gate, up, down;  // borrowed units' weights [n, hidden], [n, hidden], [hidden, n]; undefined: none
  torch::Tensor grad_gate, grad_up, grad_down;  // their gradients, accumulated (the master dtype, same shapes)
  int64_t attention_keep = -1;   // own attention groups computed (the first ones); -1: all
  // ZERO-resizing of the attention: int64 indices of the hidden features its own projections keep —
  // the input columns of q, k and v and the output rows of o (the pruned ones' partial products
  // are missing, their gradients zeros); undefined: all.
  torch::Tensor attention_features;
  torch::Tensor attention;       // borrowed groups [n, rows, hidden] (AttentionGroupRows); undefined: none
  torch::Tensor grad_attention;  // their gradients, accumulated (the master dtype, same shape)
  // The borrowed groups' forward graphs, one per forward that needs a backward, each released by
  // its backward (the borrowed groups are not recomputed: they cost what the rank's own do).
  struct AttentionGraph {
    torch::Tensor hidden, rows, out;  // the forward's leaves (input, the groups' weights) and its output
  };
  std::vector<AttentionGraph> attention_graphs;
};

/// The SwiGLU MLP of one rank: its own units (`gate_w`, `up_w`, `down_w`, restricted to work->keep)
/// plus the borrowed ones; `m` is the normalised input [batch, seq, hidden]; the result is this
/// rank's partial output (before the all-reduce). Weights are cast to m's dtype. `work` may be null.
/// The borrowed units' gradients are taken in the backward of `m`: m must require a gradient (in a
/// layer it does, through the norm's weight).
torch::Tensor MlpWithWork(const torch::Tensor& m, const torch::Tensor& gate_w, const torch::Tensor& up_w,
                          const torch::Tensor& down_w, LayerWork* work);

/// Attention heads' partial output (before the all-reduce) for weights q [hq*d, hidden], k and v
/// [hkv*d, hidden], o [hidden, hq*d] (cast to hidden's dtype by the caller) — one rank's heads, or
/// any whole groups of them.
/// `features` (int64, optional): only those hidden features enter the projections and leave o
/// (ZERO-resizing); the others' output is zero.
torch::Tensor AttentionPartial(const ModelSpec& spec, const torch::Tensor& hidden, const torch::Tensor& q_w,
                               const torch::Tensor& k_w, const torch::Tensor& v_w, const torch::Tensor& o_w,
                               const torch::Tensor& cos, const torch::Tensor& sin,
                               const torch::Tensor& features = torch::Tensor());

/// The attention of one rank under `work` (null: all own groups): its first work->attention_keep
/// groups plus the borrowed ones. Same contract as MlpWithWork for `hidden`.
torch::Tensor AttentionWithWork(const ModelSpec& spec, const torch::Tensor& hidden, const torch::Tensor& q_w,
                                const torch::Tensor& k_w, const torch::Tensor& v_w, const torch::Tensor& o_w,
                                const torch::Tensor& cos, const torch::Tensor& sin, LayerWork* work);

/// One rank's attention weights (layer weights 1-4) by hidden feature: [hidden, rows] — each
/// feature's column of q, k and v, then its row of o (what ZERO-resizing of the attention prunes).
torch::Tensor AttentionFeatureRows(const std::vector<torch::Tensor>& w);

/// One rank's attention weights (layer weights 1-4) as groups: [groups, (2 * q_per_kv + 2) * head_dim,
/// hidden] — each group's q rows, k rows, v rows, then its o columns as rows.
torch::Tensor AttentionGroupRows(const ModelSpec& spec, const std::vector<torch::Tensor>& w);

}  // namespace motley
