#include "plan/pipeline_order.h"

#include <algorithm>
#include <cstdint>
#include <map>
#include <optional>

#include "core/check.h"

namespace motley {
namespace {

// The serial task sequences of a pipeline: one per group (GPipe, interleaved: a group's ministages
// one after another over all microbatches), or one per worker of a group (1F1B: each device, or
// tensor-parallel run, alternates one forward and one backward of its own microbatches after a
// warm-up of its own, as many as there are stages after its group).
std::vector<std::vector<Task>> TaskSequences(const Plan& plan, const std::vector<PlacedMinistage>& ministages,
                                             int64_t num_mb, const std::vector<std::vector<int>>& worker_of) {
  const int num_ministages = static_cast<int>(ministages.size());
  const int num_groups = static_cast<int>(plan.groups.size());
  std::vector<std::vector<int>> group_vs(num_groups);  // ministages of each group, ascending
  for (int v = 0; v < num_ministages; ++v) group_vs[ministages[v].group].push_back(v);
  std::vector<std::vector<Task>> seq;
  for (int g = 0; g < num_groups; ++g) {
    if (plan.schedule == PipelineSchedule::k1F1B) {
      std::map<int, std::vector<int64_t>> own;  // worker -> its microbatches, ascending
      for (int64_t m = 0; m < num_mb; ++m) own[worker_of.empty() ? 0 : worker_of[g][m]].push_back(m);
      for (const auto& [worker, ms] : own) {
        std::vector<Task>& out = seq.emplace_back();
        auto forward = [&](int64_t m) {
          for (int v : group_vs[g]) out.push_back({false, v, m});
        };
        auto backward = [&](int64_t m) {
          for (auto it = group_vs[g].rbegin(); it != group_vs[g].rend(); ++it) out.push_back({true, *it, m});
        };
        const int64_t n = static_cast<int64_t>(ms.size());
        const int64_t warmup = std::min<int64_t>(num_groups - 1 - g, n);
        for (int64_t k = 0; k < warmup; ++k) forward(ms[k]);
        for (int64_t k = warmup; k < n; ++k) {
          forward(ms[k]);
          backward(ms[k - warmup]);
        }
        for (int64_t k = n - warmup; k < n; ++k) backward(ms[k]);
      }
    } else {
      std::vector<Task>& out = seq.emplace_back();
      for (int v : group_vs[g])
        for (int64_t m = 0; m < num_mb; ++m) out.push_back({false, v, m});
      for (auto it = group_vs[g].rbegin(); it != group_vs[g].rend(); ++it)
        for (int64_t m = 0; m < num_mb; ++m) out.push_back({true, *it, m});
    }
  }
  return seq;
}

// The global order: each sequence runs one task per time unit as soon as the task's inputs exist;
// tasks sorted by start time (then sequence) form one order every rank agrees with. Nothing when
// the sequences wait for each other forever.
std::optional<std::vector<Task>> UnitCostOrder(const std::vector<std::vector<Task>>& seq, int num_ministages,
                                               int64_t num_mb) {
  // One sequence (one group, GPipe or interleaved) runs in its own order: each task's inputs come
  // before it in the sequence.
  if (seq.size() == 1) return seq[0];
  const int num_seq = static_cast<int>(seq.size());
  std::vector<int64_t> done_f(num_ministages * num_mb, -1), done_b(num_ministages * num_mb, -1);
  std::vector<size_t> next(num_seq, 0);
  std::vector<int64_t> free_at(num_seq, 0);
  std::vector<std::pair<int64_t, std::pair<int, size_t>>> timed;  // (start, (sequence, index))
  size_t remaining = 0;
  for (const auto& s : seq) remaining += s.size();
  while (remaining > 0) {
    bool progressed = false;
    for (int g = 0; g < num_seq; ++g) {
      while (next[g] < seq[g].size()) {
        const Task& t = seq[g][next[g]];
        int64_t ready = free_at[g];
        bool ok = true;
        auto need = [&](int64_t done) {
          if (done < 0) ok = false;
          ready = std::max(ready, done);
        };
        if (!t.backward) {
          if (t.v > 0) need(done_f[(t.v - 1) * num_mb + t.m]);
        } else {
          need(done_f[t.v * num_mb + t.m]);
          if (t.v + 1 < num_ministages) need(done_b[(t.v + 1) * num_mb + t.m]);
        }
        if (!ok) break;
        timed.push_back({ready, {g, next[g]}});
        (t.backward ? done_b : done_f)[t.v * num_mb + t.m] = ready + 1;
        free_at[g] = ready + 1;
        ++next[g];
        --remaining;
        progressed = true;
      }
    }
    if (!progressed) return std::nullopt;
  }
  if (!std::is_sorted(timed.begin(), timed.end()))
    std::sort(timed.begin(), timed.end());  // (one sequence: in order)
  std::vector<Task> order;
  order.reserve(timed.size());
  for (const auto& [time, gi] : timed) order.push_back(seq[gi.first][gi.second]);
  return order;
}

}  // namespace

std::vector<Task> PipelineOrder(const Plan& plan, const std::vector<PlacedMinistage>& ministages,
                                int64_t num_mb, const std::vector<std::vector<int>>& worker_of) {
  const int num_ministages = static_cast<int>(ministages.size());
  if (plan.schedule == PipelineSchedule::k1F1B && !worker_of.empty()) {
    // Each device's own 1F1B. A routing that interleaves microbatches across a stage's devices
    // unlike the next stage's can make those windows wait for each other (a device at its limit
    // waiting for a backward queued behind a forward it has yet to send); such plans keep the
    // stage-wide 1F1B below, whose windows count the stage's microbatches.
    if (auto order =
            UnitCostOrder(TaskSequences(plan, ministages, num_mb, worker_of), num_ministages, num_mb))
      return *order;
  }
  std::optional<std::vector<Task>> order =
      UnitCostOrder(TaskSequences(plan, ministages, num_mb, {}), num_ministages, num_mb);
  MOTLEY_CHECK_MSG(order.has_value(), "pipeline task sequences deadlock");
  return *order;
}

}  // namespace motley
