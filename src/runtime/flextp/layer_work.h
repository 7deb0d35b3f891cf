// LayerWork: what one tensor-parallel rank computes of a decoder layer in a step when FlexTP
// balances its team (flextp_team.h).
//   - MLP: its own units may be pruned — `keep` lists the ones it computes; the weights are
//     index-selected, so autograd scatters their gradients back to the kept rows and columns and
//     leaves zeros (the imputation) for the pruned ones: `keep` is this layer's entry of the lineage
//     table — and it may compute units borrowed from a straggler, whose weights arrived from their owner
//     and whose gradients accumulate in `grad_*` until they are returned.
//   - Attention: it may compute only its first `attention_keep` query heads (with the key/value
//     heads of the groups they belong to; a straggler's last heads are computed elsewhere) and heads
//     borrowed from a straggler (`attention`, packed by AttentionHeadRows: each with its group's key
//     and value rows, from which the borrower computes the key and value once for each group a run
//     touches — or, with a KeyValueLink, receives them from the heads' owner; or, lending
//     projections, computes only their q and o projections, the owner their scores).
// The borrowed part's output joins this rank's own before the block's all-reduce, so migration
// adds no reduce of its own (FlexTP §IV-A, reduce merging).
#pragma once

#include <torch/torch.h>

#include "core/model.h"
#include "runtime/flextp/layer_work_data.h"

namespace motley {

/// The SwiGLU MLP of one rank: its own units (`gate_w`, `up_w`, `down_w`, restricted to work->keep)
/// plus the borrowed ones; `m` is the normalised input [batch, seq, hidden]; the result is this
/// rank's partial output (before the all-reduce). Weights are cast to m's dtype. `work` may be null.
/// The borrowed units' gradients are taken in the backward of `m`: m must require a gradient (in a
/// layer it does, through the norm's weight).
torch::Tensor MlpWithWork(const torch::Tensor& m, const torch::Tensor& gate_w, const torch::Tensor& up_w,
                          const torch::Tensor& down_w, LayerWork* work);

/// Attention heads' partial output (before the all-reduce) for weights q [hq*d, hidden], k and v
/// [hkv*d, hidden], o [hidden, hq*d] (cast to hidden's dtype by the caller) — one rank's heads, or
/// any run of them: query head j uses key/value head (first_head_offset + j) / (num_heads /
/// num_kv_heads), the run's first head being `first_head_offset` heads into its group, and k and v
/// holding the groups the run touches.
/// `features` (int64, optional): only those hidden features enter the projections and leave o
/// (ZERO-resizing); the others' output is zero.
torch::Tensor AttentionPartial(const ModelSpec& spec, const torch::Tensor& hidden, const torch::Tensor& q_w,
                               const torch::Tensor& k_w, const torch::Tensor& v_w, const torch::Tensor& o_w,
                               const torch::Tensor& cos, const torch::Tensor& sin,
                               const torch::Tensor& features = torch::Tensor(),
                               int64_t first_head_offset = 0);

/// The attention of one rank under `work` (null: all own heads): its first work->attention_keep
/// heads plus the borrowed ones. Same contract as MlpWithWork for `hidden`.
torch::Tensor AttentionWithWork(const ModelSpec& spec, const torch::Tensor& hidden, const torch::Tensor& q_w,
                                const torch::Tensor& k_w, const torch::Tensor& v_w, const torch::Tensor& o_w,
                                const torch::Tensor& cos, const torch::Tensor& sin, LayerWork* work);

/// One rank's attention weights (layer weights 1-4) by hidden feature: [hidden, rows] — each
/// feature's column of q, k and v, then its row of o (what ZERO-resizing of the attention prunes).
torch::Tensor AttentionFeatureRows(const std::vector<torch::Tensor>& w);

/// One rank's attention weights (layer weights 1-4) as query heads: [heads, 4 * head_dim, hidden] —
/// each head's q rows, its group's k rows and v rows, then its o columns as rows.
torch::Tensor AttentionHeadRows(const ModelSpec& spec, const std::vector<torch::Tensor>& w);

/// Heads [begin, begin + n) of a rank packed as AttentionHeadRows packs them ([n, 4 * head_dim,
/// hidden]; their gradients, say), as parts of the four weights: rows of q and columns of o from
/// row (column) begin * head_dim; rows of k and v of the groups the heads touch, from row
/// (begin / heads a group) * head_dim — each group's copies summed, as their gradients add.
struct HeadParts {
  int64_t q_row = 0, kv_row = 0;
  torch::Tensor q, k, v, o;  // [n * d, hidden], [groups * d, hidden] (twice), [hidden, n * d]
};
HeadParts SumHeadRows(const ModelSpec& spec, int64_t begin, const torch::Tensor& rows);

}  // namespace motley
