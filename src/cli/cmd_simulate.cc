// motley simulate --plan P [--cluster C] [--model M] [--profile F] [--straggler D=F]... [--flextp-mode M]
//                 [--trace T] [--json]
// motley simulate --island-plan P0 --island-plan P1 ... [--inner-steps H|H0,H1,..] [--inner-steps-by-speed]
//                 [--compression none|fp16|int8|int4] [--overlap-steps T] [--fragments F] [--cluster C]
//                 [--model M]
//                 [--profile F] [--json]
#include <algorithm>
#include <fstream>

#include <fmt/format.h>
#include <nlohmann/json.hpp>

#include "api/islands_query.h"
#include "api/plan_inputs.h"
#include "api/simulate_query.h"
#include "api/table_printer.h"
#include "cli/args.h"
#include "cli/command.h"
#include "core/file_io.h"
#include "core/units.h"
#include "sim/simulator.h"

namespace motley::cli {
namespace {

int PrintIslands(const IslandsQuery& query, bool json) {
  Result<IslandsAnswer> answer = AnswerIslandsQuery(query);
  if (!answer.ok()) {
    fmt::print(stderr, "{}\n", answer.status().message());
    return kExitFailure;
  }
  if (json) {
    fmt::print("{}\n", IslandsAnswerJson(*answer).dump(2));
    return kExitOk;
  }
  const IslandsSimResult& r = answer->result;
  const PlanInputs& in = answer->islands.front().in;
  fmt::print(
      "{} islands on cluster {}, model {}; every island's ranks meet the others' for an outer round "
      "(compression: {})\n\n",
      answer->islands.size(), in.cluster.name, in.model.name, query.compression);
  TablePrinter t(
      {"island", "plan", "devices", "step", "inner steps", "tokens a step", "peak memory", "fits"});
  t.AlignRight({0, 2, 3, 4, 5, 6});
  for (size_t i = 0; i < answer->islands.size(); ++i) {
    const SimResult& step = r.islands[i];
    double peak = 0;
    for (const DeviceSimReport& d : step.devices) peak = std::max(peak, d.peak_memory_bytes);
    t.AddRow({std::to_string(i), query.plan_paths[i],
              std::to_string(answer->islands[i].in.plan.num_devices()), FormatDuration(step.step_time_s),
              std::to_string(r.inner_steps[i]),
              std::to_string(answer->islands[i].schedule.global_batch_tokens), FormatBytes(peak),
              step.fits_memory ? "yes" : "OUT OF MEMORY"});
  }
  fmt::print("{}", t.ToString());
  size_t ops = 0;
  for (const Schedule& round : answer->rounds) ops += round.num_ops();
  fmt::print(
      "\nouter round{} {} ({} ops, schedule {}; `motley train --island-plan` runs the same)\n",
      answer->rounds.size() > 1 ? fmt::format("s of {} streaming fragments", answer->rounds.size()) : "",
      FormatDuration(r.rounds_s), ops, SchedulesHash(answer->rounds));
  if (answer->round().outer_overlap_steps > 0)
    fmt::print("{} overlaps the next {} inner steps: the islands wait {} of {}\n",
               answer->rounds.size() > 1 ? "each fragment's round" : "the round",
               answer->round().outer_overlap_steps, FormatDuration(r.round_exposed_s),
               answer->rounds.size() > 1 ? "them" : "it");
  fmt::print("period {} (the slowest island's inner steps, then the round)  |  {:.0f} tokens/s\n",
             FormatDuration(r.period_s), r.tokens_per_s);
  for (const RegionBytes& b : r.traffic)
    fmt::print("{} -> {}: {} a period\n", in.cluster.regions.at(static_cast<size_t>(b.from_region)),
               in.cluster.regions.at(static_cast<size_t>(b.to_region)), FormatBytes(b.bytes));
  if (!r.traffic.empty())
    fmt::print("between regions: {:.1f} bytes a token\n", r.cross_region_bytes_per_token);
  if (!r.fits_memory) fmt::print("\nout of memory: {}\n", r.oom_message);
  return r.fits_memory ? kExitOk : kExitFailure;
}

// One plan's step, printed (or as JSON).
int PrintSimulation(const SimulateQuery& query, const std::string& plan_path, const std::string& trace_path,
                    const std::vector<std::string>& stragglers, bool json) {
  auto fail = [](const Status& s) {
    fmt::print(stderr, "{}\n", s.message());
    return kExitFailure;
  };
  Result<SimulateAnswer> answer = AnswerSimulateQuery(query);
  if (!answer.ok()) return fail(answer.status());
  const PlanInputs* in = &answer->in;
  const Schedule* s = &answer->schedule;
  const SimResult* r = &answer->result;
  const int routed = answer->routed;
  if (!trace_path.empty()) {
    if (Status st = AtomicWriteFile(trace_path, ChromeTraceJson(*s, in->cluster, *r)); !st.ok())
      return fail(st);
  }

  if (json) {
    fmt::print("{}\n", SimulateAnswerJson(*answer).dump(2));
    return kExitOk;
  }
  fmt::print("plan {} ({} groups, {} devices, {} schedule, ZeRO-{}) on cluster {}, model {}\n", plan_path,
             in->plan.groups.size(), in->plan.num_devices(), PipelineScheduleName(in->plan.schedule),
             in->plan.zero_stage, in->cluster.name, in->model.name);
  if (routed > 0) fmt::print("routing: Zorse's cross-stage routing computed for {} group(s)\n", routed);
  if (!stragglers.empty() || s->flextp_mode != "off") {
    std::vector<std::string> slow;
    for (const auto& [device, factor] : in->cluster.measured_slowdown)
      slow.push_back(fmt::format("device {} {:g}x slower", device, factor));
    fmt::print("stragglers: {}; FlexTP in tensor-parallel teams: {}\n",
               slow.empty() ? "none" : fmt::format("{}", fmt::join(slow, ", ")), s->flextp_mode);
  }
  fmt::print("schedule {} ({} ops; `motley train --plan` prints the same for the program it runs)\n",
             answer->schedule_hash, s->num_ops());
  fmt::print("step {}  |  {:.0f} tokens/s  |  {:.1f} TFLOPS  |  HFU {:.1f}%  MFU {:.1f}%  |  memory: {}\n\n",
             FormatDuration(r->step_time_s), r->tokens_per_s, r->tflops, 100 * r->hfu, 100 * r->mfu,
             r->fits_memory ? "fits" : "OUT OF MEMORY");
  TablePrinter t({"rank", "device", "type", "busy", "peak memory", "capacity", "host", "compute from"});
  t.AlignRight({0, 1, 3, 4, 5, 6});
  for (const auto& d : r->devices) {
    t.AddRow({std::to_string(d.rank), std::to_string(d.device), d.device_type,
              fmt::format("{:.1f}%", 100 * d.busy_fraction),
              FormatBytes(d.peak_memory_bytes) + (d.out_of_memory ? " OOM" : ""),
              FormatBytes(d.capacity_bytes), FormatBytes(d.peak_host_bytes), d.compute_source});
  }
  fmt::print("{}", t.ToString());
  // FlexTP's balance in each team it acts in (the run's metrics report the same per rank and step).
  for (const FlexTpTeamPrediction& team : r->flextp_teams) {
    fmt::print("\nFlexTP {} in the team of ranks {}: {} of tensor-parallel compute a step", s->flextp_mode,
               fmt::join(team.ranks, ", "), FormatDuration(FlexTpTeamComputeS(team)));
    if (!team.balance.any()) {
      fmt::print(" (nothing moved or pruned: no rank beyond the straggler threshold)\n");
      continue;
    }
    fmt::print(" block by block, where waiting for its slowest rank takes {}\n",
               FormatDuration(*std::max_element(team.alone_s.begin(), team.alone_s.end())));
    TablePrinter b(
        {"rank", "alone", "balanced", "units given", "heads given", "units taken", "heads taken", "pruned"});
    b.AlignRight({0, 1, 2, 3, 4, 5, 6, 7});
    for (size_t i = 0; i < team.ranks.size(); ++i) {
      const FlexTpRankLoad l = RankLoad(team.balance, static_cast<int>(i));
      b.AddRow({std::to_string(team.ranks[i]), FormatDuration(team.alone_s[i]), FormatDuration(l.predicted_s),
                std::to_string(l.units_given), std::to_string(l.heads_given),
                std::to_string(l.units_received), std::to_string(l.heads_received),
                fmt::format("{:.0f}%", 100 * l.prune_ratio)});
    }
    fmt::print("{}", b.ToString());
  }
  if (!answer->traffic.empty()) {
    double crossing = 0;
    for (const RegionBytes& b : answer->traffic) crossing += b.bytes;
    fmt::print(
        "\nbetween regions: {} a step ({:.1f} bytes a token); over the one link between them that takes {}\n",
        FormatBytes(crossing), crossing / static_cast<double>(s->global_batch_tokens),
        FormatDuration(answer->region_link_bound_s));
  }
  if (!r->fits_memory) fmt::print("\nout of memory: {}\n", r->oom_message);
  if (!trace_path.empty()) fmt::print("\ntrace: {} (open it in Perfetto or chrome://tracing)\n", trace_path);
  return r->fits_memory ? kExitOk : kExitFailure;
}

}  // namespace

int RunSimulate(const std::vector<std::string>& args) {
  CLI::App app(
      "Simulate one training step of a plan: step time, tokens/s, TFLOPs, HFU, per-device busy "
      "time and peak memory, and a Chrome trace.",
      "motley simulate");
  std::string plan_path, cluster, model, profile_path, trace_path, flextp_mode;
  std::vector<std::string> stragglers;
  bool json = false;
  IslandsQuery islands;
  app.add_option("--plan", plan_path, "a plan file (.toml or .json)");
  app.add_option(
      "--island-plan", islands.plan_paths,
      "islands instead of one plan: each island's plan, in order (repeatable; devices of one cluster)");
  app.add_option("--inner-steps", islands.inner_steps,
                 "islands: the steps between outer rounds (H): every island's, or each island's in order "
                 "(H0,H1,...: a job's inner_steps_per_island)")
      ->delimiter(',')
      ->check(CLI::PositiveNumber);
  app.add_flag("--inner-steps-by-speed", islands.inner_steps_by_speed,
               "islands: the slowest island takes --inner-steps, a faster one more in the same time");
  app.add_option("--compression", islands.compression, "islands: what crosses between them")
      ->check(CLI::IsMember({"none", "fp16", "int8", "int4"}));
  app.add_option("--overlap-steps", islands.overlap_steps,
                 "islands: the inner steps a round's exchange overlaps (a job's [islands] overlap_steps; "
                 "less than --inner-steps)")
      ->check(CLI::NonNegativeNumber);
  app.add_option("--fragments", islands.fragments,
                 "islands: streaming fragments, each meeting at its own step of a round (a job's [islands] "
                 "fragments; dividing --inner-steps)")
      ->check(CLI::PositiveNumber);
  app.add_option("--cluster", cluster, "the cluster (default: the plan's)");
  app.add_option("--model", model, "the model (default: the plan's)");
  app.add_option("--profile", profile_path,
                 "measured layer times: a motley profile, or the Zorse measurements' model_latencies.json "
                 "(default: the roofline model from the GPU catalog)");
  app.add_option(
      "--straggler", stragglers,
      "DEVICE=FACTOR: that device computes FACTOR times slower (repeatable), e.g. --straggler 1=4");
  app.add_option("--flextp-mode", flextp_mode,
                 "FlexTP in the plan's tensor-parallel teams (default: the plan's)")
      ->check(CLI::IsMember({"off", "migrate", "resize", "semi"}));
  app.add_option("--trace", trace_path, "write a Chrome/Perfetto trace of the step to this file");
  app.add_flag("--json", json, "print JSON");
  if (auto rc = ParseArgs(app, args)) return *rc;
  if (plan_path.empty() == islands.plan_paths.empty()) {
    fmt::print(stderr, "motley simulate: give --plan P, or --island-plan P for each island (not both)\n");
    return kExitUsage;
  }
  if (!islands.plan_paths.empty()) {
    islands.cluster = cluster;
    islands.model = model;
    islands.profile = profile_path;
    return PrintIslands(islands, json);
  }

  SimulateQuery query;
  query.plan_path = plan_path;
  query.cluster = cluster;
  query.model = model;
  query.profile = profile_path;
  query.stragglers = stragglers;
  query.flextp_mode = flextp_mode;
  query.record_trace = !trace_path.empty();
  return PrintSimulation(query, plan_path, trace_path, stragglers, json);
}

}  // namespace motley::cli
