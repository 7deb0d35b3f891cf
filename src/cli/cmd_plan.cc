// motley plan --cluster C --model M --seq-len S --global-batch-tokens N [--strategy ...]
//             [--profile F] [--compare] [--explain] [--json] [-o plan.toml]
#include <chrono>
#include <cstdint>
#include <fstream>
#include <map>

#include <fmt/format.h>
#include <nlohmann/json.hpp>

#include "cli/args.h"
#include "cli/command.h"
#include "cli/plan_inputs.h"
#include "cli/table_printer.h"
#include "core/cluster_parse.h"
#include "core/job.h"
#include "core/model_parse.h"
#include "core/units.h"
#include "plan/baselines.h"
#include "plan/plan_io.h"
#include "sim/flextp_choice.h"
#include "sim/plan_evaluator.h"
#include "sim/routing_costs.h"

namespace motley::cli {
namespace {

// The devices of the cluster a plan leaves out, ascending.
std::vector<int> LeftOut(const Plan& plan, const Cluster& cluster) {
  std::vector<bool> used(cluster.num_devices(), false);
  for (const auto& g : plan.groups)
    for (const auto& d : g.devices)
      if (d.device >= 0 && d.device < cluster.num_devices()) used[d.device] = true;
  std::vector<int> out;
  for (int d = 0; d < cluster.num_devices(); ++d)
    if (!used[d]) out.push_back(d);
  return out;
}

// Left-out devices by node: "t4 x96 (nodes east1-t4-0..east1-t4-11), ..." — whole nodes by name.
std::string DescribeLeftOut(const std::vector<int>& devices, const Cluster& cluster) {
  std::map<std::string, int> per_type;
  std::vector<std::string> nodes;
  for (int d : devices) {
    ++per_type[cluster.spec(d).name];
    const std::string& node = cluster.node_of(d).name;
    if (nodes.empty() || nodes.back() != node) nodes.push_back(node);
  }
  std::vector<std::string> types;
  for (const auto& [type, n] : per_type) types.push_back(fmt::format("{} x{}", type, n));
  const size_t shown = std::min<size_t>(nodes.size(), 6);
  return fmt::format("{} (node{} {}{})", fmt::join(types, ", "), nodes.size() == 1 ? "" : "s",
                     fmt::join(nodes.begin(), nodes.begin() + static_cast<std::ptrdiff_t>(shown), ", "),
                     nodes.size() > shown ? fmt::format(" and {} more", nodes.size() - shown) : "");
}

// The plan's tensor-parallel degrees: "-" (none), "4" (every group) or "4/4/1" (per group).
std::string TensorParallelColumn(const Plan& plan) {
  std::vector<int> tp;
  bool any = false, same = true;
  for (const auto& g : plan.groups) {
    tp.push_back(g.tp_degree);
    any = any || g.tp_degree > 1;
    same = same && g.tp_degree == plan.groups.front().tp_degree;
  }
  if (!any) return "-";
  return same ? fmt::format("{}", tp.front()) : fmt::format("{}", fmt::join(tp, "/"));
}

// Why a plan with tensor-parallel teams: against the fastest plan without them among `rows`.
// Under auto alone (not --compare) strategies that could not beat the best so far were not planned.
std::string TensorParallelWhy(const StrategyOutcome& chosen, const std::vector<StrategyOutcome>& rows, bool every) {
  if (rows.size() == 1) return fmt::format("{}'s search chose it", chosen.strategy);
  const StrategyOutcome* best = nullptr;
  for (const auto& o : rows)
    if (o.status.ok() && !o.plan.groups.empty() && TensorParallelColumn(o.plan) == "-" &&
        (best == nullptr || o.evaluation.step_time_s < best->evaluation.step_time_s))
      best = &o;
  if (best == nullptr)
    return every ? "no plan without tensor parallelism fits" : "no strategy without it could step faster";
  return fmt::format("{:.0f}% faster than the best plan without it, {}'s {}",
                     100 * (best->evaluation.step_time_s / chosen.evaluation.step_time_s - 1), best->strategy,
                     FormatDuration(best->evaluation.step_time_s));
}

nlohmann::json FlexTpJson(const FlexTpChoice& c) {
  nlohmann::json modes = nlohmann::json::object();
  for (const auto& [mode, step] : c.step_s) modes[mode] = step;
  return {{"device", c.probe.device},
          {"factor", c.probe.factor},
          {"step_time_s", c.straggling_step_s},
          {"step_time_s_by_mode", modes},
          {"why", c.why}};
}

nlohmann::json OutcomeJson(const StrategyOutcome& o, int64_t tokens, const FlexTpChoice* flextp) {
  nlohmann::json groups = nlohmann::json::array();
  for (const auto& g : o.plan.groups) {
    nlohmann::json devices = nlohmann::json::array(), microbatches = nlohmann::json::array(),
                   ministages = nlohmann::json::array();
    for (const auto& d : g.devices) {
      devices.push_back(d.device);
      microbatches.push_back(d.num_microbatches);
    }
    for (const auto& r : g.ministages) ministages.push_back({r.begin, r.end});
    groups.push_back({{"devices", devices},
                      {"layers",
                       {g.ministages.empty() ? 0 : g.ministages.front().begin,
                        g.ministages.empty() ? 0 : g.ministages.back().end}},
                      {"ministages", ministages},
                      {"num_ministages", g.ministages.size()},
                      {"microbatch_size", g.devices.empty() ? 0 : g.devices.front().microbatch_size},
                      {"microbatches_per_device", microbatches},
                      {"tp_degree", g.tp_degree}});
  }
  const bool has_plan = !o.plan.groups.empty();
  nlohmann::json j = {
      {"strategy", o.strategy},
      {"step_time_s", has_plan ? nlohmann::json(o.evaluation.step_time_s) : nullptr},
      {"tokens_per_s", has_plan ? nlohmann::json(tokens / o.evaluation.step_time_s) : nullptr},
      {"tflops", o.evaluation.tflops},
      {"hfu", o.evaluation.hfu},
      {"fits_memory", has_plan && o.evaluation.fits_memory},
      {"zero_stage", o.plan.zero_stage},
      {"schedule", PipelineScheduleName(o.plan.schedule)},
      {"groups", groups},
      {"explain", o.explain}};
  if (!o.plan.flextp_mode.empty()) j["flextp_mode"] = o.plan.flextp_mode;
  if (flextp != nullptr) j["straggler"] = FlexTpJson(*flextp);
  if (!o.status.ok()) j["error"] = o.status.message();
  return j;
}

// Where the planning time went (--explain --json): the evaluator's lowering and simulation, and
// each strategy's whole time and its part in the evaluator (the rest is its own search).
nlohmann::json TimingJson(double planning_s, const EvaluationStats& stats, const std::vector<StrategyOutcome>& rows) {
  nlohmann::json strategies = nlohmann::json::array();
  for (const auto& o : rows)
    strategies.push_back({{"strategy", o.strategy},
                          {"total_s", o.plan_s},
                          {"search_s", o.plan_s - o.evaluate_s},
                          {"evaluate_s", o.evaluate_s},
                          {"evaluations", o.evaluations},
                          {"device_subsets_planned", o.subsets_planned},
                          {"device_subsets_skipped", o.subsets_skipped}});
  return {{"planning_s", planning_s},
          {"plans_simulated", stats.evaluations},
          {"plans_asked_again", stats.cached},
          {"plans_stopped", stats.stopped},
          {"lower_s", stats.lower_s},
          {"simulate_s", stats.simulate_s},
          {"strategies", strategies}};
}

}  // namespace

int RunPlan(const std::vector<std::string>& args) {
  CLI::App app(
      "Choose how to train: the plan with the shortest simulated step that fits, from the strategy "
      "you name or from all of them (auto).",
      "motley plan");
  std::string cluster_ref, model_ref, strategy = "auto", profile_path, out_path;
  int64_t seq_len = 0, global_batch_tokens = 0;
  bool compare = false, explain = false, json = false, clipping = true;
  std::string precision_name = "bf16", flextp_mode = "auto", straggler;
  app.add_option("--cluster", cluster_ref, "a cluster file or built-in cluster name")->required();
  app.add_option("--model", model_ref, "a preset, model .toml or Hugging Face config.json")->required();
  app.add_option("--seq-len", seq_len, "tokens per sequence")
      ->required()
      ->check(CLI::Range(int64_t{1}, int64_t{1} << 24));
  app.add_option("--global-batch-tokens", global_batch_tokens, "tokens per step (a multiple of --seq-len)")
      ->required()
      ->check(CLI::Range(int64_t{1}, int64_t{1} << 40));
  app.add_option("--strategy", strategy,
                 "auto|zorse|poplar|torchtitan-het|hexiscale|cephalo|deepspeed-even|fastest-only")
      ->check(CLI::IsMember(StrategyNames()));
  app.add_option("--precision", precision_name, "fp32, bf16, fp16 or fp64 (default bf16)")
      ->check(CLI::IsMember(PrecisionNames()));
  app.add_option("--profile", profile_path,
                 "measured layer times (motley profile or Zorse's model_latencies.json)");
  app.add_flag("!--no-gradient-clipping", clipping,
               "plan for a job without gradient clipping ([optimizer] grad_clip_norm = 0): updates follow each "
               "ministage's backward instead of waiting for the global norm");
  app.add_flag("--compare", compare, "one row per strategy");
  app.add_option("--flextp-mode", flextp_mode,
                 "FlexTP in tensor-parallel plans: auto (default: migrate when the simulator predicts it beats "
                 "waiting for a straggler, else off), off, migrate, resize or semi (lossy)")
      ->check(CLI::IsMember({"auto", "off", "migrate", "resize", "semi"}));
  app.add_option("--straggler", straggler,
                 "DEVICE=FACTOR: judge FlexTP's modes, and every plan, with this device FACTOR times slower "
                 "(default: a tensor-parallel plan's first team's first device, 2x)");
  app.add_flag("--explain", explain,
               "why the cut, layer split, microbatch size and ministage count were chosen");
  app.add_flag("--json", json, "print JSON");
  app.add_option("-o,--output", out_path, "write the chosen plan (TOML, or JSON for .json)");
  if (auto rc = ParseArgs(app, args)) return *rc;

  auto fail = [](const Status& s) {
    fmt::print(stderr, "{}\n", s.message());
    return kExitFailure;
  };
  if (global_batch_tokens % seq_len != 0) {
    fmt::print(stderr,
               "motley plan: --global-batch-tokens ({}) is not a multiple of --seq-len ({}): {} / {} = "
               "{:.2f}; use {} "
               "or {}\n",
               global_batch_tokens, seq_len, global_batch_tokens, seq_len,
               static_cast<double>(global_batch_tokens) / seq_len,
               std::max<int64_t>(1, global_batch_tokens / seq_len) * seq_len,
               (global_batch_tokens / seq_len + 1) * seq_len);
    return kExitUsage;
  }
  Result<Cluster> cluster = LoadCluster(cluster_ref);
  if (!cluster.ok()) return fail(cluster.status());
  Result<ModelSpec> model = LoadModel(model_ref);
  if (!model.ok()) return fail(model.status());
  if (seq_len > model->max_seq_len)
    return fail(Status::InvalidArgument(fmt::format(
        "--seq-len {} is longer than {}'s max_seq_len ({}): shorten it, or give a model file with a larger "
        "max_seq_len",
        seq_len, model->name, model->max_seq_len)));
  std::optional<Profile> profile;
  if (!profile_path.empty()) {
    Result<Profile> p = LoadAnyProfile(profile_path);
    if (!p.ok()) return fail(p.status());
    profile = *p;
  }
  std::optional<StragglerProbe> probe;
  if (!straggler.empty()) {
    Result<StragglerProbe> p = ParseStragglerProbe(straggler, *cluster, "--straggler");
    if (!p.ok()) return fail(p.status());
    probe = *p;
  }
  PlanRequest request;
  request.global_batch_sequences = global_batch_tokens / seq_len;
  request.seq_len = seq_len;
  request.precision = *PrecisionFromName(precision_name);
  request.gradient_clipping = clipping;
  CostModel costs(*cluster, *model, profile ? &*profile : nullptr, seq_len, request.precision, true);
  EvaluationStats stats;
  const PlanEvaluator evaluate = SimulationEvaluator(*cluster, *model, costs, &stats);

  const auto start = std::chrono::steady_clock::now();
  std::vector<StrategyOutcome> rows;
  StrategyOutcome chosen;
  if (compare || strategy == "auto") {
    rows = PlanEveryStrategy(*cluster, *model, costs, request, evaluate,
                             compare ? EveryStrategy::kEachItsBest : EveryStrategy::kOnlyTheBest);
    chosen = BestOutcome(rows);
    if (strategy != "auto") {
      chosen.status = Status::Infeasible(fmt::format("{} found no plan that fits", strategy));
      for (const auto& o : rows)
        if (o.strategy == strategy) chosen = o;
    }
  } else {
    chosen = PlanWithStrategy(strategy, *cluster, *model, costs, request, evaluate);
    rows.push_back(chosen);
  }
  const double planning_s = std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
  // FlexTP's mode for plans with tensor-parallel teams, judged with a straggler (sim/flextp_choice.h):
  // the chosen plan's, and with --compare every row's. Keyed by strategy.
  std::map<std::string, FlexTpChoice> flextp;
  for (StrategyOutcome* o : [&] {
         std::vector<StrategyOutcome*> all = {&chosen};
         if (compare)
           for (auto& r : rows) all.push_back(&r);
         return all;
       }()) {
    if (o->plan.groups.empty()) continue;
    if (!flextp.count(o->strategy)) {
      Result<FlexTpChoice> c = ChooseFlexTpMode(o->plan, *cluster, *model, profile ? &*profile : nullptr,
                                                flextp_mode, probe);
      if (!c.ok()) return fail(c.status());
      if (c->step_s.empty()) continue;
      flextp[o->strategy] = *c;
    }
    o->plan.flextp_mode = flextp[o->strategy].mode;
  }
  auto flextp_of = [&](const StrategyOutcome& o) -> const FlexTpChoice* {
    auto it = flextp.find(o.strategy);
    return it == flextp.end() || o.plan.groups.empty() ? nullptr : &it->second;
  };
  // The written plan names what it is for and carries its routing, so it runs unchanged.
  if (!chosen.plan.groups.empty()) {
    chosen.plan.model = model_ref;
    chosen.plan.cluster = cluster_ref;
    FillZorseRouting(&chosen.plan, costs);
  }
  if (!out_path.empty() && chosen.status.ok()) {
    // File references as the written plan's folder sees them (it may be written elsewhere).
    Plan written = chosen.plan;
    written.model = ReferenceFromPlanAt(out_path, written.model);
    written.cluster = ReferenceFromPlanAt(out_path, written.cluster);
    std::ofstream out(out_path);
    out << (out_path.ends_with(".json") ? PlanToJson(written).dump(2) + "\n" : PlanToToml(written));
    if (!out) return fail(Status::IoError(fmt::format("{}: cannot write the plan", out_path)));
  }

  const int64_t tokens = global_batch_tokens;
  if (json) {
    nlohmann::json j = OutcomeJson(chosen, tokens, flextp_of(chosen));
    if (!chosen.plan.groups.empty()) j["devices_left_out"] = LeftOut(chosen.plan, *cluster);
    if (explain) j["timing"] = TimingJson(planning_s, stats, rows);
    if (compare) {
      j["candidates"] = nlohmann::json::array();
      for (const auto& o : rows) j["candidates"].push_back(OutcomeJson(o, tokens, flextp_of(o)));
    }
    fmt::print("{}\n", j.dump(2));
    return chosen.status.ok() ? kExitOk : kExitFailure;
  }
  if (compare) {
    // Tensor parallelism and FlexTP's columns when some plan has a team or a straggler was given.
    const bool tp_columns = !flextp.empty();
    std::vector<std::string> header = {"strategy", "step", "tokens/s", "TFLOPS", "HFU"};
    if (tp_columns) header.insert(header.end(), {"TP", "FlexTP", "straggling step"});
    header.push_back("memory");
    TablePrinter t(header);
    t.AlignRight(tp_columns ? std::vector<size_t>{1, 2, 3, 4, 7} : std::vector<size_t>{1, 2, 3, 4});
    for (const auto& o : rows) {
      const bool has = !o.plan.groups.empty();
      std::vector<std::string> row = {o.strategy, has ? FormatDuration(o.evaluation.step_time_s) : "-",
                                      has ? fmt::format("{:.0f}", tokens / o.evaluation.step_time_s) : "-",
                                      has ? fmt::format("{:.1f}", o.evaluation.tflops) : "-",
                                      has ? fmt::format("{:.1f}%", 100 * o.evaluation.hfu) : "-"};
      if (tp_columns) {
        const FlexTpChoice* c = flextp_of(o);
        row.push_back(has ? TensorParallelColumn(o.plan) : "-");
        row.push_back(c != nullptr && !c->mode.empty() ? c->mode : "-");
        row.push_back(c != nullptr ? fmt::format("{} (device {} {:g}x)", FormatDuration(c->straggling_step_s),
                                                 c->probe.device, c->probe.factor)
                                   : "-");
      }
      row.push_back(!has                       ? "no plan"
                    : o.evaluation.fits_memory ? "fits"
                                               : "OOM: " + o.evaluation.oom);
      t.AddRow(row);
    }
    fmt::print("{}\n", t.ToString());
    if (explain)
      for (const auto& o : rows)
        fmt::print("{}: {}\n", o.strategy, o.status.ok() ? o.explain : o.status.message());
  }
  if (!chosen.status.ok()) return fail(chosen.status);
  fmt::print("plan: {} on {} ({} devices), {}: {} groups, ZeRO-{}, {} schedule\n", chosen.strategy,
             cluster->name, chosen.plan.num_devices(), model->name, chosen.plan.groups.size(),
             chosen.plan.zero_stage, PipelineScheduleName(chosen.plan.schedule));
  if (const std::vector<int> out = LeftOut(chosen.plan, *cluster); !out.empty())
    fmt::print("left out: {} of the {} devices, {} — a plan with them steps slower{}\n", out.size(),
               cluster->num_devices(), DescribeLeftOut(out, *cluster), explain ? "" : " (--explain says how much)");
  fmt::print("predicted step {} | {:.0f} tokens/s | {:.1f} TFLOPS | HFU {:.1f}%\n",
             FormatDuration(chosen.evaluation.step_time_s), tokens / chosen.evaluation.step_time_s,
             chosen.evaluation.tflops, 100 * chosen.evaluation.hfu);
  if (const FlexTpChoice* c = flextp_of(chosen)) {
    if (c->mode.empty())
      fmt::print("straggler: {}\n", c->why);
    else
      fmt::print("tensor parallel: {} ({}); {}\n", TensorParallelColumn(chosen.plan),
                 TensorParallelWhy(chosen, rows, compare), c->why);
  }
  if (explain && !compare) fmt::print("why: {}\n", chosen.explain);
  if (explain) {
    // What clipping costs this plan: the same plan with its updates after each ministage.
    Plan other = chosen.plan;
    other.gradient_clipping = !other.gradient_clipping;
    Result<PlanEvaluation> e = evaluate(other, {});
    if (e.ok()) {
      const double with_s = clipping ? chosen.evaluation.step_time_s : e->step_time_s;
      const double without_s = clipping ? e->step_time_s : chosen.evaluation.step_time_s;
      fmt::print("gradient clipping: {} (with it every update waits for the global norm): step {} with it, {} "
                 "without ({:+.1f}%){}\n",
                 clipping ? "on" : "off (--no-gradient-clipping)", FormatDuration(with_s), FormatDuration(without_s),
                 100 * (with_s / without_s - 1),
                 e->fits_memory ? "" : fmt::format("; {} it, this plan does not fit", clipping ? "without" : "with"));
    }
  }
  if (explain) {
    fmt::print("planning took {}: {} plans simulated ({} asked for again, {} stopped once slower than the best so "
               "far), lowering {}, simulating {}",
               FormatDuration(planning_s), stats.evaluations, stats.cached, stats.stopped, FormatDuration(stats.lower_s),
               FormatDuration(stats.simulate_s));
    for (const auto& o : rows)
      fmt::print("; {} {} ({} in the simulator, {} of {} device subsets)", o.strategy, FormatDuration(o.plan_s),
                 FormatDuration(o.evaluate_s), o.subsets_planned, o.subsets_planned + o.subsets_skipped);
    fmt::print("\n");
  }
  if (!out_path.empty()) fmt::print("written to {}\n", out_path);
  return kExitOk;
}

}  // namespace motley::cli
