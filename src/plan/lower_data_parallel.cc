// One group, not interleaved (Poplar): every device runs its own microbatches, forward then
// backward, in step with the others by microbatch index; collectives per index as the ZeRO stage asks.
#include <algorithm>
#include <cstdint>
#include <map>
#include <tuple>
#include <utility>
#include <vector>

#include "core/check.h"
#include "plan/lowerer.h"

namespace motley::lowering {

void Lowerer::EmitDataParallel() {
  // Devices advance in step by microbatch index; collectives per index when the ZeRO stage asks.
  int64_t max_index =
      local_index_.empty() ? 0 : *std::max_element(local_index_.begin(), local_index_.end()) + 1;
  int visit = 0;  // numbers the gathers, so that at most two ministages are gathered at a time
  for (int64_t k = 0; k < max_index; ++k) {
    std::vector<int64_t> ms;
    for (int64_t m = 0; m < num_mb_; ++m)
      if (local_index_[m] == k) ms.push_back(m);
    // The visits of this index: forward through the ministages, then backward. With ZeRO-3 the
    // next visit's parameters are gathered while this one computes (at most two gathered); the
    // last ministage turns around with its parameters in place.
    std::vector<std::pair<bool, int>> visits;
    for (int v = 0; v < num_ministages_; ++v) visits.push_back({false, v});
    for (int v = num_ministages_ - 1; v >= 0; --v) visits.push_back({true, v});
    const int first_visit = visit;
    auto continues = [&](size_t i) {  // visit i is the turn-around of visit i - 1
      return i > 0 && visits[i].first && !visits[i - 1].first && visits[i].second == visits[i - 1].second;
    };
    auto prepare = [&](size_t i) {
      const auto [backward, v] = visits[i];
      visit_number_[{0, (backward ? num_ministages_ : 0) + v}] = first_visit + static_cast<int>(i);
      if (!continues(i)) EmitVisitPrepare(0, v, backward);
    };
    // After a backward visit its parameters go (at its last compute op: the next gathers count on
    // it), and its gradients are reduced (and, after the last index, the update) — emitted after
    // the next visit's gather, so that the gather, needed first, is issued first and the
    // reduction queues behind it (a rank's collectives run one at a time in program order: ahead
    // of the gather, the reduction would hold it back and the next backward would wait for both).
    auto release = [&](size_t i) {
      const int v = visits[i].second;
      if (!policy_.gather_per_microbatch) return;
      const int number = first_visit + static_cast<int>(i);
      for (int r : group_ranks_[0]) {
        const int release_at = last_compute_.has(r, v) ? last_compute_(r, v) : gather_op_(r, v);
        MOTLEY_CHECK(release_at >= 0);
        s_.programs[r].ops[release_at].device_free_bytes += RankParams(v) * param_bytes_;
        s_.programs[r].ops[release_at].frees.push_back(Buf(BufferKind::kParams, v));
        release_op_[{r, number}] = release_at;
      }
    };
    auto finish = [&](size_t i) {
      const int v = visits[i].second;
      for (int r : group_ranks_[0]) gather_op_.erase(r, v);
      if (!policy_.reduce_per_microbatch && k + 1 < max_index) return;
      // A tied model's two copies (the embedding's, the head's) are summed before either is reduced.
      ReduceAfterTiedSum(v, [this, v, k, max_index] {
        if (policy_.reduce_per_microbatch) {
          // Gradients of this microbatch; the optimizer steps once, after the last one.
          if (k + 1 < max_index) {
            const double full = RankParams(v) * grad_bytes_;
            std::vector<int> ops = EmitCollective(OpKind::kReduceScatter, 0, v, full);
            for (size_t j = 0; j < ops.size(); ++j) {
              const int r = group_ranks_[0][j];
              Op& op = s_.programs[r].ops[ops[j]];
              if (last_compute_.has(r, v)) op.deps.push_back(last_compute_(r, v));
              // A device without a microbatch at this index contributes zeros.
              op.reads.push_back(Buf(BufferKind::kGrads, v));
              op.writes.push_back(Buf(BufferKind::kGradShard, v));
              if (!grads_allocated_(r, v)) {
                op.device_alloc_bytes = full;
                op.writes.push_back(Buf(BufferKind::kGrads, v));
              }
              op.device_free_bytes = full;
              op.frees.push_back(Buf(BufferKind::kGrads, v));
              AddGlooReduceScatterBuffer(op, 0, r, full);
              CountReduceOutput(op, r, v, ShardOf(0, r, full), DpDegree(0));
              grads_allocated_(r, v) = false;
              last_reduce_(r, v) = ops[j];
              reduce_ops_[r].push_back(ops[j]);
            }
          } else {
            EmitReduceAndStep(0, v);
          }
        } else {
          EmitReduceAndStep(0, v);
        }
      });
    };
    if (policy_.gather_per_microbatch) prepare(0);
    int finishing = -1;  // a backward visit whose finish waits for the next visit's gather
    for (size_t i = 0; i < visits.size(); ++i) {
      const auto [backward, v] = visits[i];
      if (policy_.gather_per_microbatch && i + 1 < visits.size()) prepare(i + 1);
      if (finishing >= 0) finish(static_cast<size_t>(std::exchange(finishing, -1)));
      for (int64_t m : ms) EmitTask({backward, v, m});
      if (!backward) {
        if (policy_.gather_per_microbatch && !continues(i + 1)) EmitFinishForward(0, v);
        continue;
      }
      release(i);
      finishing = static_cast<int>(i);
    }
    if (finishing >= 0) finish(static_cast<size_t>(finishing));
    visit = first_visit + static_cast<int>(visits.size());
  }
}

}  // namespace motley::lowering
