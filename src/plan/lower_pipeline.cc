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
  std::vector<std::vector<std::tuple<bool, int, bool>>> prepare_at(
      order.size() + 1);  // before position: (bwd, g*V+v, continuation)
  std::vector<std::vector<std::pair<int, int>>> finish_after(order.size());  // after position: (g, key)
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
          prepare_at[at].push_back({backward, g * num_ministages_ + v, continuation});
      }
      if (backward || (policy_.gather_per_visit && !continued))
        finish_after[span[{g, key}].second].push_back({g, key});
    }
  }
  for (size_t i = 0; i <= order.size(); ++i) {
    for (const auto& [backward, gv, continuation] : prepare_at[i])
      EmitVisitPrepare(gv / num_ministages_, gv % num_ministages_, backward, continuation);
    if (i == order.size()) break;
    EmitTask(order[i]);
    for (const auto& [g, key] : finish_after[i]) {
      const bool backward = key >= num_ministages_;
      const int v = key % num_ministages_;
      if (backward) {
        EmitFinishBackward(g, v);
      } else {
        EmitFinishForward(g, v);
      }
    }
  }
}

}  // namespace motley::lowering
