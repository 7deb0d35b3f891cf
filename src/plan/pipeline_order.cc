#include "plan/pipeline_order.h"

#include <cstdint>
#include <algorithm>

#include "core/check.h"

namespace motley {
namespace {

// Per-group task sequences for pipelines and interleaved groups.
std::vector<std::vector<Task>> GroupSequences(const Plan& plan, const std::vector<VirtualStage>& vstages,
                                              int64_t num_mb) {
  const int num_vstages = static_cast<int>(vstages.size());
  const int num_groups = static_cast<int>(plan.groups.size());
  std::vector<std::vector<int>> group_vs(num_groups);  // virtual stages of each group, ascending
  for (int v = 0; v < num_vstages; ++v) group_vs[vstages[v].group].push_back(v);
  std::vector<std::vector<Task>> seq(num_groups);
  for (int g = 0; g < num_groups; ++g) {
    if (plan.schedule == PipelineSchedule::k1F1B) {
      auto forward = [&](int64_t m) {
        for (int v : group_vs[g]) seq[g].push_back({false, v, m});
      };
      auto backward = [&](int64_t m) {
        for (auto it = group_vs[g].rbegin(); it != group_vs[g].rend(); ++it) seq[g].push_back({true, *it, m});
      };
      const int64_t warmup = std::min<int64_t>(num_groups - 1 - g, num_mb);
      for (int64_t m = 0; m < warmup; ++m) forward(m);
      for (int64_t m = warmup; m < num_mb; ++m) {
        forward(m);
        backward(m - warmup);
      }
      for (int64_t m = num_mb - warmup; m < num_mb; ++m) backward(m);
    } else {
      for (int v : group_vs[g])
        for (int64_t m = 0; m < num_mb; ++m) seq[g].push_back({false, v, m});
      for (auto it = group_vs[g].rbegin(); it != group_vs[g].rend(); ++it)
        for (int64_t m = 0; m < num_mb; ++m) seq[g].push_back({true, *it, m});
    }
  }
  return seq;
}

// The global order: each group runs its sequence one task per time unit as soon as the task's
// inputs exist; tasks sorted by start time (then group) form one order every rank agrees with.
}  // namespace

std::vector<Task> PipelineOrder(const Plan& plan, const std::vector<VirtualStage>& vstages, int64_t num_mb) {
  const int num_vstages = static_cast<int>(vstages.size());
  const auto seq = GroupSequences(plan, vstages, num_mb);
  const int num_groups = static_cast<int>(seq.size());
  std::vector<int64_t> done_f(num_vstages * num_mb, -1), done_b(num_vstages * num_mb, -1);
  std::vector<size_t> next(num_groups, 0);
  std::vector<int64_t> free_at(num_groups, 0);
  std::vector<std::pair<int64_t, std::pair<int, size_t>>> timed;  // (start, (group, index))
  size_t remaining = 0;
  for (const auto& s : seq) remaining += s.size();
  while (remaining > 0) {
    bool progressed = false;
    for (int g = 0; g < num_groups; ++g) {
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
          if (t.v + 1 < num_vstages) need(done_b[(t.v + 1) * num_mb + t.m]);
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
    MOTLEY_CHECK_MSG(progressed, "pipeline task sequences deadlock");
  }
  std::sort(timed.begin(), timed.end());
  std::vector<Task> order;
  order.reserve(timed.size());
  for (const auto& [time, gi] : timed) order.push_back(seq[gi.first][gi.second]);
  return order;
}

}  // namespace motley
