#include "api/island_candidate.h"

#include <charconv>

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

void JudgeIslands(IslandCandidate& islands, const PlanAnswer& a, bool forced, double train_tokens) {
  const IslandsSimResult& r = islands.result;
  const int64_t k = static_cast<int64_t>(islands.plans.size());
  islands.outer = BestMeasuredOuterSettings(k, islands.inner_steps);
  islands.outer.compression = islands.compression;
  islands.loss = EstimateIslandLoss(k, islands.inner_steps, islands.outer);
  const double sync_tokens_per_s =
      a.chosen.status.ok() && a.chosen.evaluation.step_time_s > 0
          ? static_cast<double>(a.request.global_batch_sequences * a.request.seq_len) /
                a.chosen.evaluation.step_time_s
          : 0;
  // Progress a second, in the synchronous run's tokens.
  const double islands_progress = r.fits_memory ? r.tokens_per_s * islands.loss.token_efficiency : 0;
  double sync_crossing = 0;
  for (const RegionBytes& b : a.chosen.evaluation.region_traffic) sync_crossing += b.bytes;
  islands.chosen = forced || islands_progress > sync_tokens_per_s;
  const std::string sync =
      sync_tokens_per_s <= 0
          ? "no synchronous plan fits"
          : fmt::format("the synchronous plan ({:.0f} tokens/s, {} between regions a step)",
                        sync_tokens_per_s, sync_crossing > 0 ? FormatBytes(sync_crossing) : "nothing");
  std::string compared =
      sync_tokens_per_s <= 0 || !r.fits_memory
          ? ""
          : fmt::format(
                "islands train {:.2f}x its tokens/s but need an estimated {:.2f}x the tokens to the same "
                "loss "
                "({:+.1f}% loss at equal tokens; {}), so they reach it {:.2f}x {}",
                r.tokens_per_s / sync_tokens_per_s, 1 / islands.loss.token_efficiency,
                100 * islands.loss.loss_penalty, islands.loss.basis,
                islands_progress > sync_tokens_per_s ? islands_progress / sync_tokens_per_s
                                                     : sync_tokens_per_s / islands_progress,
                islands_progress > sync_tokens_per_s ? "sooner" : "later");
  if (!compared.empty() && train_tokens > 0)
    compared += fmt::format("; for the job's {} tokens' loss: {} synchronous, about {} as islands",
                            FormatCount(train_tokens), FormatLongDuration(train_tokens / sync_tokens_per_s),
                            FormatLongDuration(train_tokens / islands_progress));
  if (!r.fits_memory) compared = "the islands do not fit in memory";
  islands.why = islands.chosen
                    ? fmt::format("chosen{} over {}: {}", forced ? " (--islands)" : "", sync, compared)
                    : fmt::format("not chosen, {} is: {}", sync, compared);
}

Result<std::optional<IslandCandidate>> ConsiderIslands(const std::string& flag, const PlanAnswer& a,
                                                       std::string* none) {
  const int64_t regions = static_cast<int64_t>(a.cluster->regions.size());
  if (flag == "off") return std::optional<IslandCandidate>();
  const bool forced = flag != "auto";
  int64_t count = 0;
  if (forced &&
      (std::from_chars(flag.data(), flag.data() + flag.size(), count).ptr != flag.data() + flag.size() ||
       count < 2))
    return Status::InvalidArgument(
        fmt::format("--islands {}: give auto, off or a count of islands (2 or more)", flag));
  if (forced && regions < 2)
    return Status::InvalidArgument(fmt::format(
        "--islands {}: the cluster {} is one region, and islands are one a region so far: give auto or off",
        flag, a.cluster->name));
  if (forced && count != regions)
    return Status::InvalidArgument(
        fmt::format("--islands {}: islands are one a region so far and the cluster {} has {} region{}: give "
                    "--islands {}, "
                    "auto or off",
                    flag, a.cluster->name, regions, regions == 1 ? "" : "s", regions));
  if (regions < 2 || !a.query.offers.empty()) return std::optional<IslandCandidate>();
  std::optional<IslandCandidate> islands = IslandsByRegion(a, none);
  if (!islands) {
    if (forced) return Status::InvalidArgument(fmt::format("--islands {}: no islands: {}", flag, *none));
    return std::optional<IslandCandidate>();
  }
  JudgeIslands(*islands, a, forced, a.query.train_tokens);
  return islands;
}

void AddIslandsJson(const std::optional<IslandCandidate>& islands, const std::string& none,
                    nlohmann::json* j) {
  if (islands) (*j)["islands"] = IslandCandidateJson(*islands);
  if (!none.empty()) (*j)["islands_refused"] = none;
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
  line += "\n  " + islands.why;
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
          {"outer_lr", islands.outer.lr},
          {"outer_momentum", islands.outer.momentum},
          {"tokens_per_s", r.tokens_per_s},
          {"period_s", r.period_s},
          {"round_s", r.round.step_time_s},
          {"cross_region_bytes_per_token", r.cross_region_bytes_per_token},
          {"fits_memory", r.fits_memory},
          {"token_efficiency", islands.loss.token_efficiency},
          {"loss_penalty", islands.loss.loss_penalty},
          {"chosen", islands.chosen},
          {"why", islands.why}};
}

}  // namespace motley
