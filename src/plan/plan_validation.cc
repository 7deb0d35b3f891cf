// ValidatePlan (plan.h): a plan checked against its cluster and model, one function per rule; every
// rule that fails adds one message, in the order below, and the plan is refused with all of them.
#include <algorithm>
#include <cmath>
#include <map>
#include <string>
#include <vector>

#include <fmt/format.h>

#include "plan/plan.h"

namespace motley {
namespace {

using Errors = std::vector<std::string>;

void Add(Errors& errors, std::string message) { errors.push_back(std::move(message)); }

// The plan's own settings: groups, FlexTP mode, ZeRO stage, sequence length, offload.
void CheckSettings(const Plan& plan, const ModelSpec& model, Errors& e) {
  if (plan.groups.empty()) Add(e, "the plan has no groups; add at least one [[groups]]");
  if (!plan.flextp_mode.empty() && plan.flextp_mode != "off" && plan.flextp_mode != "migrate" &&
      plan.flextp_mode != "resize" && plan.flextp_mode != "semi")
    Add(e, fmt::format("flextp_mode = \"{}\" is not a FlexTP mode; use off, migrate, resize or semi",
                       plan.flextp_mode));
  if (plan.zero_stage < 0 || plan.zero_stage > 3)
    Add(e, fmt::format("zero_stage = {} is not a ZeRO stage; use 0, 1, 2 or 3", plan.zero_stage));
  if (plan.seq_len < 1 || plan.seq_len > model.max_seq_len)
    Add(e, fmt::format("seq_len ({}) must be between 1 and the model's max_seq_len ({})", plan.seq_len,
                       model.max_seq_len));
  if (plan.offload_params && plan.zero_stage < 2)
    Add(e, fmt::format(
               "offload_params keeps each device's shard of a ministage on the host, so it needs zero_stage "
               "2 or 3; this plan has zero_stage = {}",
               plan.zero_stage));
  if (plan.offload_params && plan.schedule != PipelineSchedule::kInterleaved)
    Add(e, fmt::format(
               "offload_params needs schedule = \"interleaved\" (it offloads the ministages not in use); "
               "this plan's schedule is \"{}\"",
               PipelineScheduleName(plan.schedule)));
}

// A group's ministages: real layer ranges, in order, contiguous unless interleaved.
void CheckMinistages(const Plan& plan, const GroupPlan& g, const std::string& where, const ModelSpec& model,
                     Errors& e) {
  if (g.ministages.empty())
    Add(e, fmt::format("{}: has no ministages; give it at least one layer range", where));
  for (size_t s = 0; s < g.ministages.size(); ++s) {
    const LayerRange& r = g.ministages[s];
    if (r.begin < 0 || r.end <= r.begin || r.end > model.num_layers)
      Add(e, fmt::format("{}.ministages[{}]: layers [{}, {}) must hold at least one of the model's {} layers",
                         where, s, r.begin, r.end, model.num_layers));
    if (s > 0 && r.begin < g.ministages[s - 1].end)
      Add(e, fmt::format("{}.ministages[{}]: [{}, {}) must come after the previous ministage [{}, {})", where,
                         s, r.begin, r.end, g.ministages[s - 1].begin, g.ministages[s - 1].end));
    if (plan.schedule != PipelineSchedule::kInterleaved && s > 0 && r.begin != g.ministages[s - 1].end)
      Add(e, fmt::format(
                 "{}.ministages[{}]: schedule \"{}\" gives each group one contiguous range of layers, but "
                 "[{}, {}) does not continue [{}, {}); use schedule = \"interleaved\" to interleave",
                 where, s, PipelineScheduleName(plan.schedule), r.begin, r.end, g.ministages[s - 1].begin,
                 g.ministages[s - 1].end));
  }
}

// A group's tensor-parallel degree divides its devices and the model's heads and MLP; a team's
// members process the same microbatches.
void CheckTensorParallel(const GroupPlan& g, const std::string& where, const ModelSpec& model, Errors& e) {
  if (g.tp_degree < 1 || g.devices.size() % g.tp_degree != 0 || model.num_heads % g.tp_degree != 0 ||
      model.num_kv_heads % g.tp_degree != 0 || model.ffn_size % g.tp_degree != 0) {
    // (The vocabulary need not divide: a team pads it, PaddedVocabSize.)
    Add(e, fmt::format(
               "{}: tp_degree ({}) must divide the group's {} devices and the model's {} heads, {} key/value "
               "heads and ffn_size {}",
               where, g.tp_degree, g.devices.size(), model.num_heads, model.num_kv_heads, model.ffn_size));
    return;
  }
  for (size_t di = 0; di < g.devices.size(); ++di) {
    const DevicePlan& leader = g.devices[di - di % g.tp_degree];
    const DevicePlan& d = g.devices[di];
    if (d.microbatch_size != leader.microbatch_size || d.num_microbatches != leader.num_microbatches ||
        d.last_microbatch_size != leader.last_microbatch_size)
      Add(e, fmt::format("{}.devices[{}] (device {}): a tensor-parallel run of {} devices processes the same "
                         "microbatches, so its batch figures must equal those of its first device {}",
                         where, di, d.device, g.tp_degree, leader.device));
  }
}

// A group's devices: in the cluster, each in one group, with sensible batch figures (the same
// microbatch everywhere in a pipeline). `seen`: device -> where it was first used.
void CheckDevices(const Plan& plan, const GroupPlan& g, const std::string& where, const Cluster& cluster,
                  std::map<int, std::string>& seen, Errors& e) {
  const int64_t first_microbatch_size =
      plan.groups[0].devices.empty() ? 0 : plan.groups[0].devices[0].microbatch_size;
  for (size_t di = 0; di < g.devices.size(); ++di) {
    const DevicePlan& d = g.devices[di];
    const std::string dwhere = fmt::format("{}.devices[{}] (device {})", where, di, d.device);
    if (d.device < 0 || d.device >= cluster.num_devices()) {
      Add(e, fmt::format("{}: no such device; the cluster has devices 0..{}", dwhere,
                         cluster.num_devices() - 1));
    } else if (auto [it, inserted] = seen.try_emplace(d.device, dwhere); !inserted) {
      Add(e, fmt::format("{}: the device is already used by {}; each device belongs to one group", dwhere,
                         it->second));
    }
    if (d.microbatch_size < 1)
      Add(e, fmt::format("{}: microbatch_size ({}) must be >= 1", dwhere, d.microbatch_size));
    if (d.num_microbatches < 0)
      Add(e, fmt::format("{}: num_microbatches ({}) must be >= 0", dwhere, d.num_microbatches));
    if (d.num_microbatches > kMaxMicrobatchesPerDevice)
      Add(e, fmt::format(
                 "{}: num_microbatches ({}) is more than motley runs in one step ({}: a step's program "
                 "holds a few ops per microbatch); use a larger microbatch_size or a smaller global batch",
                 dwhere, d.num_microbatches, kMaxMicrobatchesPerDevice));
    if (d.last_microbatch_size < 0 || d.last_microbatch_size > d.microbatch_size)
      Add(e, fmt::format("{}: last_microbatch_size ({}) must be between 0 (same as the others) and "
                         "microbatch_size ({})",
                         dwhere, d.last_microbatch_size, d.microbatch_size));
    if (plan.is_pipeline() && (d.microbatch_size != first_microbatch_size || d.last_microbatch_size != 0))
      Add(e, fmt::format(
                 "{}: a pipeline moves whole microbatches between groups, so every device needs the "
                 "same microbatch_size ({} here, {} on groups[0].devices[0]) and no last_microbatch_size",
                 dwhere, d.microbatch_size, first_microbatch_size));
  }
}

// A group's state shares (Cephalo's uneven ZeRO shards): one a device, a team's alike, positive,
// summing to 1, with a ZeRO stage to shard.
void CheckStateShares(const Plan& plan, const GroupPlan& g, const std::string& where, Errors& e) {
  if (g.state_shares.empty()) return;
  double sum = 0;
  bool positive = true;
  for (size_t di = 0; di < g.state_shares.size(); ++di) {
    positive = positive && g.state_shares[di] > 0;
    if (g.is_tp_leader(di)) sum += g.state_shares[di];
    if (g.tp_degree >= 1 && di < g.devices.size() &&
        g.state_shares[di] != g.state_shares[di - di % g.tp_degree])
      Add(e, fmt::format("{}.state_shares[{}]: a tensor-parallel team of {} devices holds one share of the "
                         "state, so its members' state_shares must equal its first device's ({:g})",
                         where, di, g.tp_degree, g.state_shares[di - di % g.tp_degree]));
  }
  if (g.state_shares.size() != g.devices.size())
    Add(e, fmt::format("{}: state_shares has {} entries but devices has {}; give one per device", where,
                       g.state_shares.size(), g.devices.size()));
  else if (plan.zero_stage < 1)
    Add(e,
        fmt::format("{}: state_shares size each device's shard of the ZeRO state, but zero_stage = 0 keeps "
                    "all of it on every device; use zero_stage 1, 2 or 3, or remove state_shares",
                    where));
  else if (!positive)
    Add(e, fmt::format("{}: every state share must be > 0 (each device holds a piece of the state); "
                       "remove a device from the group instead",
                       where));
  else if (std::abs(sum - 1) > 1e-3)
    Add(e, fmt::format("{}: state_shares of the group's {} {} sum to {:g}; they must sum to 1", where,
                       g.devices.size() / std::max(1, g.tp_degree),
                       g.tp_degree > 1 ? "tensor-parallel teams (one entry each counted)" : "devices", sum));
}

// A group's microbatches: some; in a pipeline every group processes every one, routed (when a
// routing is given) once to a team leader as often as its num_microbatches.
void CheckMicrobatches(const Plan& plan, const GroupPlan& g, const std::string& where, Errors& e) {
  if (g.num_microbatches() < 1) Add(e, fmt::format("{}: its devices process no microbatch", where));
  if (!plan.is_pipeline()) {
    if (!g.routing.empty())
      Add(e, fmt::format("{}: routing applies only to pipelines (plans with several groups)", where));
    return;
  }
  const int64_t pipeline_microbatches = plan.groups[0].num_microbatches();
  if (g.num_microbatches() != pipeline_microbatches)
    Add(e, fmt::format("{}: processes {} microbatches but groups[0] processes {}; every group of a pipeline "
                       "processes every microbatch",
                       where, g.num_microbatches(), pipeline_microbatches));
  if (g.routing.empty()) return;
  std::map<int, int64_t> count;
  for (int dev : g.routing) ++count[dev];
  bool ok = static_cast<int64_t>(g.routing.size()) == g.num_microbatches();
  for (size_t di = 0; di < g.devices.size(); ++di)
    ok = ok && count[g.devices[di].device] == (g.is_tp_leader(di) ? g.devices[di].num_microbatches : 0);
  if (!ok)
    Add(e, fmt::format("{}: routing must list one device of the group (a tensor-parallel leader) per "
                       "microbatch, each as often as its num_microbatches ({} entries for {} microbatches)",
                       where, g.routing.size(), g.num_microbatches()));
}

// The ministages of all groups cover every layer exactly once.
void CheckLayerCoverage(const Plan& plan, const ModelSpec& model, Errors& e) {
  std::vector<int> owners(model.num_layers, 0);
  for (const auto& g : plan.groups)
    for (const auto& r : g.ministages)
      for (int l = std::max(0, r.begin); l < std::min<int>(r.end, model.num_layers); ++l) ++owners[l];
  for (int l = 0; l < model.num_layers; ++l)
    if (owners[l] != 1) {
      Add(e, fmt::format(
                 "layer {} of model '{}' ({} layers) is in {} ministages; every layer must be in exactly one",
                 l, model.name, model.num_layers, owners[l]));
      return;
    }
}

// Without interleaving, the groups hold consecutive layers in pipeline order.
void CheckPipelineOrder(const Plan& plan, Errors& e) {
  if (plan.schedule == PipelineSchedule::kInterleaved) return;
  for (size_t gi = 1; gi < plan.groups.size(); ++gi) {
    const auto& prev = plan.groups[gi - 1].ministages;
    const auto& cur = plan.groups[gi].ministages;
    if (!prev.empty() && !cur.empty() && cur.front().begin != prev.back().end)
      Add(e, fmt::format(
                 "groups[{}] starts at layer {} but groups[{}] ends at layer {}; with schedule \"{}\" groups "
                 "hold consecutive layers in pipeline order",
                 gi, cur.front().begin, gi - 1, prev.back().end, PipelineScheduleName(plan.schedule)));
  }
}

// A tied model whose embedding and head are in different groups sums the two copies' gradients
// between ranks that hold the same vocabulary rows: the two groups split it alike.
void CheckTiedEmbedding(const Plan& plan, const ModelSpec& model, Errors& e) {
  if (!model.tie_embeddings) return;
  int first = -1, last = -1;
  for (size_t gi = 0; gi < plan.groups.size(); ++gi)
    for (const auto& r : plan.groups[gi].ministages) {
      if (r.begin == 0) first = static_cast<int>(gi);
      if (r.end == model.num_layers) last = static_cast<int>(gi);
    }
  if (first >= 0 && last >= 0 && first != last && plan.groups[first].tp_degree != plan.groups[last].tp_degree)
    Add(e, fmt::format("groups[{}] holds the embedding with tp_degree = {} and groups[{}] the head with "
                       "tp_degree = {}; model "
                       "'{}' ties them (tie_embeddings = true), so both groups must split its vocabulary "
                       "alike: give them the "
                       "same tp_degree",
                       first, plan.groups[first].tp_degree, last, plan.groups[last].tp_degree, model.name));
}

}  // namespace

Status ValidatePlan(const Plan& plan, const Cluster& cluster, const ModelSpec& model) {
  Errors errors;
  CheckSettings(plan, model, errors);
  std::map<int, std::string> seen;  // device -> where it was first used
  for (size_t gi = 0; gi < plan.groups.size(); ++gi) {
    const GroupPlan& g = plan.groups[gi];
    const std::string where = fmt::format("groups[{}]", gi);
    CheckMinistages(plan, g, where, model, errors);
    if (g.devices.empty()) Add(errors, fmt::format("{}: has no devices", where));
    CheckTensorParallel(g, where, model, errors);
    CheckDevices(plan, g, where, cluster, seen, errors);
    CheckStateShares(plan, g, where, errors);
    CheckMicrobatches(plan, g, where, errors);
  }
  CheckLayerCoverage(plan, model, errors);
  CheckPipelineOrder(plan, errors);
  CheckTiedEmbedding(plan, model, errors);
  if (errors.empty()) return Status::Ok();
  std::string joined;
  for (const auto& e : errors) joined += (joined.empty() ? "" : "\n") + std::string("plan: ") + e;
  return Status::InvalidArgument(joined);
}

}  // namespace motley
