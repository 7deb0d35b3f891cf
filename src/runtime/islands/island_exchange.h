// The exchange of an outer step between islands (outer_optimizer.h): each rank averages its
// pseudo-gradients with the ranks of the other islands that hold the same pieces of the model, over
// c10d. What crosses the link is the pseudo-gradient in the pieces' precision (summed by an
// all-reduce), or compressed — fp16, int8 with a scale a piece, or int4 with a scale a block of 128
// values — and gathered, each rank
// averaging the islands' decompressed values in the pieces' precision.
#pragma once

#include <functional>
#include <string>
#include <vector>

#include <torch/torch.h>

#include "core/status.h"
#include "runtime/comm/communicator.h"

namespace motley {

/// The compressions OuterConfig::compression names: "none", "fp16", "int8", "int4".
std::vector<std::string> OuterCompressions();

/// `deltas` as they arrive after crossing the link compressed (their values in `deltas`' precision:
/// unchanged for "none"), and the compression's relative error ||d - arrived|| / ||d|| over them all (0
/// for a zero d) in `relative_error` when given.
std::vector<torch::Tensor> AsArrived(const std::vector<torch::Tensor>& deltas, const std::string& compression,
                                     double* relative_error = nullptr);

/// What the exchange of one outer step did on this rank.
struct OuterExchange {
  double bytes_sent = 0;  // this rank's compressed pseudo-gradient (and weight), as sent
  // The compression's relative error on this rank's pseudo-gradient: ||d - decompressed(d)|| / ||d||
  // (0 without compression, or for a zero pseudo-gradient).
  double compression_error = 0;
};

/// Replaces `deltas` (this rank's pseudo-gradients) with the average over `outer` — one rank of each
/// island, holding the same pieces — weighted by `weight` (the tokens each island processed since
/// the last outer step; equal weights: the plain mean), compressed as `compression` says. Every
/// member calls it with the same shapes in the same order.
Result<OuterExchange> AverageAcrossIslands(Communicator& comm, CommGroup& outer,
                                           std::vector<torch::Tensor>& deltas, double weight,
                                           const std::string& compression);

/// Islands of unlike shapes (plan/outer_round.h): one fragment's exchange on this rank. `values`: the
/// fragment's parameters whole-shaped, this rank's part of their pseudo-gradient and zeros elsewhere;
/// replaced by the islands' average. `steps`: the fragment's ops this rank takes part in, in order, each
/// with its group — the island's sum (all_reduce), the leads' average across islands (outer_reduce,
/// the leads only: AverageAcrossIslands), the lead's average handed back (all_reduce; the others add
/// zeros). `after(k)` follows step k (the emulated links' time). Every member of a group calls it with
/// the same shapes.
struct FragmentStep {
  bool across_islands = false;  // the leads' outer_reduce; else an island's all_reduce
  CommGroup* group = nullptr;
};
Result<OuterExchange> AverageFragment(Communicator& comm, const std::vector<FragmentStep>& steps,
                                      std::vector<torch::Tensor>& values, double weight,
                                      const std::string& compression,
                                      const std::function<void(size_t)>& after);

}  // namespace motley
