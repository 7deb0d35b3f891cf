// The training loss: mean next-token cross-entropy, for the whole vocabulary on one rank or for a
// tensor-parallel rank's columns of it (the team's loss from an all-gather of three figures a
// token). One autograd function holds what the loss needs and no more, as Megatron's
// vocabulary-parallel cross-entropy does: a master-precision copy of the logits that becomes the
// softmax in place, kept for backward, and the gradient computed in place in that same buffer —
// its one master-precision buffer plus, in mixed precision, the gradient cast to the compute
// precision (core/model.h: HeadBackwardBytesPerToken; counted by the memory ledger in
// cross_entropy_test). The library's cross_entropy keeps a log-softmax, allocates its gradient and
// the log-softmax's input gradient apart: 16 bytes a column a token in fp32 where this holds 4.
#pragma once

#include <cstdint>
#include <functional>

#include <torch/torch.h>

namespace motley {

/// Gathers a [3, tokens] tensor from every member of a tensor-parallel team into
/// [members, 3, tokens], in member order; throws on failure (inside autograd).
using TeamGather = std::function<torch::Tensor(const torch::Tensor&)>;

/// Mean cross-entropy of `logits` [..., columns] (vocabulary rows [vocab_begin, vocab_begin +
/// columns) of the model's) against `targets` [...]. Columns from `real_columns` on (when >= 0) are
/// padding — out of the log-sum-exp, their gradient zero. `gather` null: the columns are the whole
/// vocabulary; else the team's loss, the same value on every member. Computed in fp32 (fp64 for fp64
/// logits) whatever the logits' dtype; the gradient is returned in the logits' dtype.
torch::Tensor CrossEntropyLoss(const torch::Tensor& logits, const torch::Tensor& targets,
                               int64_t vocab_begin = 0, int64_t real_columns = -1,
                               const TeamGather* gather = nullptr);

}  // namespace motley
