// Pipelines (GPipe, 1F1B, interleaved ministages): the global task order (pipeline_order.h) with
// each visit's parameter preparation and finish put where they belong in it.
#include <algorithm>
#include <cstdint>
#include <map>
#include <tuple>
#include <vector>

#include "core/check.h"
#include "plan/lowerer.h"

namespace motley::lowering {

void Lowerer::EmitPipeline() {
  const int num_groups = static_cast<int>(plan_.groups.size());
  // Visits and where their preparation and finish go in the global order.
  std::vector<Task> order = PipelineOrder(plan_, ministages_, num_mb_, routing_rank_);
  std::vector<std::vector<std::pair<bool, int>>> visits(num_groups);  // per group, in order
  std::map<std::pair<int, int>, std::pair<size_t, size_t>> span;      // (g, pass*V+v) -> first, last position
  for (size_t i = 0; i < order.size(); ++i) {
    const Task& t = order[i];
    const int g = ministages_[t.v].group;
    const int key = (t.backward ? 1 : 0) * num_ministages_ + t.v;
    auto [it, inserted] = span.try_emplace({g, key}, i, i);
    if (inserted) {
      visit_number_[{g, key}] = static_cast<int>(visits[g].size());
      visits[g].push_back({t.backward, t.v});
    }
    it->second.second = i;
  }
  // Where each visit's preparation and finish go, in the order they are found (a position's list
  // in that order): before position `at`, (bwd, g*V+v, continuation); after it, (g, key).
  struct Prepare {
    size_t at;
    bool backward;
    int gv;
    bool continuation;
  };
  struct Finish {
    size_t after;
    int g, key;
  };
  std::vector<Prepare> prepares;
  std::vector<Finish> finishes;
  for (int g = 0; g < num_groups; ++g) {
    for (size_t k = 0; k < visits[g].size(); ++k) {
      const auto [backward, v] = visits[g][k];
      const int key = (backward ? 1 : 0) * num_ministages_ + v;
      // The last ministage turns around: its backward follows its forward with parameters in place.
      const bool continuation = k > 0 && backward && !visits[g][k - 1].first && visits[g][k - 1].second == v;
      const bool continued =
          k + 1 < visits[g].size() && !backward && visits[g][k + 1].first && visits[g][k + 1].second == v;
      if (policy_.gather_per_visit || (policy_.gather_once && !backward)) {
        // Prefetch the next visit while the current one computes: right after its first task.
        size_t at = 0;
        if (k > 0 && policy_.gather_per_visit) {
          const auto [pb, pv] = visits[g][k - 1];
          at = span[{g, (pb ? 1 : 0) * num_ministages_ + pv}].first + 1;
        }
        if (!continuation || policy_.offload_params)
          prepares.push_back({at, backward, g * num_ministages_ + v, continuation});
      }
      if (backward || (policy_.gather_per_visit && !continued))
        finishes.push_back({span[{g, key}].second, g, key});
    }
  }
  std::stable_sort(prepares.begin(), prepares.end(),
                   [](const Prepare& a, const Prepare& b) { return a.at < b.at; });
  std::stable_sort(finishes.begin(), finishes.end(),
                   [](const Finish& a, const Finish& b) { return a.after < b.after; });
  auto prepare = prepares.begin();
  auto finish = finishes.begin();
  for (size_t i = 0; i <= order.size(); ++i) {
    for (; prepare != prepares.end() && prepare->at == i; ++prepare)
      EmitVisitPrepare(prepare->gv / num_ministages_, prepare->gv % num_ministages_, prepare->backward,
                       prepare->continuation);
    if (i == order.size()) break;
    emitted_share_ = static_cast<double>(i) / static_cast<double>(order.size());
    EmitTask(order[i]);
    for (; finish != finishes.end() && finish->after == i; ++finish) {
      const bool backward = finish->key >= num_ministages_;
      const int v = finish->key % num_ministages_;
      if (backward) {
        EmitFinishBackward(finish->g, v);
      } else {
        EmitFinishForward(finish->g, v);
      }
    }
  }
  emitted_share_ = 0;
}

}  // namespace motley::lowering
