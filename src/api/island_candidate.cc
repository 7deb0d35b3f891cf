#include "api/island_candidate.h"

#include <fmt/format.h>

#include "core/units.h"
#include "plan/baselines.h"
#include "plan/lower.h"
#include "plan/outer_round.h"
#include "sim/routing_costs.h"

namespace motley {
namespace {

// Each region's nodes in file order, and the device each node starts at.
struct RegionNodes {
  std::vector<std::vector<int>> nodes;
  std::vector<int> first_device;
};

RegionNodes NodesByRegion(const Cluster& c) {
  RegionNodes out;
  out.nodes.resize(c.regions.size());
  for (int n = 0, d = 0; n < static_cast<int>(c.nodes.size()); d += c.nodes[n].num_devices, ++n) {
    out.first_device.push_back(d);
    out.nodes[static_cast<size_t>(c.devices[static_cast<size_t>(d)].region)].push_back(n);
  }
  return out;
}

// Region 0's device `d` on region r's matching node.
int MapDevice(const RegionNodes& rn, int r, int d) {
  const std::vector<int>& from = rn.nodes[0];
  for (size_t i = 0; i < from.size(); ++i) {
    const int first = rn.first_device[static_cast<size_t>(from[i])];
    const int next = from[i] + 1 < static_cast<int>(rn.first_device.size())
                         ? rn.first_device[static_cast<size_t>(from[i] + 1)]
                         : std::numeric_limits<int>::max();
    if (d >= first && d < next) return rn.first_device[static_cast<size_t>(rn.nodes[r][i])] + (d - first);
  }
  return d;
}

Plan OnRegion(Plan plan, const RegionNodes& rn, int r) {
  for (GroupPlan& g : plan.groups) {
    for (DevicePlan& d : g.devices) d.device = MapDevice(rn, r, d.device);
    for (int& d : g.routing) d = MapDevice(rn, r, d);
  }
  return plan;
}

}  // namespace

std::optional<IslandCandidate> IslandsByRegion(const PlanAnswer& a, std::string* why) {
  const Cluster& c = *a.cluster;
  const int k = static_cast<int>(c.regions.size());
  if (k < 2) {
    *why = "the cluster is one region";
    return std::nullopt;
  }
  const RegionNodes rn = NodesByRegion(c);
  for (int r = 1; r < k; ++r) {
    bool alike = rn.nodes[static_cast<size_t>(r)].size() == rn.nodes[0].size();
    for (size_t i = 0; alike && i < rn.nodes[0].size(); ++i) {
      const NodeSpec& x = c.nodes[static_cast<size_t>(rn.nodes[0][i])];
      const NodeSpec& y = c.nodes[static_cast<size_t>(rn.nodes[static_cast<size_t>(r)][i])];
      alike = x.device_type == y.device_type && x.num_devices == y.num_devices;
    }
    if (!alike) {
      *why = fmt::format("regions {} and {} hold unlike nodes (islands exchange rank to rank so far)",
                         c.regions[0], c.regions[static_cast<size_t>(r)]);
      return std::nullopt;
    }
  }
  if (a.request.global_batch_sequences % k != 0) {
    *why = fmt::format("the batch of {} sequences does not split evenly over {} regions",
                       a.request.global_batch_sequences, k);
    return std::nullopt;
  }
  PlanRequest request = a.request;
  request.global_batch_sequences /= k;
  request.devices.clear();
  for (int n : rn.nodes[0])
    for (int i = 0; i < c.nodes[static_cast<size_t>(n)].num_devices; ++i)
      request.devices.push_back(rn.first_device[static_cast<size_t>(n)] + i);
  StrategyOutcome best = PlanWithStrategy("auto", c, *a.model, *a.costs, request, a.evaluate);
  if (!best.status.ok()) {
    *why = fmt::format("no plan for region {} alone: {}", c.regions[0], best.status.message());
    return std::nullopt;
  }
  IslandCandidate out;
  out.strategy = best.strategy;
  out.compression = "int8";
  std::vector<Schedule> steps;
  for (int r = 0; r < k; ++r) {
    Plan plan = OnRegion(best.plan, rn, r);
    FillDefaultRouting(&plan, c, *a.model);
    Result<Schedule> s = LowerPlan(plan, c, *a.model);
    if (!s.ok()) {
      *why = fmt::format("region {}'s island: {}", c.regions[static_cast<size_t>(r)], s.status().message());
      return std::nullopt;
    }
    steps.push_back(std::move(*s));
    out.plans.push_back(std::move(plan));
  }
  std::vector<const Schedule*> islands;
  for (const Schedule& s : steps) islands.push_back(&s);
  Result<Schedule> round = LowerOuterRound(
      islands, {out.compression, static_cast<double>(BytesPerElement(MasterPrecision(request.precision)))});
  if (!round.ok()) {
    *why = round.status().message();
    return std::nullopt;
  }
  for (int64_t h : kIslandInnerSteps) {
    Result<IslandsSimResult> r =
        SimulateIslands(islands, std::vector<int64_t>(static_cast<size_t>(k), h), *round, c, *a.costs);
    if (!r.ok()) {
      *why = r.status().message();
      return std::nullopt;
    }
    out.inner_steps = h;
    out.result = std::move(*r);
    if (out.result.round.step_time_s <= 0.1 * out.result.period_s) break;
  }
  return out;
}

std::string IslandCandidateLine(const IslandCandidate& islands, const PlanAnswer& answer) {
  const IslandsSimResult& r = islands.result;
  const double chosen_tokens_per_s =
      answer.chosen.status.ok() && answer.chosen.evaluation.step_time_s > 0
          ? static_cast<double>(answer.request.global_batch_sequences * answer.request.seq_len) /
                answer.chosen.evaluation.step_time_s
          : 0;
  std::string line = fmt::format(
      "islands: {} x {} (one a region, {} devices each), H = {}, {} between them: {:.0f} tokens/s{}, {:.1f} "
      "bytes "
      "between regions a token, round {} of a {} period{}",
      islands.plans.size(), islands.strategy, islands.plans.front().num_devices(), islands.inner_steps,
      islands.compression, r.tokens_per_s,
      chosen_tokens_per_s > 0
          ? fmt::format(" ({:.2f}x the chosen plan)", r.tokens_per_s / chosen_tokens_per_s)
          : "",
      r.cross_region_bytes_per_token, FormatDuration(r.round.step_time_s), FormatDuration(r.period_s),
      r.fits_memory ? "" : " — OUT OF MEMORY");
  line +=
      "\n  not chosen: islands train a worse model for the same tokens (2 islands at H = 50: +10% validation "
      "loss, measured on a small model: bench/reports/islands_loss.md); run them with motley train "
      "--island-plan, one plan a region";
  return line;
}

nlohmann::json IslandCandidateJson(const IslandCandidate& islands) {
  const IslandsSimResult& r = islands.result;
  nlohmann::json devices = nlohmann::json::array();
  for (const Plan& p : islands.plans) devices.push_back(p.devices());
  return {{"strategy", islands.strategy},
          {"islands", islands.plans.size()},
          {"devices", devices},
          {"inner_steps", islands.inner_steps},
          {"compression", islands.compression},
          {"tokens_per_s", r.tokens_per_s},
          {"period_s", r.period_s},
          {"round_s", r.round.step_time_s},
          {"cross_region_bytes_per_token", r.cross_region_bytes_per_token},
          {"fits_memory", r.fits_memory}};
}

}  // namespace motley
