// LayerWork's data (layer_work.h says what it is): what one rank computes of a layer this step and
// the link lent heads' transfers go over — apart, so that the parts that run it (layer_work.cc,
// lent_projections.cc) include it without including each other.
#pragma once

#include <cstddef>
#include <cstdint>
#include <vector>

#include <torch/torch.h>

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

}  // namespace motley
