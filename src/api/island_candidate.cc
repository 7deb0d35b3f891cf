#include "api/island_candidate.h"

#include <algorithm>
#include <charconv>
#include <limits>
#include <numeric>
#include <utility>

#include <fmt/format.h>
#include <fmt/ranges.h>

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

// Region `source`'s device `d` on region r's matching node.
int MapDevice(const RegionNodes& rn, int source, int r, int d) {
  const std::vector<int>& from = rn.nodes[static_cast<size_t>(source)];
  for (size_t i = 0; i < from.size(); ++i) {
    const int first = rn.first_device[static_cast<size_t>(from[i])];
    const int next = from[i] + 1 < static_cast<int>(rn.first_device.size())
                         ? rn.first_device[static_cast<size_t>(from[i] + 1)]
                         : std::numeric_limits<int>::max();
    if (d >= first && d < next) return rn.first_device[static_cast<size_t>(rn.nodes[r][i])] + (d - first);
  }
  return d;
}

Plan OnRegion(Plan plan, const RegionNodes& rn, int source, int r) {
  for (GroupPlan& g : plan.groups) {
    for (DevicePlan& d : g.devices) d.device = MapDevice(rn, source, r, d.device);
    for (int& d : g.routing) d = MapDevice(rn, source, r, d);
  }
  return plan;
}

// Whether every region holds as many nodes of as many devices as region 0, of region 0's types: then
// one plan, made for region 0, runs on every region's matching devices.
bool RegionsAlike(const Cluster& c, const RegionNodes& rn) {
  for (size_t r = 1; r < rn.nodes.size(); ++r) {
    if (rn.nodes[r].size() != rn.nodes[0].size()) return false;
    for (size_t i = 0; i < rn.nodes[0].size(); ++i) {
      const NodeSpec& x = c.nodes[static_cast<size_t>(rn.nodes[0][i])];
      const NodeSpec& y = c.nodes[static_cast<size_t>(rn.nodes[r][i])];
      if (x.num_devices != y.num_devices || x.device_type != y.device_type) return false;
    }
  }
  return true;
}

// Region r's devices.
std::vector<int> RegionDevices(const Cluster& c, const RegionNodes& rn, int r) {
  std::vector<int> out;
  for (int n : rn.nodes[static_cast<size_t>(r)])
    for (int i = 0; i < c.nodes[static_cast<size_t>(n)].num_devices; ++i)
      out.push_back(rn.first_device[static_cast<size_t>(n)] + i);
  return out;
}

// The regions' islands, fastest first (island 0 keeps the run's clock and takes the most inner steps),
// and each one's simulated step, in that order.
Result<std::pair<std::vector<int>, std::vector<double>>> RegionsFastestFirst(
    const std::vector<const Schedule*>& steps, const Schedule& round, const Cluster& c,
    const CostModel& costs) {
  MOTLEY_ASSIGN_OR_RETURN(const IslandsSimResult once,
                          SimulateIslands(steps, std::vector<int64_t>(steps.size(), 1), round, c, costs));
  std::vector<int> order(steps.size());
  std::iota(order.begin(), order.end(), 0);
  std::stable_sort(order.begin(), order.end(), [&](int a, int b) {
    return once.islands[static_cast<size_t>(a)].step_time_s <
           once.islands[static_cast<size_t>(b)].step_time_s;
  });
  std::vector<double> step_s;
  for (int i : order) step_s.push_back(once.islands[static_cast<size_t>(i)].step_time_s);
  return std::make_pair(order, step_s);
}

// Each region's island (`out.plans`, their `strategies` and step schedules), in region order; the
// regions kept in `regions`. False with `*why` where fewer than two regions have a plan.
bool PlanRegions(const PlanAnswer& a, const RegionNodes& rn, IslandCandidate& out, std::vector<int>& regions,
                 std::vector<std::string>& strategies, std::vector<Schedule>& steps, std::string* why) {
  // Each region's island on its share of the batch (as even as whole sequences allow; the outer round
  // weighs each island by the tokens it trained on): the best plan `auto` finds for its devices
  // (regions alike and even shares: region 0's, on each region's matching devices). A region no plan
  // fits is left out while two or more remain, as a synchronous plan leaves out devices.
  const Cluster& c = *a.cluster;
  const int k = static_cast<int>(c.regions.size());
  const int64_t batch = a.request.global_batch_sequences;
  regions.resize(static_cast<size_t>(k));
  std::iota(regions.begin(), regions.end(), 0);
  for (bool planned = false; !planned;) {
    const int n = static_cast<int>(regions.size());
    const bool alike = n == k && RegionsAlike(c, rn) && batch % k == 0;
    out.plans.clear();
    strategies.clear();
    steps.clear();
    planned = true;
    for (int j = 0; j < n && planned; ++j) {
      const int r = regions[static_cast<size_t>(j)];
      Plan plan;
      if (j == 0 || !alike) {
        PlanRequest request = a.request;
        request.devices = RegionDevices(c, rn, r);
        request.global_batch_sequences = batch / n + (j < batch % n ? 1 : 0);
        StrategyOutcome best = PlanWithStrategy("auto", c, *a.model, *a.costs, request, a.evaluate);
        if (!best.status.ok()) {
          const std::string reason = fmt::format("no plan for region {} alone: {}",
                                                 c.regions[static_cast<size_t>(r)], best.status.message());
          if (n <= 2) {
            *why = out.left_out.empty() ? reason : out.left_out + "; " + reason;
            return false;
          }
          out.left_out += fmt::format("{}{}", out.left_out.empty() ? "" : "; ", reason);
          regions.erase(regions.begin() + j);
          planned = false;
          break;
        }
        plan = std::move(best.plan);
        strategies.push_back(best.strategy);
      } else {
        plan = OnRegion(out.plans.front(), rn, regions[0], r);
      }
      FillDefaultRouting(&plan, c, *a.model);
      Result<Schedule> s = LowerPlan(plan, c, *a.model);
      if (!s.ok()) {
        *why = fmt::format("region {}'s island: {}", c.regions[static_cast<size_t>(r)], s.status().message());
        return false;
      }
      steps.push_back(std::move(*s));
      out.plans.push_back(std::move(plan));
    }
  }
  return true;
}

// The same round overlapping the next inner steps (each of kIslandOverlapSteps), for an H whose round
// the islands would otherwise wait for more than a tenth of the period: the whole model's, then
// streamed in each of kIslandFragments fragments (each exchange a fragment's, hidden behind the same
// steps).
struct Overlapped {
  int64_t overlap_steps, fragments;
  std::vector<Schedule> rounds;
};
Result<std::vector<Overlapped>> LowerOverlapped(const std::vector<const Schedule*>& islands,
                                                const OuterRoundOptions& round_options) {
  std::vector<Overlapped> out;
  for (int64_t overlap : kIslandOverlapSteps)
    for (int64_t fragments : {int64_t{1}, kIslandFragments[0], kIslandFragments[1]}) {
      OuterRoundOptions o = round_options;
      o.overlap_steps = overlap;
      o.fragments = static_cast<int32_t>(fragments);
      MOTLEY_ASSIGN_OR_RETURN(std::vector<Schedule> rounds, LowerOuterRounds(islands, o));
      out.push_back({overlap, fragments, std::move(rounds)});
    }
  return out;
}

// The fewest of kIslandInnerSteps whose round (`round`, waited for, or overlapped as LowerOverlapped's)
// the islands wait for at most a tenth of the period, else the largest: `out`'s H, overlap, fragments
// and simulated period (islands of steps `step_s` apart take inner steps by speed).
Status ChooseInnerSteps(const std::vector<const Schedule*>& islands, const Schedule& round,
                        const std::vector<double>& step_s, const OuterRoundOptions& round_options,
                        const Cluster& c, const CostModel& costs, IslandCandidate& out) {
  MOTLEY_ASSIGN_OR_RETURN(const std::vector<Overlapped> overlapped, LowerOverlapped(islands, round_options));
  for (int64_t h : kIslandInnerSteps) {
    std::vector<int64_t> inner = InnerStepsBySpeed(step_s, h);
    // Island 0 keeps the clock: no island takes more inner steps than it.
    for (int64_t& x : inner) x = std::min(x, inner.front());
    MOTLEY_ASSIGN_OR_RETURN(IslandsSimResult r, SimulateIslands(islands, inner, round, c, costs));
    out.overlap_steps = 0;
    out.fragments = 1;
    for (const Overlapped& o : overlapped) {
      const int64_t h0 = inner.front();
      if (r.round_exposed_s <= 0.1 * r.period_s || o.overlap_steps >= h0) break;
      if (h0 % o.fragments != 0 || o.overlap_steps >= h0 / o.fragments) continue;  // not at this H
      std::vector<const Schedule*> rounds;
      for (const Schedule& s : o.rounds) rounds.push_back(&s);
      MOTLEY_ASSIGN_OR_RETURN(IslandsSimResult tried, SimulateIslands(islands, inner, rounds, c, costs));
      if (tried.round_exposed_s <= 0.1 * tried.period_s) {
        r = std::move(tried);
        out.overlap_steps = o.overlap_steps;
        out.fragments = o.fragments;
      }
    }
    out.inner_steps = inner.front();
    out.inner_steps_each =
        std::all_of(inner.begin(), inner.end(), [&](int64_t x) { return x == inner.front(); })
            ? std::vector<int64_t>()
            : inner;
    out.result = std::move(r);
    if (out.result.round_exposed_s <= 0.1 * out.result.period_s) break;
  }
  return Status::Ok();
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
  const int64_t batch = a.request.global_batch_sequences;
  if (batch < k) {
    *why = fmt::format("the batch of {} sequences is smaller than the {} regions", batch, k);
    return std::nullopt;
  }
  IslandCandidate out;
  out.compression = "int8";
  std::vector<int> regions;
  std::vector<std::string> strategies;
  std::vector<Schedule> steps;
  if (!PlanRegions(a, rn, out, regions, strategies, steps, why)) return std::nullopt;
  const int n = static_cast<int>(regions.size());
  const bool alike = n == k && RegionsAlike(c, rn) && batch % k == 0;
  std::vector<const Schedule*> islands;
  for (const Schedule& s : steps) islands.push_back(&s);
  OuterRoundOptions round_options{out.compression,
                                  static_cast<double>(BytesPerElement(MasterPrecision(a.request.precision)))};
  SetFragmentSizes(*a.model, round_options);
  Result<Schedule> round = LowerOuterRound(islands, round_options);
  if (!round.ok()) {
    *why = round.status().message();
    return std::nullopt;
  }
  // Regions of unlike devices: the fastest island first, each taking as many inner steps as the slowest
  // takes H in about the same time (a faster island trains more instead of waiting).
  std::vector<double> step_s(static_cast<size_t>(n), 1.0);
  if (!alike) {
    Result<std::pair<std::vector<int>, std::vector<double>>> fastest =
        RegionsFastestFirst(islands, *round, c, *a.costs);
    if (!fastest.ok()) {
      *why = fastest.status().message();
      return std::nullopt;
    }
    const std::vector<int>& order = fastest->first;
    step_s = fastest->second;  // a step's time is the island's whatever its place
    std::vector<Plan> plans;
    std::vector<Schedule> ordered;
    std::vector<std::string> named;
    for (int i : order) {
      plans.push_back(out.plans[static_cast<size_t>(i)]);
      ordered.push_back(steps[static_cast<size_t>(i)]);
      named.push_back(strategies[static_cast<size_t>(i)]);
    }
    strategies = std::move(named);
    out.plans = std::move(plans);
    steps = std::move(ordered);
    for (int i = 0; i < n; ++i) islands[static_cast<size_t>(i)] = &steps[static_cast<size_t>(i)];
    round = LowerOuterRound(islands, round_options);
    if (!round.ok()) {
      *why = round.status().message();
      return std::nullopt;
    }
  }
  out.strategy = std::all_of(strategies.begin(), strategies.end(),
                             [&](const std::string& x) { return x == strategies.front(); })
                     ? strategies.front()
                     : fmt::format("{}", fmt::join(strategies, " | "));
  if (Status chosen = ChooseInnerSteps(islands, *round, step_s, round_options, c, *a.costs, out);
      !chosen.ok()) {
    *why = chosen.message();
    return std::nullopt;
  }
  return out;
}

void JudgeIslands(IslandCandidate& islands, const PlanAnswer& a, bool forced, double train_tokens) {
  const IslandsSimResult& r = islands.result;
  const int64_t k = static_cast<int64_t>(islands.plans.size());
  islands.outer = BestMeasuredOuterSettings(k, islands.inner_steps);
  islands.outer.compression = islands.compression;
  islands.loss =
      EstimateIslandLoss(k, islands.inner_steps, islands.outer, islands.overlap_steps, islands.fragments);
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
  std::vector<int> devices;
  for (const Plan& p : islands.plans) devices.push_back(p.num_devices());
  const bool even = std::all_of(devices.begin(), devices.end(), [&](int d) { return d == devices.front(); });
  std::string line = fmt::format(
      "islands: {} x {} (one a region, {} devices{}), H = {}, {} between them: {:.0f} tokens/s{}, {:.1f} "
      "bytes "
      "between regions a token, round {}{} of a {} period{}",
      islands.plans.size(), islands.strategy,
      even ? std::to_string(devices.front()) : fmt::format("{}", fmt::join(devices, " + ")),
      even ? " each" : "",
      islands.inner_steps_each.empty()
          ? std::to_string(islands.inner_steps)
          : fmt::format("{} (island by island, by speed)", fmt::join(islands.inner_steps_each, ", ")),
      islands.compression, r.tokens_per_s,
      chosen_tokens_per_s > 0
          ? fmt::format(" ({:.2f}x the chosen plan)", r.tokens_per_s / chosen_tokens_per_s)
          : "",
      r.cross_region_bytes_per_token, FormatDuration(r.rounds_s),
      islands.overlap_steps > 0
          ? fmt::format(" (overlapping the next {} inner step{}{}: {} of it waited for)",
                        islands.overlap_steps, islands.overlap_steps == 1 ? "" : "s",
                        islands.fragments > 1 ? fmt::format(", in {} streaming fragments", islands.fragments)
                                              : std::string(),
                        FormatDuration(r.round_exposed_s))
          : "",
      FormatDuration(r.period_s), r.fits_memory ? "" : " — OUT OF MEMORY");
  line += "\n  " + islands.why;
  if (!islands.left_out.empty()) line += "\n  left out: " + islands.left_out;
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
          {"inner_steps_per_island", r.inner_steps},
          {"compression", islands.compression},
          {"outer_lr", islands.outer.lr},
          {"outer_momentum", islands.outer.momentum},
          {"tokens_per_s", r.tokens_per_s},
          {"period_s", r.period_s},
          {"round_s", r.rounds_s},
          {"overlap_steps", islands.overlap_steps},
          {"fragments", islands.fragments},
          {"round_exposed_s", r.round_exposed_s},
          {"cross_region_bytes_per_token", r.cross_region_bytes_per_token},
          {"fits_memory", r.fits_memory},
          {"token_efficiency", islands.loss.token_efficiency},
          {"loss_penalty", islands.loss.loss_penalty},
          {"chosen", islands.chosen},
          {"why", islands.why},
          {"left_out", islands.left_out}};
}

}  // namespace motley
