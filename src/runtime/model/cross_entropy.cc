#include "runtime/model/cross_entropy.h"

#include <limits>
#include <vector>

namespace motley {
namespace {

using torch::autograd::AutogradContext;
using torch::autograd::variable_list;

// Forward, per token: this rank's columns shifted by their maximum and exponentiated in place, their
// sum, and the target's logit (0 where the target is another rank's); the team's three figures give
// the log-sum-exp over the whole vocabulary, and the buffer becomes this rank's softmax in place.
// Backward: the softmax less the one-hot target, in the same buffer.
struct CrossEntropyFunction : public torch::autograd::Function<CrossEntropyFunction> {
  static torch::Tensor forward(AutogradContext* ctx, const torch::Tensor& logits,
                               const torch::Tensor& targets, int64_t vocab_begin, int64_t real_columns,
                               const TeamGather* gather) {
    const torch::Dtype master = logits.scalar_type() == torch::kFloat64 ? torch::kFloat64 : torch::kFloat32;
    const int64_t columns = logits.size(-1);
    // A buffer of its own (a copy even when the logits are already in the master precision: they
    // are the caller's).
    torch::Tensor l = logits.reshape({-1, columns}).to(master, /*non_blocking=*/false, /*copy=*/true);
    const int64_t real = real_columns < 0 ? columns : std::clamp<int64_t>(real_columns, 0, columns);
    if (real < columns) l.narrow(1, real, columns - real).fill_(-std::numeric_limits<double>::infinity());
    const torch::Tensor local = targets.reshape({-1}) - vocab_begin;
    const torch::Tensor mine = local.ge(0).logical_and(local.lt(real));
    const torch::Tensor index = local.clamp(0, columns - 1);
    const torch::Tensor target =
        torch::where(mine, l.gather(1, index.unsqueeze(1)).squeeze(1), torch::zeros({}, l.options()));
    const torch::Tensor max = std::get<0>(l.max(1));
    // A rank whose columns are all padding has no maximum: shift by 0 (its sum is 0 either way).
    const torch::Tensor shift = torch::where(max.isinf(), torch::zeros_like(max), max);
    l.sub_(shift.unsqueeze(1)).exp_();
    torch::Tensor parts = torch::stack({max, l.sum(1), target});  // [3, tokens]
    const torch::Tensor all = gather != nullptr ? (*gather)(parts) : parts.unsqueeze(0);
    const torch::Tensor maxes = all.select(1, 0), top = std::get<0>(maxes.max(0));
    // Each member's sum was taken after its own shift (its maximum, or 0 with no real column).
    const torch::Tensor shifts = torch::where(maxes.isinf(), torch::zeros_like(maxes), maxes);
    const torch::Tensor lse = top + (all.select(1, 1) * (shifts - top).exp()).sum(0).log();
    const torch::Tensor loss = (lse - all.select(1, 2).sum(0)).mean();
    l.mul_((shift - lse).exp().unsqueeze(1));  // the softmax of this rank's columns
    ctx->save_for_backward({l, index, mine});
    ctx->saved_data["dtype"] = static_cast<int64_t>(logits.scalar_type());
    ctx->saved_data["shape"] = logits.sizes().vec();
    return loss;
  }

  static variable_list backward(AutogradContext* ctx, variable_list grads) {
    const auto saved = ctx->get_saved_variables();
    torch::Tensor g = saved[0];  // the softmax, overwritten: a graph's loss is differentiated once
    const torch::Tensor &index = saved[1], &mine = saved[2];
    g.scatter_add_(1, index.unsqueeze(1), -mine.to(g.scalar_type()).unsqueeze(1));
    g.mul_(grads[0] / static_cast<double>(g.size(0)));
    const auto dtype = static_cast<torch::ScalarType>(ctx->saved_data["dtype"].toInt());
    return {g.to(dtype).view(ctx->saved_data["shape"].toIntVector()), torch::Tensor(), torch::Tensor(),
            torch::Tensor(), torch::Tensor()};
  }
};

}  // namespace

torch::Tensor CrossEntropyLoss(const torch::Tensor& logits, const torch::Tensor& targets, int64_t vocab_begin,
                               int64_t real_columns, const TeamGather* gather) {
  return CrossEntropyFunction::apply(logits, targets, vocab_begin, real_columns, gather);
}

}  // namespace motley
