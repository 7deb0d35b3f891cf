#include "supervise/escalation.h"

#include <algorithm>
#include <filesystem>
#include <map>
#include <set>

#include <fmt/format.h>
#include <nlohmann/json.hpp>

#include "core/file_io.h"
#include "core/units.h"
#include "plan/lower.h"
#include "sim/cost_model.h"
#include "sim/plan_evaluator.h"
#include "sim/routing_costs.h"
#include "sim/simulator.h"

namespace motley {
namespace fs = std::filesystem;

std::vector<RankFailure> ReadFailureReports(const std::string& dir) {
  std::vector<RankFailure> out;
  std::error_code ec;
  if (!fs::is_directory(dir, ec)) return out;
  for (const auto& entry : fs::directory_iterator(dir, ec)) {
    if (entry.path().extension() != ".json") continue;
    Result<std::string> text = ReadFileToString(entry.path().string());
    if (!text.ok()) continue;
    const nlohmann::json j = nlohmann::json::parse(*text, nullptr, /*allow_exceptions=*/false);
    if (!j.is_object() || !j.contains("rank") || !j["rank"].is_number_integer()) continue;
    RankFailure f;
    try {  // a field of the wrong type: the report is skipped, as an unreadable one
      f.rank = j["rank"].get<int>();
      f.device = j.value("device", -1);
      f.step = j.value("step", int64_t{0});
      f.out_of_memory = j.value("out_of_memory", false);
      f.diverged = j.value("diverged", false);
      f.message = j.value("message", std::string());
    } catch (const nlohmann::json::exception&) {
      continue;
    }
    out.push_back(std::move(f));
  }
  std::sort(out.begin(), out.end(),
            [](const RankFailure& a, const RankFailure& b) { return a.rank < b.rank; });
  return out;
}

namespace {

// Each device's microbatches as "n x size" (with the last one when it differs).
std::string Batches(const DevicePlan& d) {
  if (d.num_microbatches == 0) return "none";
  std::string s = fmt::format("{} x {}", d.num_microbatches, d.microbatch_size);
  if (d.last_microbatch_size > 0) s += fmt::format(" (last {})", d.last_microbatch_size);
  return s;
}

// Where each device sits: its group, the group's ministages and tensor-parallel degree, its batches.
struct Placement {
  int group = -1;
  int ministages = 0;
  int tp = 1;
  LayerRange layers;
  std::string batches;
};
std::map<int, Placement> PlacementOf(const Plan& p) {
  std::map<int, Placement> out;
  for (size_t g = 0; g < p.groups.size(); ++g) {
    const GroupPlan& group = p.groups[g];
    const LayerRange layers{group.ministages.front().begin, group.ministages.back().end};
    for (const DevicePlan& d : group.devices)
      out[d.device] = {static_cast<int>(g), group.num_ministages(), group.tp_degree, layers, Batches(d)};
  }
  return out;
}

}  // namespace

std::string DescribePlanChange(const Plan& before, const Plan& after) {
  std::vector<std::string> lines;
  if (before.strategy != after.strategy)
    lines.push_back(fmt::format("strategy {} -> {}", before.strategy, after.strategy));
  if (before.zero_stage != after.zero_stage)
    lines.push_back(fmt::format("ZeRO-{} -> ZeRO-{}", before.zero_stage, after.zero_stage));
  if (before.schedule != after.schedule)
    lines.push_back(fmt::format("{} -> {} schedule", PipelineScheduleName(before.schedule),
                                PipelineScheduleName(after.schedule)));
  if (before.offload_params != after.offload_params)
    lines.push_back(fmt::format("parameter offload {}", after.offload_params ? "on" : "off"));
  if (before.offload_activations != after.offload_activations)
    lines.push_back(fmt::format("activation offload {}", after.offload_activations ? "on" : "off"));
  if (before.groups.size() != after.groups.size())
    lines.push_back(fmt::format("{} -> {} pipeline stage(s)", before.groups.size(), after.groups.size()));
  const std::map<int, Placement> a = PlacementOf(before), b = PlacementOf(after);
  std::set<int> devices;
  for (const auto& [d, _] : a) devices.insert(d);
  for (const auto& [d, _] : b) devices.insert(d);
  for (int d : devices) {
    auto x = a.find(d), y = b.find(d);
    if (x == a.end()) {
      lines.push_back(
          fmt::format("device {}: added ({} sequences a microbatch x count)", d, y->second.batches));
      continue;
    }
    if (y == b.end()) {
      lines.push_back(fmt::format("device {}: left out", d));
      continue;
    }
    std::vector<std::string> parts;
    if (x->second.layers != y->second.layers)
      parts.push_back(fmt::format("layers {}-{} -> {}-{}", x->second.layers.begin, x->second.layers.end - 1,
                                  y->second.layers.begin, y->second.layers.end - 1));
    if (x->second.ministages != y->second.ministages)
      parts.push_back(fmt::format("{} -> {} ministages", x->second.ministages, y->second.ministages));
    if (x->second.tp != y->second.tp) parts.push_back(fmt::format("TP {} -> {}", x->second.tp, y->second.tp));
    if (x->second.batches != y->second.batches)
      parts.push_back(fmt::format("microbatches {} -> {} sequences", x->second.batches, y->second.batches));
    if (!parts.empty()) lines.push_back(fmt::format("device {}: {}", d, fmt::join(parts, ", ")));
  }
  return fmt::format("{}", fmt::join(lines, "\n"));
}

Result<Escalation> PlanMoreFrugally(const Plan& failed, const std::vector<RankFailure>& failures,
                                    const std::string& strategy, const PlanRequest& request,
                                    const ModelSpec& model, const Profile& profile, Cluster* cluster,
                                    const EscalationConfig& config) {
  // What the failed plan was predicted to hold on each device (its ranks' peaks).
  CostModel costs(*cluster, model, &profile, request.seq_len, request.precision,
                  request.activation_checkpointing);
  Plan routed = failed;
  FillDefaultRouting(&routed, *cluster, model);
  MOTLEY_ASSIGN_OR_RETURN(Schedule schedule, LowerPlan(routed, *cluster, model));
  MOTLEY_ASSIGN_OR_RETURN(SimResult sim, Simulate(schedule, *cluster, costs));
  std::map<int, double> predicted;
  for (const DeviceSimReport& d : sim.devices)
    predicted[d.device] = std::max(predicted[d.device], d.peak_memory_bytes);

  std::vector<std::string> why;
  for (const RankFailure& f : failures) {
    if (!f.out_of_memory || f.device < 0 || f.device >= cluster->num_devices()) continue;
    const double capacity = cluster->memory_bytes(f.device);
    const double cap = config.cap_fraction * std::min(capacity, predicted[f.device]);
    cluster->memory_cap_bytes[f.device] = cap;
    why.push_back(
        fmt::format("rank {} (device {}, {}) ran out of memory in step {} where the plan predicted a peak of "
                    "{} of {}: planning again with {} for it",
                    f.rank, f.device, cluster->spec(f.device).name, f.step, FormatBytes(predicted[f.device]),
                    FormatBytes(capacity), FormatBytes(cap)));
  }
  if (why.empty()) return Status::InvalidArgument("no rank ran out of memory: nothing to escalate");

  CostModel capped(*cluster, model, &profile, request.seq_len, request.precision,
                   request.activation_checkpointing);
  const PlanEvaluator evaluate = SimulationEvaluator(*cluster, model, capped);
  StrategyOutcome next = PlanWithStrategy(strategy, *cluster, model, capped, request, evaluate);
  if (!next.status.ok() || !next.evaluation.fits_memory)
    return Status::OutOfMemory(fmt::format(
        "{}; but no {} plan fits then ({}): the model needs more memory than these devices offer — add "
        "devices or "
        "memory, or lower [training] global_batch_sequences",
        fmt::join(why, "; "), strategy, next.status.ok() ? next.evaluation.oom : next.status.message()));
  next.plan.model = failed.model;
  next.plan.cluster = failed.cluster;
  FillZorseRouting(&next.plan, capped);
  Escalation e;
  e.strategy = next.strategy;
  e.why = fmt::format("{}", fmt::join(why, "\n"));
  e.changes = DescribePlanChange(failed, next.plan);
  if (e.changes.empty()) e.changes = "(the same layout: the planner found nothing more frugal)";
  e.plan = std::move(next.plan);
  return e;
}

}  // namespace motley
