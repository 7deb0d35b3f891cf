// motley plan --cluster C | --offers O --model M --seq-len S --global-batch-tokens N [--strategy ...]
//             [--objective time|cost|time-within-budget|cost-within-deadline ...]
//             [--profile F] [--islands auto|off|N] [--compare] [--explain] [--json] [-o plan.toml]
// What it computes is plan_query.h's; here, how it is printed.
#include <cstdint>
#include <filesystem>
#include <fstream>
#include <map>
#include <optional>
#include <tuple>

#include <fmt/format.h>
#include <nlohmann/json.hpp>

#include "api/interruption_figures.h"
#include "api/island_candidate.h"
#include "api/offer_plan.h"
#include "api/plan_inputs.h"
#include "api/plan_query.h"
#include "api/table_printer.h"
#include "cli/args.h"
#include "cli/command.h"
#include "core/file_io.h"
#include "core/units.h"
#include "plan/offer_search.h"
#include "plan/plan_io.h"

namespace motley::cli {
namespace {

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

// Under auto alone (not --compare) strategies that could not beat the best so far were not planned.
std::string TensorParallelWhy(const StrategyOutcome& chosen, const std::vector<StrategyOutcome>& rows,
                              bool every) {
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

// --compare: one row per strategy (with tensor parallelism's and FlexTP's columns when some plan has
// a team or a straggler was given), and with --explain each strategy's reasons.
void PrintComparison(const PlanAnswer& a, bool explain) {
  const std::vector<StrategyOutcome>& rows = a.rows;
  const int64_t tokens = a.query.global_batch_tokens;
  const bool tp_columns = !a.flextp.empty();
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
      const FlexTpChoice* c = a.FlexTpOf(o);
      row.push_back(has ? TensorParallelColumn(o.plan) : "-");
      row.push_back(c != nullptr && !c->mode.empty() ? c->mode : "-");
      row.push_back(c != nullptr ? fmt::format("{} (device {} {:g}x)", FormatDuration(c->straggling_step_s),
                                               c->probe.device, c->probe.factor)
                                 : "-");
    }
    row.push_back(!has ? "no plan" : o.evaluation.fits_memory ? "fits" : "OOM: " + o.evaluation.oom);
    t.AddRow(row);
  }
  fmt::print("{}\n", t.ToString());
  if (explain)
    for (const auto& o : rows)
      fmt::print("{}: {}\n", o.strategy, o.status.ok() ? o.explain : o.status.message());
}

// --explain: the memory planned within per device type, what gradient clipping costs the chosen
// plan, and where the planning's time went.
void PrintWhereTimeAndMemoryGo(const PlanAnswer& a, bool gradient_clipping) {
  const Cluster& cluster = *a.cluster;
  const StrategyOutcome& chosen = a.chosen;
  const std::vector<StrategyOutcome>& rows = a.rows;
  {
    // The memory planned within, per device type: its memory less what CUDA, NCCL and the allocator keep.
    std::map<std::string, int> seen;
    for (int d = 0; d < cluster.num_devices(); ++d) {
      const std::string& type = cluster.spec(d).name;
      if (seen[type]++ > 0) continue;
      const double reserve = cluster.reserve_bytes(d);
      fmt::print("memory: {} — {} usable of {} ({}){}\n", type, FormatBytes(cluster.usable_memory_bytes(d)),
                 FormatBytes(cluster.memory_bytes(d)),
                 reserve > 0
                     ? fmt::format("a {} reserve: {}", FormatBytes(reserve), cluster.spec(d).reserve_source)
                     : "no reserve: emulated or none given",
                 "");
    }
  }
  {
    // What clipping costs this plan: the same plan with its updates after each ministage.
    Plan other = chosen.plan;
    other.gradient_clipping = !other.gradient_clipping;
    Result<PlanEvaluation> e = a.evaluate(other, {});
    if (e.ok()) {
      const double with_s = gradient_clipping ? chosen.evaluation.step_time_s : e->step_time_s;
      const double without_s = gradient_clipping ? e->step_time_s : chosen.evaluation.step_time_s;
      fmt::print(
          "gradient clipping: {} (with it every update waits for the global norm): step {} with it, {} "
          "without ({:+.1f}%){}\n",
          gradient_clipping ? "on" : "off (--no-gradient-clipping)", FormatDuration(with_s),
          FormatDuration(without_s), 100 * (with_s / without_s - 1),
          e->fits_memory
              ? ""
              : fmt::format("; {} it, this plan does not fit", gradient_clipping ? "without" : "with"));
    }
  }
  {
    fmt::print(
        "planning took {}: {} plans simulated ({} asked for again, {} stopped once slower than the best so "
        "far), lowering {}, simulating {}",
        FormatDuration(a.planning_s), a.stats->evaluations, a.stats->cached, a.stats->stopped,
        FormatDuration(a.stats->lower_s), FormatDuration(a.stats->simulate_s));
    for (const auto& o : rows)
      fmt::print("; {} {} ({} in the simulator, {} of {} device subsets)", o.strategy,
                 FormatDuration(o.plan_s), FormatDuration(o.evaluate_s), o.subsets_planned,
                 o.subsets_planned + o.subsets_skipped);
    fmt::print("\n");
  }
}

// "$41.20/h (compute $40.96, egress $0.24) | $2.31 a million tokens | the job: 2.4 days, $2,380".
std::string MoneySummary(const PlanMoney& m, double train_tokens, const InterruptionCost& cost) {
  std::string out = fmt::format("price {}/h (devices {}, egress {}) | {} a million tokens",
                                FormatUsd(m.usd_per_hour), FormatUsd(m.compute_usd_per_hour),
                                FormatUsd(m.egress_usd_per_hour), FormatUsd(m.usd_per_million_tokens));
  if (m.inter_region_bytes_per_step > 0)
    out += fmt::format(" | {} a step between regions", FormatBytes(m.inter_region_bytes_per_step));
  if (train_tokens > 0) {
    const double seconds = train_tokens / m.tokens_per_s;
    out += fmt::format(" | the job ({} tokens): {}, {}", FormatCount(train_tokens),
                       FormatLongDuration(seconds), FormatUsd(m.usd_per_hour * seconds / 3600));
  }
  if (m.spot_devices > 0)
    out += fmt::format(
        "\nspot: {} devices, {:.3g} interruptions an hour together, each losing half a checkpoint interval "
        "({}) and a restart ({}): it trains {:.1f}% of the time, {:.0f} of {:.0f} tokens/s expected; the "
        "same "
        "devices on demand: {}/h, {} a million tokens",
        m.spot_devices, m.interruptions_per_hour, FormatDuration(cost.checkpoint_interval_s / 2),
        FormatDuration(cost.restart_s), 100 * m.availability, m.tokens_per_s, m.nominal_tokens_per_s,
        FormatUsd(m.on_demand_usd_per_hour), FormatUsd(m.on_demand_usd_per_million_tokens));
  if (m.spot_devices > 0 && !cost.measured.empty()) out += fmt::format(" ({})", cost.measured);
  return out;
}

// What to rent: the front of price and speed the search found, the chosen one marked.
void PrintFront(const PlanAnswer& a) {
  std::vector<std::string> header = {"", "rent", "strategy", "step", "tokens/s", "$/h", "$/M tokens"};
  if (a.query.train_tokens > 0) header.insert(header.end(), {"job time", "job cost"});
  TablePrinter t(header);
  t.AlignRight({3, 4, 5, 6, 7, 8});
  for (size_t i = 0; i < a.front.size(); ++i) {
    const RentedPlan& p = a.front[i];
    std::vector<std::string> row = {static_cast<int>(i) == a.chosen_on_front ? "*" : "",
                                    p.description,
                                    p.outcome.strategy,
                                    FormatDuration(p.outcome.evaluation.step_time_s),
                                    fmt::format("{:.0f}", p.money.tokens_per_s),
                                    FormatUsd(p.money.usd_per_hour),
                                    FormatUsd(p.money.usd_per_million_tokens)};
    if (a.query.train_tokens > 0) {
      const double seconds = a.query.train_tokens / p.money.tokens_per_s;
      row.push_back(FormatLongDuration(seconds));
      row.push_back(FormatUsd(p.money.usd_per_hour * seconds / 3600));
    }
    t.AddRow(row);
  }
  fmt::print(
      "what to rent: {} allocations planned ({} of them again in full: those on or near the front); the "
      "front "
      "of price and speed (none both cheaper and faster than another):\n{}\n",
      a.allocations_planned, a.allocations_refined, t.ToString());
}

// The money flags (api/offer_plan.h): where the devices come from (--cluster or --offers), the
// objective and its limits, the job's tokens.
struct MoneyFlags {
  std::string deadline;                           // a duration, "72h"
  double max_usd_per_token = 0;                   // dollars a token
  std::string checkpoint_interval, restart_time;  // durations
};

void AddMoneyFlags(CLI::App& app, PlanQuery* query, MoneyFlags* money) {
  auto* cluster_opt = app.add_option("--cluster", query->cluster, "a cluster file or built-in cluster name");
  auto* offers_opt = app.add_option(
      "--offers", query->offers,
      "an offers file (or built-in name, e.g. aws-three-regions): choose what to rent with the plan");
  cluster_opt->excludes(offers_opt);
  app.add_option("--objective", query->objective,
                 "what to choose by, over --offers or a priced cluster: time, cost (dollars a token), "
                 "time-within-budget, cost-within-deadline")
      ->check(CLI::IsMember(ObjectiveNames()));
  app.add_option("--budget-per-hour", query->budget_usd_per_hour,
                 "time-within-budget: at most this many US dollars an hour")
      ->check(CLI::PositiveNumber);
  app.add_option("--max-cost-per-token", money->max_usd_per_token,
                 "time-within-budget: at most this many US dollars a token (2e-6: $2 a million tokens)")
      ->check(CLI::PositiveNumber);
  app.add_option("--deadline", money->deadline,
                 "cost-within-deadline: train --tokens within this (e.g. 72h, 3d)");
  app.add_option("--min-tokens-per-s", query->min_tokens_per_s, "cost-within-deadline: at least this fast")
      ->check(CLI::PositiveNumber);
  app.add_option(
         "--offer-evaluations", query->offer_evaluations,
         "allocations of the offers to plan at most (default 150; 0: every one, exact for short lists)")
      ->check(CLI::Range(0, 100000));
  app.add_option("--tokens", query->train_tokens,
                 "the job's tokens (e.g. 2e10): its total time and cost beside each priced plan")
      ->check(CLI::PositiveNumber);
  app.add_option("--checkpoint-interval", money->checkpoint_interval,
                 "spot devices: how often the run checkpoints (default 30min; or a run's folder or metrics "
                 "file to measure it from); an interruption loses half");
  app.add_option("--restart-time", money->restart_time,
                 "spot devices: from an interruption to training again (default 10min; or a run's folder or "
                 "metrics file to measure it from, its restarts under --max-restarts)");
}

// Checks what the money flags say together; an exit code when they cannot be used.
std::optional<int> FinishMoneyFlags(const MoneyFlags& money, PlanQuery* query) {
  if (query->cluster.empty() && query->offers.empty()) {
    fmt::print(stderr,
               "motley plan: give --cluster (the devices you have) or --offers (what you could rent)\n");
    return kExitUsage;
  }
  query->max_usd_per_million_tokens = money.max_usd_per_token * 1e6;
  if (!money.deadline.empty()) {
    Result<double> s = ParseDuration(money.deadline);
    if (!s.ok()) {
      fmt::print(stderr, "motley plan: --deadline: {}\n", s.status().message());
      return kExitUsage;
    }
    query->deadline_s = *s;
  }
  for (auto [flag, text, figure] : {std::tuple{"--checkpoint-interval", &money.checkpoint_interval,
                                               InterruptionFigure::kCheckpointInterval},
                                    {"--restart-time", &money.restart_time, InterruptionFigure::kRestart}}) {
    if (text->empty()) continue;
    if (Status st = SetInterruptionFigure(flag, *text, figure, &query->interruptions); !st.ok()) {
      fmt::print(stderr, "motley plan: {}\n", st.message());
      return kExitUsage;
    }
  }
  return std::nullopt;
}

}  // namespace

namespace {

// Where a plan chosen from offers keeps the cluster file of what it rents: beside it,
// "<plan's stem>.cluster.toml".
std::string RentedClusterPath(const std::string& out_path) {
  std::filesystem::path p(out_path);
  return (p.parent_path() / (p.stem().string() + ".cluster.toml")).string();
}

// The chosen plan, its file references as its folder sees them (it may be written elsewhere); one
// chosen from offers gets the cluster file of what it rents beside it, its devices numbered as
// that file's, so that it can be simulated and run.
Status WriteChosenPlan(const std::string& out_path, const PlanAnswer& a) {
  Plan written = a.chosen.plan;
  if (!a.query.offers.empty()) {
    MOTLEY_ASSIGN_OR_RETURN(RentedFiles rented, PlanOnWhatIsRented(a.query.offers, *a.cluster, written));
    MOTLEY_RETURN_IF_ERROR(AtomicWriteFile(RentedClusterPath(out_path), rented.cluster_toml));
    written = std::move(rented.plan);
    written.cluster = std::filesystem::path(RentedClusterPath(out_path)).filename().string();
  } else {
    written.cluster = ReferenceFromPlanAt(out_path, written.cluster);
  }
  written.model = ReferenceFromPlanAt(out_path, written.model);
  return AtomicWriteFile(
      out_path, out_path.ends_with(".json") ? PlanToJson(written).dump(2) + "\n" : PlanToToml(written));
}

// The islands' plans beside the chosen one: PATH's stem and .island<i> before its extension.
Result<std::vector<std::string>> WriteIslandPlans(const std::string& out_path, const PlanAnswer& a,
                                                  const IslandCandidate& islands) {
  const std::filesystem::path path(out_path);
  std::vector<std::string> written;
  for (size_t i = 0; i < islands.plans.size(); ++i) {
    Plan plan = islands.plans[i];
    plan.cluster = ReferenceFromPlanAt(out_path, a.chosen.plan.cluster);
    plan.model = ReferenceFromPlanAt(out_path, a.chosen.plan.model);
    const std::string to = (path.parent_path() /
                            fmt::format("{}.island{}{}", path.stem().string(), i, path.extension().string()))
                               .string();
    MOTLEY_RETURN_IF_ERROR(
        AtomicWriteFile(to, to.ends_with(".json") ? PlanToJson(plan).dump(2) + "\n" : PlanToToml(plan)));
    written.push_back(to);
  }
  return written;
}

// The islands beside the synchronous plans, and their plans written beside the chosen one's.
Status PrintIslands(const std::optional<IslandCandidate>& candidate, const std::string& none,
                    const PlanAnswer& a, const std::string& out_path) {
  if (!none.empty()) fmt::print("islands: none ({})\n\n", none);
  if (!candidate) return Status::Ok();
  const IslandCandidate& islands = *candidate;
  fmt::print("{}\n", IslandCandidateLine(islands, a));
  if (islands.chosen) fmt::print("  below: the best synchronous plan, the alternative\n");
  if (!out_path.empty()) {
    MOTLEY_ASSIGN_OR_RETURN(const std::vector<std::string> files, WriteIslandPlans(out_path, a, islands));
    fmt::print(
        "  the islands' plans: {} (a job's [islands] count = {}, inner_steps = {}{}{}{}, compression = "
        "\"{}\", "
        "outer_lr = {:g}, outer_momentum = {:g}; motley train JOB --island-plan {})\n",
        fmt::join(files, ", "), files.size(), islands.inner_steps,
        islands.inner_steps_each.empty()
            ? std::string()
            : fmt::format(", inner_steps_per_island = [{}]", fmt::join(islands.inner_steps_each, ", ")),
        islands.overlap_steps > 0 ? fmt::format(", overlap_steps = {}", islands.overlap_steps)
                                  : std::string(),
        islands.fragments > 1 ? fmt::format(", fragments = {}", islands.fragments) : std::string(),
        islands.compression, islands.outer.lr, islands.outer.momentum, fmt::join(files, " --island-plan "));
  }
  fmt::print("\n");
  return Status::Ok();
}

// The chosen plan, its speed, price and why, and where it was written.
void PrintChosenPlan(const PlanAnswer& a, const PlanQuery& query, bool explain, const std::string& out_path) {
  const Cluster& cluster = *a.cluster;
  const StrategyOutcome& chosen = a.chosen;
  const std::vector<StrategyOutcome>& rows = a.rows;
  const int64_t tokens = query.global_batch_tokens;
  if (!a.precision_reason.empty()) fmt::print("precision: {}\n", a.precision_reason);
  fmt::print("plan: {} on {} ({} devices), {}: {} groups, ZeRO-{}, {} schedule\n", chosen.strategy,
             cluster.name, chosen.plan.num_devices(), a.model->name, chosen.plan.groups.size(),
             chosen.plan.zero_stage, PipelineScheduleName(chosen.plan.schedule));
  if (const std::vector<int> out = LeftOut(chosen.plan, cluster); !out.empty() && a.front.empty())
    fmt::print("left out: {} of the {} devices, {} — a plan with them steps slower{}\n", out.size(),
               cluster.num_devices(), DescribeLeftOut(out, cluster),
               explain ? "" : " (--explain says how much)");
  fmt::print("predicted step {} | {:.0f} tokens/s | {:.1f} TFLOPS | HFU {:.1f}%\n",
             FormatDuration(chosen.evaluation.step_time_s), tokens / chosen.evaluation.step_time_s,
             chosen.evaluation.tflops, 100 * chosen.evaluation.hfu);
  if (a.money) fmt::print("{}\n", MoneySummary(*a.money, query.train_tokens, query.interruptions));
  if (!a.objective_why.empty()) fmt::print("chosen: {}\n", a.objective_why);
  if (const FlexTpChoice* c = a.FlexTpOf(chosen)) {
    if (c->mode.empty())
      fmt::print("straggler: {}\n", c->why);
    else
      fmt::print("tensor parallel: {} ({}); {}\n", TensorParallelColumn(chosen.plan),
                 TensorParallelWhy(chosen, rows, query.compare), c->why);
  }
  if (explain && !query.compare) fmt::print("why: {}\n", chosen.explain);
  if (explain) PrintWhereTimeAndMemoryGo(a, query.gradient_clipping);
  if (!out_path.empty())
    fmt::print("written to {}{}\n", out_path,
               query.offers.empty() ? "" : fmt::format(" (what it rents: {})", RentedClusterPath(out_path)));
}

}  // namespace

int RunPlan(const std::vector<std::string>& args) {
  CLI::App app(
      "Choose how to train: the plan with the shortest simulated step that fits, from the strategy "
      "you name or from all of them (auto).",
      "motley plan");
  PlanQuery query;
  std::string out_path;
  int64_t& seq_len = query.seq_len;
  int64_t& global_batch_tokens = query.global_batch_tokens;
  bool explain = false, json = false;
  std::string islands_flag = "auto";
  MoneyFlags money;
  AddMoneyFlags(app, &query, &money);
  app.add_option("--model", query.model, "a preset, model .toml or Hugging Face config.json")->required();
  app.add_option("--seq-len", seq_len, "tokens per sequence")
      ->required()
      ->check(CLI::Range(int64_t{1}, kMaxPlanSeqLen));
  app.add_option("--global-batch-tokens", global_batch_tokens, "tokens per step (a multiple of --seq-len)")
      ->required()
      ->check(CLI::Range(int64_t{1}, kMaxPlanBatchTokens));
  app.add_option("--strategy", query.strategy,
                 "auto|zorse|poplar|torchtitan-het|hexiscale|cephalo|deepspeed-even|fastest-only")
      ->check(CLI::IsMember(StrategyNames()));
  app.add_option(
         "--precision", query.precision,
         "fp32, bf16, fp16 or fp64 (default bf16), or auto: bf16 where every device has it, else fp16")
      ->check(CLI::IsMember([] {
        std::vector<std::string> names = PrecisionNames();
        names.push_back("auto");
        return names;
      }()));
  app.add_option("--profile", query.profile,
                 "measured layer times (motley profile or Zorse's model_latencies.json)");
  app.add_flag(
      "!--no-gradient-clipping", query.gradient_clipping,
      "plan for a job without gradient clipping ([optimizer] grad_clip_norm = 0): updates follow each "
      "ministage's backward instead of waiting for the global norm");
  app.add_flag("--compare", query.compare, "one row per strategy");
  app.add_option(
         "--flextp-mode", query.flextp_mode,
         "FlexTP in tensor-parallel plans: auto (default: migrate when the simulator predicts it beats "
         "waiting for a straggler, else off), off, migrate, resize or semi (lossy)")
      ->check(CLI::IsMember({"auto", "off", "migrate", "resize", "semi"}));
  app.add_option("--straggler", query.straggler,
                 "DEVICE=FACTOR: judge FlexTP's modes, and every plan, with this device FACTOR times slower "
                 "(default: a tensor-parallel plan's first team's first device, 2x)");
  app.add_flag("--explain", explain,
               "why the cut, layer split, microbatch size and ministage count were chosen");
  app.add_option("--islands", islands_flag,
                 "auto (default): over several regions, also judge islands — one a region, meeting every H "
                 "steps — and choose them when they reach the same loss sooner (an estimate); N: islands "
                 "whatever it says; off: synchronous plans only")
      ->check(CLI::IsMember({"auto", "off"}) | CLI::Range(int64_t{2}, int64_t{1024}));
  app.add_flag("--json", json, "print JSON");
  app.add_option("-o,--output", out_path, "write the chosen plan (TOML, or JSON for .json)");
  if (auto rc = ParseArgs(app, args)) return *rc;
  if (auto rc = FinishMoneyFlags(money, &query)) return *rc;

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
  Result<PlanAnswer> answer = AnswerPlanQuery(query);
  if (!answer.ok()) return fail(answer.status());
  const PlanAnswer& a = *answer;
  const StrategyOutcome& chosen = a.chosen;
  if (!out_path.empty() && chosen.status.ok())
    if (Status s = WriteChosenPlan(out_path, a); !s.ok()) return fail(s);
  // Islands beside the synchronous plans, where the cluster has several regions.
  std::string no_islands;
  Result<std::optional<IslandCandidate>> considered = ConsiderIslands(islands_flag, a, &no_islands);
  if (!considered.ok()) return fail(considered.status());
  const std::optional<IslandCandidate>& islands = *considered;
  if (json) {
    nlohmann::json j = PlanAnswerJson(a, explain);
    AddIslandsJson(islands, no_islands, &j);
    if (islands && !out_path.empty()) {  // their plans beside the chosen one, as the text answer writes them
      Result<std::vector<std::string>> files = WriteIslandPlans(out_path, a, *islands);
      if (!files.ok()) return fail(files.status());
      j["islands"]["plan_files"] = *files;
    }
    fmt::print("{}\n", j.dump(2));
    return chosen.status.ok() ? kExitOk : kExitFailure;
  }
  if (query.compare) PrintComparison(a, explain);
  if (Status st = PrintIslands(islands, no_islands, a, out_path); !st.ok()) return fail(st);
  if (!a.front.empty()) PrintFront(a);
  if (!chosen.status.ok()) return fail(chosen.status);
  PrintChosenPlan(a, query, explain, out_path);
  return kExitOk;
}

}  // namespace motley::cli
