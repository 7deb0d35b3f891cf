// Lending a query head's projections (LayerWork::lend_projections, TensorParallelConfig::
// lend_attention): the head's receiver computes its q and o projections, its owner the scores with
// its own key and value. Four transfers a lent run for each layer's forward and backward, point to
// point over the team's KeyValueLink:
//   forward   receiver -> owner     the run's query, before RoPE     [batch, seq, count * head_dim]
//             owner    -> receiver  the scores' output, before o     [batch, seq, count * head_dim]
//   backward  receiver -> owner     that output's gradient
//             owner    -> receiver  the query's gradient
// The receiver sends its queries before it computes its own heads and takes the outputs after them,
// so that the owner attends while it works; in the backward the outputs' gradients go first (their
// node was made after the rank's own heads', so autograd runs it before them) and the queries'
// gradients are taken last (the queries' node runs only after the outputs' and, made before the own
// heads', after those too). Exact: the same products as the head computed in one place.
#pragma once

#include <cstddef>

#include <torch/torch.h>

#include "core/model.h"
#include "runtime/flextp/layer_work_data.h"

namespace motley {

/// Receiver: sends each borrowed run's query (hidden times its q rows) to the run's owner. Returns
/// what BorrowedOutputs takes (a zero computed from `hidden`: the queries' backward hangs on it);
/// undefined when no backward follows (grad mode off).
torch::Tensor SendBorrowedQueries(const torch::Tensor& hidden, LayerWork& work);

/// Receiver: each borrowed run's scores' output from its owner times the run's o columns — this
/// rank's partial output of the borrowed heads, [batch, seq, hidden]. `queries`: what
/// SendBorrowedQueries returned for the same forward.
torch::Tensor BorrowedOutputs(const torch::Tensor& hidden, const torch::Tensor& queries, LayerWork& work);

/// Owner: the scores of lent run `run` (work.lent): receives the run's query from its receiver,
/// attends with `kv` ([2, batch, groups, seq, head_dim]: the keys, after RoPE, and the values of the
/// groups the run touches) and sends the output back. Returns a zero to add to the attention's output
/// so that the backward comes here — the output's gradient in, the query's out, kv's on into this
/// rank's key and value projections; undefined when no backward follows.
torch::Tensor LendScores(const ModelSpec& spec, const torch::Tensor& kv, const torch::Tensor& cos,
                         const torch::Tensor& sin, LayerWork& work, size_t run);

}  // namespace motley
