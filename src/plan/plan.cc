#include "plan/plan.h"

#include <cmath>
#include <cstdint>
#include <algorithm>
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
  std::sort(stages.begin(), stages.end(),
            [](const PlacedMinistage& a, const PlacedMinistage& b) { return a.layers.begin < b.layers.begin; });
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

std::vector<int> BlockRouting(const GroupPlan& group) {
  std::vector<int> routing;
  for (size_t i = 0; i < group.devices.size(); ++i) {
    if (!group.is_tp_leader(i)) continue;
    for (int64_t k = 0; k < group.devices[i].num_microbatches; ++k)
      routing.push_back(group.devices[i].device);
  }
  return routing;
}

Status ValidatePlan(const Plan& plan, const Cluster& cluster, const ModelSpec& model) {
  std::vector<std::string> errors;
  auto error = [&](std::string msg) { errors.push_back(std::move(msg)); };

  if (plan.groups.empty()) error("the plan has no groups; add at least one [[groups]]");
  if (!plan.flextp_mode.empty() && plan.flextp_mode != "off" && plan.flextp_mode != "migrate" &&
      plan.flextp_mode != "resize" && plan.flextp_mode != "semi")
    error(fmt::format("flextp_mode = \"{}\" is not a FlexTP mode; use off, migrate, resize or semi", plan.flextp_mode));
  if (plan.zero_stage < 0 || plan.zero_stage > 3)
    error(fmt::format("zero_stage = {} is not a ZeRO stage; use 0, 1, 2 or 3", plan.zero_stage));
  if (plan.seq_len < 1 || plan.seq_len > model.max_seq_len)
    error(fmt::format("seq_len ({}) must be between 1 and the model's max_seq_len ({})", plan.seq_len,
                      model.max_seq_len));
  if (plan.offload_params && plan.zero_stage < 2)
    error(fmt::format(
        "offload_params keeps each device's shard of a ministage on the host, so it needs zero_stage "
        "2 or 3; this plan has zero_stage = {}",
        plan.zero_stage));
  if (plan.offload_params && plan.schedule != PipelineSchedule::kInterleaved)
    error(fmt::format(
        "offload_params needs schedule = \"interleaved\" (it offloads the ministages not in use); "
        "this plan's schedule is \"{}\"",
        PipelineScheduleName(plan.schedule)));

  std::map<int, std::string> seen;  // device -> where it was first used
  const int64_t first_microbatch_size =
      plan.groups.empty() || plan.groups[0].devices.empty() ? 0 : plan.groups[0].devices[0].microbatch_size;
  const int64_t pipeline_microbatches = plan.groups.empty() ? 0 : plan.groups[0].num_microbatches();
  for (size_t gi = 0; gi < plan.groups.size(); ++gi) {
    const GroupPlan& g = plan.groups[gi];
    const std::string where = fmt::format("groups[{}]", gi);
    if (g.ministages.empty())
      error(fmt::format("{}: has no ministages; give it at least one layer range", where));
    for (size_t s = 0; s < g.ministages.size(); ++s) {
      const LayerRange& r = g.ministages[s];
      if (r.begin < 0 || r.end <= r.begin || r.end > model.num_layers)
        error(
            fmt::format("{}.ministages[{}]: layers [{}, {}) must hold at least one of the model's {} layers",
                        where, s, r.begin, r.end, model.num_layers));
      if (s > 0 && r.begin < g.ministages[s - 1].end)
        error(fmt::format("{}.ministages[{}]: [{}, {}) must come after the previous ministage [{}, {})",
                          where, s, r.begin, r.end, g.ministages[s - 1].begin, g.ministages[s - 1].end));
      if (plan.schedule != PipelineSchedule::kInterleaved && s > 0 && r.begin != g.ministages[s - 1].end)
        error(fmt::format(
            "{}.ministages[{}]: schedule \"{}\" gives each group one contiguous range of layers, but "
            "[{}, {}) does not continue [{}, {}); use schedule = \"interleaved\" to interleave",
            where, s, PipelineScheduleName(plan.schedule), r.begin, r.end, g.ministages[s - 1].begin,
            g.ministages[s - 1].end));
    }
    if (g.devices.empty()) error(fmt::format("{}: has no devices", where));
    if (g.tp_degree < 1 || g.devices.size() % g.tp_degree != 0 || model.num_heads % g.tp_degree != 0 ||
        model.num_kv_heads % g.tp_degree != 0 || model.ffn_size % g.tp_degree != 0) {
      // (The vocabulary need not divide: a team pads it, PaddedVocabSize.)
      error(fmt::format(
          "{}: tp_degree ({}) must divide the group's {} devices and the model's {} heads, {} key/value "
          "heads and ffn_size {}",
          where, g.tp_degree, g.devices.size(), model.num_heads, model.num_kv_heads, model.ffn_size));
    } else {
      for (size_t di = 0; di < g.devices.size(); ++di) {
        const DevicePlan& leader = g.devices[di - di % g.tp_degree];
        const DevicePlan& d = g.devices[di];
        if (d.microbatch_size != leader.microbatch_size || d.num_microbatches != leader.num_microbatches ||
            d.last_microbatch_size != leader.last_microbatch_size)
          error(fmt::format(
              "{}.devices[{}] (device {}): a tensor-parallel run of {} devices processes the same "
              "microbatches, so its batch figures must equal those of its first device {}",
              where, di, d.device, g.tp_degree, leader.device));
      }
    }
    for (size_t di = 0; di < g.devices.size(); ++di) {
      const DevicePlan& d = g.devices[di];
      const std::string dwhere = fmt::format("{}.devices[{}] (device {})", where, di, d.device);
      if (d.device < 0 || d.device >= cluster.num_devices()) {
        error(fmt::format("{}: no such device; the cluster has devices 0..{}", dwhere,
                          cluster.num_devices() - 1));
      } else if (auto [it, inserted] = seen.try_emplace(d.device, dwhere); !inserted) {
        error(fmt::format("{}: the device is already used by {}; each device belongs to one group", dwhere,
                          it->second));
      }
      if (d.microbatch_size < 1)
        error(fmt::format("{}: microbatch_size ({}) must be >= 1", dwhere, d.microbatch_size));
      if (d.num_microbatches < 0)
        error(fmt::format("{}: num_microbatches ({}) must be >= 0", dwhere, d.num_microbatches));
      if (d.num_microbatches > kMaxMicrobatchesPerDevice)
        error(fmt::format("{}: num_microbatches ({}) is more than motley runs in one step ({}: a step's program "
                          "holds a few ops per microbatch); use a larger microbatch_size or a smaller global batch",
                          dwhere, d.num_microbatches, kMaxMicrobatchesPerDevice));
      if (d.last_microbatch_size < 0 || d.last_microbatch_size > d.microbatch_size)
        error(
            fmt::format("{}: last_microbatch_size ({}) must be between 0 (same as the others) and "
                        "microbatch_size ({})",
                        dwhere, d.last_microbatch_size, d.microbatch_size));
      if (plan.is_pipeline()) {
        if (d.microbatch_size != first_microbatch_size || d.last_microbatch_size != 0)
          error(fmt::format(
              "{}: a pipeline moves whole microbatches between groups, so every device needs the "
              "same microbatch_size ({} here, {} on groups[0].devices[0]) and no last_microbatch_size",
              dwhere, d.microbatch_size, first_microbatch_size));
      }
    }
    if (!g.state_shares.empty()) {
      double sum = 0;
      bool positive = true;
      for (size_t di = 0; di < g.state_shares.size(); ++di) {
        positive = positive && g.state_shares[di] > 0;
        if (g.is_tp_leader(di)) sum += g.state_shares[di];
        if (g.tp_degree >= 1 && di < g.devices.size() &&
            g.state_shares[di] != g.state_shares[di - di % g.tp_degree])
          error(fmt::format("{}.state_shares[{}]: a tensor-parallel team of {} devices holds one share of the "
                            "state, so its members' state_shares must equal its first device's ({:g})",
                            where, di, g.tp_degree, g.state_shares[di - di % g.tp_degree]));
      }
      if (g.state_shares.size() != g.devices.size())
        error(fmt::format("{}: state_shares has {} entries but devices has {}; give one per device", where,
                          g.state_shares.size(), g.devices.size()));
      else if (plan.zero_stage < 1)
        error(fmt::format("{}: state_shares size each device's shard of the ZeRO state, but zero_stage = 0 keeps "
                          "all of it on every device; use zero_stage 1, 2 or 3, or remove state_shares",
                          where));
      else if (!positive)
        error(fmt::format("{}: every state share must be > 0 (each device holds a piece of the state); "
                          "remove a device from the group instead",
                          where));
      else if (std::abs(sum - 1) > 1e-3)
        error(fmt::format("{}: state_shares of the group's {} {} sum to {:g}; they must sum to 1", where,
                          g.devices.size() / std::max(1, g.tp_degree),
                          g.tp_degree > 1 ? "tensor-parallel teams (one entry each counted)" : "devices", sum));
    }
    if (g.num_microbatches() < 1) error(fmt::format("{}: its devices process no microbatch", where));
    if (plan.is_pipeline()) {
      if (g.num_microbatches() != pipeline_microbatches)
        error(
            fmt::format("{}: processes {} microbatches but groups[0] processes {}; every group of a pipeline "
                        "processes every microbatch",
                        where, g.num_microbatches(), pipeline_microbatches));
      if (!g.routing.empty()) {
        std::map<int, int64_t> count;
        for (int dev : g.routing) ++count[dev];
        bool ok = static_cast<int64_t>(g.routing.size()) == g.num_microbatches();
        for (size_t di = 0; di < g.devices.size(); ++di)
          ok = ok && count[g.devices[di].device] == (g.is_tp_leader(di) ? g.devices[di].num_microbatches : 0);
        if (!ok)
          error(fmt::format(
              "{}: routing must list one device of the group (a tensor-parallel leader) per "
              "microbatch, each as often as its num_microbatches ({} entries for {} microbatches)",
              where, g.routing.size(), g.num_microbatches()));
      }
    } else if (!g.routing.empty()) {
      error(fmt::format("{}: routing applies only to pipelines (plans with several groups)", where));
    }
  }
  // The ministages of all groups cover every layer exactly once.
  std::vector<int> owners(model.num_layers, 0);
  for (const auto& g : plan.groups)
    for (const auto& r : g.ministages)
      for (int l = std::max(0, r.begin); l < std::min<int>(r.end, model.num_layers); ++l) ++owners[l];
  for (int l = 0; l < model.num_layers; ++l) {
    if (owners[l] != 1) {
      error(fmt::format(
          "layer {} of model '{}' ({} layers) is in {} ministages; every layer must be in exactly one", l,
          model.name, model.num_layers, owners[l]));
      break;
    }
  }
  if (plan.schedule != PipelineSchedule::kInterleaved) {
    for (size_t gi = 1; gi < plan.groups.size(); ++gi) {
      const auto& prev = plan.groups[gi - 1].ministages;
      const auto& cur = plan.groups[gi].ministages;
      if (!prev.empty() && !cur.empty() && cur.front().begin != prev.back().end)
        error(fmt::format(
            "groups[{}] starts at layer {} but groups[{}] ends at layer {}; with schedule \"{}\" groups "
            "hold consecutive layers in pipeline order",
            gi, cur.front().begin, gi - 1, prev.back().end, PipelineScheduleName(plan.schedule)));
    }
  }
  // A tied model whose embedding and head are in different groups sums the two copies' gradients
  // between ranks that hold the same vocabulary rows: the two groups split it alike.
  if (model.tie_embeddings) {
    int first = -1, last = -1;
    for (size_t gi = 0; gi < plan.groups.size(); ++gi)
      for (const auto& r : plan.groups[gi].ministages) {
        if (r.begin == 0) first = static_cast<int>(gi);
        if (r.end == model.num_layers) last = static_cast<int>(gi);
      }
    if (first >= 0 && last >= 0 && first != last &&
        plan.groups[first].tp_degree != plan.groups[last].tp_degree)
      error(fmt::format(
          "groups[{}] holds the embedding with tp_degree = {} and groups[{}] the head with tp_degree = {}; model "
          "'{}' ties them (tie_embeddings = true), so both groups must split its vocabulary alike: give them the "
          "same tp_degree",
          first, plan.groups[first].tp_degree, last, plan.groups[last].tp_degree, model.name));
  }
  if (errors.empty()) return Status::Ok();
  std::string joined;
  for (const auto& e : errors) joined += (joined.empty() ? "" : "\n") + std::string("plan: ") + e;
  return Status::InvalidArgument(joined);
}

}  // namespace motley
