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

namespace motley {

// How lent query heads' keys and values travel between a team's ranks (FlexTpTeam implements it):
// point to point, a head's owner computes the key and value of the groups it lends and sends them
// to the head's receiver in each forward, and the receiver sends their gradients back in the
// backward — so no receiver computes a group's key and value again. `move` names the transfer (the
// balance's move of those heads), `forward` the layer's forward this step it belongs to.
class KeyValueLink {
 public:
  virtual ~KeyValueLink() = default;
  /// Starts sending `t` to the team's rank `peer` (kept until the transfer is done).
  virtual void Send(int layer, int peer, size_t move, int64_t forward, bool gradient, torch::Tensor t) = 0;
  /// Receives into `t` from the team's rank `peer`, waiting for it. Throws std::runtime_error when
  /// the transfer fails (it runs inside a layer's forward or backward).
  virtual void Receive(int layer, int peer, size_t move, int64_t forward, bool gradient,
                       torch::Tensor& t) = 0;
};

struct LayerWork {
  torch::Tensor keep;  // int64 indices of this rank's own MLP units it computes; undefined: all
  torch::Tensor gate, up,
      down;  // borrowed units' weights [n, hidden], [n, hidden], [hidden, n]; undefined: none
  torch::Tensor grad_gate, grad_up,
      grad_down;                // their gradients, accumulated (the master dtype, same shapes)
  int64_t attention_keep = -1;  // own query heads computed (the first ones); -1: all
  // ZERO-resizing of the attention: int64 indices of the hidden features its own projections keep —
  // the input columns of q, k and v and the output rows of o (the pruned ones' partial products
  // are missing, their gradients zeros); undefined: all.
  torch::Tensor attention_features;
  torch::Tensor
      attention;  // borrowed query heads [n, 4 * head_dim, hidden] (AttentionHeadRows); undefined: none
  torch::Tensor grad_attention;  // their gradients, accumulated (the master dtype, same shape)
  // The borrowed heads by owner's run: `count` heads from row `at` of `attention`, the first of them
  // `offset` heads into its key/value group. Empty: one run of them all from a group's first head.
  // With `link`, the run's keys and values come from its owner (`from`, the balance's `move`).
  struct HeadRun {
    int64_t at = 0, count = 0, offset = 0;
    int from = -1;
    size_t move = 0;
  };
  std::vector<HeadRun> attention_runs;
  // This rank's own query heads computed elsewhere, by run: heads [begin, begin + count) of its
  // own go to the team's rank `to` (the balance's `move`); with `link`, this rank sends the key and
  // value of the groups each run touches every forward.
  struct LentRun {
    int to = 0;
    size_t move = 0;
    int64_t begin = 0, count = 0;
  };
  std::vector<LentRun> lent;
  KeyValueLink* link = nullptr;  // null: each receiver computes the keys and values of its runs
  // With `link`: a lent head's receiver computes only its q and o projections — it sends the head's
  // query to the owner, which attends with its own key and value and sends the scores' output back
  // (in the backward the output's gradient out, the query's back) — rather than the whole head.
  bool lend_projections = false;
  int layer = 0;         // the layer this work is of
  int64_t forwards = 0;  // the layer's forwards under this work so far (the transfers' names)
  // The borrowed heads' forward graphs, one per forward that needs a backward, each released by
  // its backward (the borrowed heads are not recomputed: they cost what the rank's own do).
  struct AttentionGraph {
    torch::Tensor hidden, out;  // the forward's input (a leaf) and its output
    // The borrowed weights as the forward used them, each a leaf: rows [row, row + head_dim) of
    // `attention`'s heads `heads` (or, undefined, of heads [at, at + count)), as [heads * head_dim,
    // hidden] — so each gradient lands in its own rows of grad_attention, not through a zero-filled
    // copy of the whole packed tensor per slice.
    struct Weight {
      torch::Tensor leaf, heads;
      int64_t row = 0, at = 0, count = 0;
    };
    std::vector<Weight> weights;
    std::vector<torch::Tensor> kv;  // with `link`: each run's received keys and values (leaves too)
    int64_t forward = 0;
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

/// RoPE of heads x [batch, heads, seq, head_dim].
torch::Tensor RotaryEmbedding(const torch::Tensor& x, const torch::Tensor& cos, const torch::Tensor& sin);

/// Query heads q [batch, heads, seq, head_dim] (after RoPE) attending causally to their groups' keys
/// (after RoPE) and values [batch, groups, seq, head_dim] — query head j uses group (first_head_offset
/// + j) / (num_heads / num_kv_heads) of those given: their output [batch, seq, heads * head_dim],
/// before the o projection.
torch::Tensor AttentionScores(const ModelSpec& spec, torch::Tensor q, torch::Tensor k, torch::Tensor v,
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
