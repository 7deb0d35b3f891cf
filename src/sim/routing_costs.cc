#include "sim/routing_costs.h"

#include "plan/routing.h"

namespace motley {

int FillZorseRouting(Plan* plan, const CostModel& costs) {
  if (!plan->is_pipeline()) return 0;
  auto time = [&](int group, int device) {
    const GroupPlan& g = plan->groups[group];
    const double sequences = static_cast<double>(g.devices.front().microbatch_size);
    const double per_layer = costs.LayerForwardS(device, sequences) + costs.LayerBackwardS(device, sequences);
    return g.num_layers() * per_layer * costs.Slowdown(device);
  };
  std::vector<std::vector<int>> routing = ZorseRouting(*plan, time);
  int filled = 0;
  for (size_t g = 0; g < plan->groups.size(); ++g) {
    if (!plan->groups[g].routing.empty()) continue;
    plan->groups[g].routing = routing[g];
    ++filled;
  }
  return filled;
}

int FillDefaultRouting(Plan* plan, const Cluster& cluster, const ModelSpec& model) {
  if (!plan->is_pipeline()) return 0;
  const CostModel roofline(cluster, model, nullptr, plan->seq_len, plan->precision,
                           plan->activation_checkpointing);
  return FillZorseRouting(plan, roofline);
}

}  // namespace motley
