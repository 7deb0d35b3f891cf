#include "plan/plan.h"

#include <algorithm>
#include <map>
#include <numeric>

#include <fmt/format.h>

namespace motley {

std::string_view PipelineScheduleName(PipelineSchedule s) {
  switch (s) {
    case PipelineSchedule::kGPipe: return "gpipe";
    case PipelineSchedule::k1F1B: return "1f1b";
    case PipelineSchedule::kInterleaved: return "interleaved";
  }
  return "?";
}

std::pair<int, int> GroupPlan::ministage_layers(int s) const {
  const int n = num_layers(), k = num_ministages;
  const int base = n / k, extra = n % k;
  const int begin = layer_begin + s * base + std::min(s, extra);
  return {begin, begin + base + (s < extra ? 1 : 0)};
}

int64_t GroupPlan::num_microbatches() const {
  int64_t sum = 0;
  for (const auto& d : devices) sum += d.num_microbatches;
  return sum;
}

int64_t GroupPlan::sequences() const {
  int64_t sum = 0;
  for (const auto& d : devices) sum += d.sequences();
  return sum;
}

int Plan::num_devices() const {
  int n = 0;
  for (const auto& g : groups) n += static_cast<int>(g.devices.size());
  return n;
}

std::vector<int> BlockRouting(const GroupPlan& group) {
  std::vector<int> routing;
  for (const auto& d : group.devices)
    for (int64_t i = 0; i < d.num_microbatches; ++i) routing.push_back(d.device);
  return routing;
}

Status ValidatePlan(const Plan& plan, const Cluster& cluster, const ModelSpec& model) {
  std::vector<std::string> errors;
  auto error = [&](std::string msg) { errors.push_back(std::move(msg)); };

  if (plan.groups.empty()) error("the plan has no groups; add at least one [[groups]]");
  if (plan.zero_stage < 0 || plan.zero_stage > 3)
    error(fmt::format("zero_stage = {} is not a ZeRO stage; use 0, 1, 2 or 3", plan.zero_stage));
  if (plan.seq_len < 1 || plan.seq_len > model.max_seq_len)
    error(fmt::format("seq_len ({}) must be between 1 and the model's max_seq_len ({})", plan.seq_len,
                      model.max_seq_len));
  if (plan.offload_params && plan.schedule != PipelineSchedule::kInterleaved)
    error(fmt::format("offload_params needs schedule = \"interleaved\" (it offloads the ministages not in use); "
                      "this plan's schedule is \"{}\"",
                      PipelineScheduleName(plan.schedule)));

  int expected_begin = 0;
  std::map<int, std::string> seen;  // device -> where it was first used
  const int64_t first_microbatch_size =
      plan.groups.empty() || plan.groups[0].devices.empty() ? 0 : plan.groups[0].devices[0].microbatch_size;
  const int64_t pipeline_microbatches = plan.groups.empty() ? 0 : plan.groups[0].num_microbatches();
  for (size_t gi = 0; gi < plan.groups.size(); ++gi) {
    const GroupPlan& g = plan.groups[gi];
    const std::string where = fmt::format("groups[{}]", gi);
    if (g.layer_begin != expected_begin || g.layer_end <= g.layer_begin) {
      error(fmt::format("{}: layers [{}, {}) must start at layer {} (where the previous group ended) and hold at "
                        "least one layer",
                        where, g.layer_begin, g.layer_end, expected_begin));
    }
    expected_begin = std::max(expected_begin, g.layer_end);
    if (g.num_ministages < 1 || g.num_ministages > std::max(1, g.num_layers()))
      error(fmt::format("{}: num_ministages ({}) must be between 1 and its number of layers ({})", where,
                        g.num_ministages, g.num_layers()));
    if (g.devices.empty()) error(fmt::format("{}: has no devices", where));
    if (g.tp_degree < 1 || g.devices.size() % g.tp_degree != 0 || model.num_heads % g.tp_degree != 0)
      error(fmt::format("{}: tp_degree ({}) must divide the group's {} devices and the model's {} heads", where,
                        g.tp_degree, g.devices.size(), model.num_heads));
    for (size_t di = 0; di < g.devices.size(); ++di) {
      const DevicePlan& d = g.devices[di];
      const std::string dwhere = fmt::format("{}.devices[{}] (device {})", where, di, d.device);
      if (d.device < 0 || d.device >= cluster.num_devices()) {
        error(fmt::format("{}: no such device; the cluster has devices 0..{}", dwhere, cluster.num_devices() - 1));
      } else if (auto [it, inserted] = seen.try_emplace(d.device, dwhere); !inserted) {
        error(fmt::format("{}: the device is already used by {}; each device belongs to one group", dwhere,
                          it->second));
      }
      if (d.microbatch_size < 1) error(fmt::format("{}: microbatch_size ({}) must be >= 1", dwhere, d.microbatch_size));
      if (d.num_microbatches < 0)
        error(fmt::format("{}: num_microbatches ({}) must be >= 0", dwhere, d.num_microbatches));
      if (d.last_microbatch_size < 0 || d.last_microbatch_size > d.microbatch_size)
        error(fmt::format("{}: last_microbatch_size ({}) must be between 0 (same as the others) and "
                          "microbatch_size ({})",
                          dwhere, d.last_microbatch_size, d.microbatch_size));
      if (plan.is_pipeline()) {
        if (d.microbatch_size != first_microbatch_size || d.last_microbatch_size != 0)
          error(fmt::format("{}: a pipeline moves whole microbatches between groups, so every device needs the "
                            "same microbatch_size ({} here, {} on groups[0].devices[0]) and no last_microbatch_size",
                            dwhere, d.microbatch_size, first_microbatch_size));
      }
    }
    if (g.num_microbatches() < 1) error(fmt::format("{}: its devices process no microbatch", where));
    if (plan.is_pipeline()) {
      if (g.num_microbatches() != pipeline_microbatches)
        error(fmt::format("{}: processes {} microbatches but groups[0] processes {}; every group of a pipeline "
                          "processes every microbatch",
                          where, g.num_microbatches(), pipeline_microbatches));
      if (!g.routing.empty()) {
        std::map<int, int64_t> count;
        for (int dev : g.routing) ++count[dev];
        bool ok = static_cast<int64_t>(g.routing.size()) == g.num_microbatches();
        for (const auto& d : g.devices) ok = ok && count[d.device] == d.num_microbatches;
        if (!ok)
          error(fmt::format("{}: routing must list one device of the group per microbatch, each device as often "
                            "as its num_microbatches ({} entries for {} microbatches)",
                            where, g.routing.size(), g.num_microbatches()));
      }
    } else if (!g.routing.empty()) {
      error(fmt::format("{}: routing applies only to pipelines (plans with several groups)", where));
    }
  }
  if (!plan.groups.empty() && expected_begin != model.num_layers)
    error(fmt::format("the groups cover layers [0, {}) but the model '{}' has {} layers", expected_begin,
                      model.name, model.num_layers));
  if (errors.empty()) return Status::Ok();
  std::string joined;
  for (const auto& e : errors) joined += (joined.empty() ? "" : "\n") + std::string("plan: ") + e;
  return Status::InvalidArgument(joined);
}

}  // namespace motley
