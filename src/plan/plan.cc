#include "plan/plan.h"

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <map>
#include <numeric>

#include <fmt/format.h>

#include "core/check.h"

namespace motley {

std::string_view PipelineScheduleName(PipelineSchedule s) {
  switch (s) {
    case PipelineSchedule::kGPipe:
      return "gpipe";
    case PipelineSchedule::k1F1B:
      return "1f1b";
    case PipelineSchedule::kInterleaved:
      return "interleaved";
  }
  return "?";
}

int GroupPlan::num_layers() const {
  int n = 0;
  for (const auto& m : ministages) n += m.size();
  return n;
}

std::vector<LayerRange> SplitLayers(int begin, int num_layers, int k) {
  std::vector<LayerRange> out;
  const int base = num_layers / k, extra = num_layers % k;
  for (int s = 0; s < k; ++s) {
    int size = base + (s < extra ? 1 : 0);
    out.push_back({begin, begin + size});
    begin += size;
  }
  return out;
}

std::vector<std::vector<LayerRange>> InterleavedMinistages(const std::vector<int>& layers_per_group,
                                                           const std::vector<int>& ministages_per_group) {
  MOTLEY_CHECK_EQ(layers_per_group.size(), ministages_per_group.size());
  const size_t n = layers_per_group.size();
  std::vector<std::vector<int>> sizes(n);  // ministage sizes per group
  for (size_t g = 0; g < n; ++g) {
    MOTLEY_CHECK_GE(ministages_per_group[g], 1);
    MOTLEY_CHECK_LE(ministages_per_group[g], layers_per_group[g]);
    for (const auto& r : SplitLayers(0, layers_per_group[g], ministages_per_group[g]))
      sizes[g].push_back(r.size());
  }
  std::vector<std::vector<LayerRange>> out(n);
  int layer = 0;
  for (size_t round = 0;; ++round) {
    bool any = false;
    for (size_t g = 0; g < n; ++g) {
      if (round >= sizes[g].size()) continue;
      out[g].push_back({layer, layer + sizes[g][round]});
      layer += sizes[g][round];
      any = true;
    }
    if (!any) break;
  }
  return out;
}

std::vector<PlacedMinistage> MinistagesByLayer(const Plan& plan) {
  std::vector<PlacedMinistage> stages;
  for (size_t g = 0; g < plan.groups.size(); ++g)
    for (size_t s = 0; s < plan.groups[g].ministages.size(); ++s)
      stages.push_back({static_cast<int>(g), static_cast<int>(s), plan.groups[g].ministages[s]});
  std::sort(stages.begin(), stages.end(), [](const PlacedMinistage& a, const PlacedMinistage& b) {
    return a.layers.begin < b.layers.begin;
  });
  return stages;
}

int64_t GroupPlan::num_microbatches() const {
  int64_t sum = 0;
  for (size_t i = 0; i < devices.size(); ++i)
    if (is_tp_leader(i)) sum += devices[i].num_microbatches;
  return sum;
}

int64_t GroupPlan::sequences() const {
  int64_t sum = 0;
  for (size_t i = 0; i < devices.size(); ++i)
    if (is_tp_leader(i)) sum += devices[i].sequences();
  return sum;
}

int Plan::num_devices() const {
  int n = 0;
  for (const auto& g : groups) n += static_cast<int>(g.devices.size());
  return n;
}

std::vector<int> Plan::devices() const {
  std::vector<int> out;
  for (const auto& g : groups)
    for (const auto& d : g.devices) out.push_back(d.device);
  std::sort(out.begin(), out.end());
  out.erase(std::unique(out.begin(), out.end()), out.end());
  return out;
}

std::vector<int> BlockRouting(const GroupPlan& group) {
  std::vector<int> routing;
  for (size_t i = 0; i < group.devices.size(); ++i) {
    if (!group.is_tp_leader(i)) continue;
    for (int64_t k = 0; k < group.devices[i].num_microbatches; ++k)
      routing.push_back(group.devices[i].device);
  }
  return routing;
}

}  // namespace motley
