// motley report (--plan P | --island-plan P0 --island-plan P1 .. [--inner-steps H] [--compression C] |
//                --job J | --run DIR) [--cluster C] [--model M] [--profile F]
//               [--no-compare] [-o report.html]
// One self-contained HTML page (report_page.h): the cluster and the plan, one simulated step device
// by device, peak memory against capacity, every strategy compared, and — for a run's folder — the
// measured step beside the simulated one, the loss, throughput and the run's events.
#include <algorithm>
#include <filesystem>
#include <fstream>
#include <optional>

#include <fmt/format.h>
#include <fmt/ranges.h>

#include "api/islands_query.h"
#include "api/job_input.h"
#include "api/plan_inputs.h"
#include "api/plan_query.h"
#include "cli/args.h"
#include "cli/command.h"
#include "cli/report_page.h"
#include "core/file_io.h"
#include "core/toml_reader.h"
#include "cost/money.h"
#include "plan/baselines.h"
#include "plan/lower.h"
#include "plan/offer_search.h"
#include "sim/cost_model.h"
#include "sim/flextp_choice.h"
#include "sim/plan_evaluator.h"
#include "sim/region_traffic.h"
#include "sim/routing_costs.h"

namespace motley::cli {
namespace {

namespace fs = std::filesystem;

Result<RunRecord> ReadRun(const std::string& dir) {
  RunRecord run;
  run.dir = dir;
  MOTLEY_ASSIGN_OR_RETURN(run.metrics, ReadMetricsFile((fs::path(dir) / "metrics.jsonl").string()));
  const fs::path trace = fs::path(dir) / "trace.json";
  std::error_code ec;
  if (fs::exists(trace, ec)) {
    Result<std::vector<TraceSpan>> spans = ReadTraceFile(trace.string());
    if (!spans.ok())
      return Status::InvalidArgument(fmt::format("{} (remove {} to report the run without its trace)",
                                                 spans.status().message(), trace.string()));
    run.trace = std::move(*spans);
  }
  return run;
}

// The plan's row beside every strategy's best for the same model, cluster and batch.
std::vector<CompareRow> CompareEveryStrategy(const PlanInputs& in, const CostModel& costs,
                                             const Profile* profile, const Schedule& schedule,
                                             const SimResult& sim) {
  std::vector<CompareRow> compare;
  PlanRequest request;
  request.global_batch_sequences = schedule.global_batch_tokens / in.plan.seq_len;
  request.seq_len = in.plan.seq_len;
  request.precision = in.plan.precision;
  request.activation_checkpointing = in.plan.activation_checkpointing;
  request.gradient_clipping = in.plan.gradient_clipping;
  const PlanEvaluator evaluate = SimulationEvaluator(in.cluster, in.model, costs);
  compare.push_back({"this plan (" + in.plan.strategy + ")", sim.step_time_s, sim.tokens_per_s,
                     TensorParallelColumn(in.plan), in.plan.flextp_mode.empty() ? "-" : in.plan.flextp_mode,
                     sim.fits_memory ? "" : "out of memory", true});
  for (const StrategyOutcome& o :
       PlanEveryStrategy(in.cluster, in.model, costs, request, evaluate, EveryStrategy::kEachItsBest)) {
    CompareRow row{o.strategy, -1, 0, "-", "-", o.status.ok() ? o.explain : o.status.message(), false};
    if (!o.plan.groups.empty() && o.status.ok()) {
      row.step_s = o.evaluation.step_time_s;
      row.tokens_per_s = static_cast<double>(schedule.global_batch_tokens) / o.evaluation.step_time_s;
      row.tensor_parallel = TensorParallelColumn(o.plan);
      if (row.tensor_parallel != "-") {
        Result<FlexTpChoice> c =
            ChooseFlexTpMode(o.plan, in.cluster, in.model, profile, "auto", std::nullopt);
        if (c.ok()) row.flextp = c->mode;
      }
    }
    compare.push_back(std::move(row));
  }
  return compare;
}

void AddRentFlags(CLI::App& app, PlanQuery* rent) {
  app.add_option(
      "--offers", rent->offers,
      "an offers file (or built-in name): chart what could be rented for the plan's model and batch, "
      "price against speed, the front marked");
  app.add_option("--objective", rent->objective, "with --offers: what to choose by (motley plan --objective)")
      ->check(CLI::IsMember(ObjectiveNames()));
  app.add_option("--budget-per-hour", rent->budget_usd_per_hour, "with --objective time-within-budget")
      ->check(CLI::PositiveNumber);
  app.add_option("--min-tokens-per-s", rent->min_tokens_per_s, "with --objective cost-within-deadline")
      ->check(CLI::PositiveNumber);
}

// --job: the job's cluster and model, planned by its strategy (its own [plan] profile unless one
// was given).
Status PlanTheJob(const std::string& job_ref, PlanInputs* in, std::optional<Profile>* profile) {
  MOTLEY_ASSIGN_OR_RETURN(const JobSpec job, LoadJobArgument(job_ref));
  if (!*profile && !job.plan.profile.empty()) {  // the job's own [plan] profile, relative to the job file
    const fs::path given(job.plan.profile);
    MOTLEY_ASSIGN_OR_RETURN(
        *profile, LoadAnyProfile(given.is_absolute() ? given.string()
                                                     : (fs::path(job.file).parent_path() / given).string()));
  }
  in->cluster = job.cluster;
  in->model = job.model;
  const TrainingConfig& t = job.training;
  const CostModel costs(in->cluster, in->model, *profile ? &**profile : nullptr, t.seq_len, t.precision,
                        t.activation_checkpointing);
  const StrategyOutcome o =
      PlanWithStrategy(job.plan.strategy, in->cluster, in->model, costs, PlanRequestForJob(job),
                       SimulationEvaluator(in->cluster, in->model, costs));
  MOTLEY_RETURN_IF_ERROR(o.status);
  in->plan = o.plan;
  FillZorseRouting(&in->plan, costs);
  return Status::Ok();
}

// What could be rented for the page's model and batch (`--offers`): the search `motley plan
// --offers` runs, every allocation it planned, and the page's own plan priced when its cluster is.
Result<RentView> RentViewOf(PlanQuery q, const std::string& plan_path, const PlanInputs& in,
                            const Schedule& schedule, const SimResult& sim) {
  q.model = in.plan.model;
  std::error_code ec;
  if (const fs::path beside = fs::path(plan_path).parent_path() / q.model;
      !plan_path.empty() && fs::is_regular_file(beside, ec))
    q.model = beside.string();
  q.seq_len = in.plan.seq_len;
  q.global_batch_tokens = schedule.global_batch_tokens;
  q.precision = std::string(PrecisionName(in.plan.precision));
  MOTLEY_ASSIGN_OR_RETURN(const PlanAnswer a, AnswerPlanQuery(q));
  RentView v{q.offers, q.objective.empty() ? "time" : q.objective, a.objective_why, {}, std::nullopt};
  if (!a.chosen.status.ok()) v.why = a.chosen.status.message();
  for (const RentedPlan& p : a.planned) {
    RentRow r{p.description, p.outcome.strategy, p.money.tokens_per_s, p.money.usd_per_hour,
              p.money.usd_per_million_tokens};
    for (size_t i = 0; i < a.front.size(); ++i)
      if (a.front[i].description == p.description) {
        r.on_front = true;
        r.chosen = static_cast<int>(i) == a.chosen_on_front;
      }
    v.rows.push_back(std::move(r));
  }
  if (in.cluster.priced()) {
    const PlanMoney m = PriceOfPlan(in.cluster, in.plan.devices(), sim.step_time_s,
                                    static_cast<double>(schedule.global_batch_tokens),
                                    RegionTraffic(schedule, in.cluster), q.interruptions);
    v.this_plan = std::pair{m.tokens_per_s, m.usd_per_hour};
  }
  return v;
}

// The islands the page is about (--island-plan): each island's step and the outer round, its trace
// recorded. `answer` and `round_sim` hold what the view points at.
Result<IslandsView> IslandsViewOf(const IslandsQuery& query, const Cluster& cluster, const CostModel& costs,
                                  IslandsAnswer* answer, SimResult* round_sim) {
  MOTLEY_ASSIGN_OR_RETURN(*answer, AnswerIslandsQuery(query));
  SimConfig config;
  config.record_trace = true;
  MOTLEY_ASSIGN_OR_RETURN(*round_sim, Simulate(answer->round(), cluster, costs, config));
  IslandsView v{query.plan_paths, {}, &answer->result, &answer->round(), round_sim, query.compression};
  for (const SimulateAnswer& island : answer->islands) {
    const std::vector<int> devices = island.in.plan.devices();
    v.devices.push_back(fmt::format("{} x {} (devices {}..{})", devices.size(),
                                    cluster.spec(devices.front()).name,
                                    *std::min_element(devices.begin(), devices.end()),
                                    *std::max_element(devices.begin(), devices.end())));
  }
  return v;
}

// --island-plan (repeatable), --inner-steps, --compression, --overlap-steps: a page on islands. Returns
// --island-plan.
CLI::Option* AddIslandsFlags(CLI::App& app, IslandsQuery* islands) {
  CLI::Option* plans =
      app.add_option("--island-plan", islands->plan_paths,
                     "islands instead of one plan: each island's plan, in order (repeatable)");
  app.add_option("--inner-steps", islands->inner_steps,
                 "islands: H, every island's or each island's (H0,H1,..)")
      ->delimiter(',')
      ->check(CLI::PositiveNumber);
  app.add_option("--compression", islands->compression, "islands: what crosses between them")
      ->check(CLI::IsMember({"none", "fp16", "int8", "int4"}));
  app.add_option("--overlap-steps", islands->overlap_steps,
                 "islands: the inner steps a round's exchange overlaps (a job's overlap_steps)")
      ->check(CLI::NonNegativeNumber);
  app.add_option(
         "--fragments", islands->fragments,
         "islands: streaming fragments, one round each (a job's fragments; the page draws the first's)")
      ->check(CLI::PositiveNumber);
  return plans;
}

// --run DIR: the plan a run followed (its plan.toml), what it measured, and its profile where it has one
// and none was given.
Status LoadRunFolder(const std::string& run_dir, const std::string& cluster_ref, const std::string& model_ref,
                     PlanInputs* in, std::optional<RunRecord>* run, std::string* profile_path) {
  const fs::path plan_file = fs::path(run_dir) / "plan.toml";
  std::error_code ec;
  if (!fs::exists(plan_file, ec))
    return Status::InvalidArgument(fmt::format(
        "{}: no plan.toml: give the folder a `motley train` run wrote (its [checkpoint] dir), or --plan FILE",
        run_dir));
  MOTLEY_ASSIGN_OR_RETURN(*in, LoadPlanInputs(plan_file.string(), cluster_ref, model_ref));
  MOTLEY_ASSIGN_OR_RETURN(*run, ReadRun(run_dir));
  if (profile_path->empty() && fs::exists(fs::path(run_dir) / "profile.json", ec))
    *profile_path = (fs::path(run_dir) / "profile.json").string();
  return Status::Ok();
}

}  // namespace

int RunReport(const std::vector<std::string>& args) {
  CLI::App app(
      "Write one self-contained HTML page on a plan (and every strategy's), its simulated step and "
      "memory, and — for a run's folder — what the run measured.",
      "motley report");
  std::string plan_path, job_ref, run_dir, cluster_ref, model_ref, profile_path, out_path;
  bool no_compare = false;
  auto* plan_opt = app.add_option("--plan", plan_path, "a plan file");
  auto* job_opt = app.add_option("--job", job_ref,
                                 "a job file or built-in job (default): planned as `motley train` plans it");
  auto* run_opt = app.add_option(
      "--run", run_dir,
      "a run's folder (its checkpoint dir: plan.toml, metrics.jsonl, profile.json, trace.json)");
  IslandsQuery islands;  // --island-plan: islands, the page's plan island 0's
  CLI::Option* islands_opt = AddIslandsFlags(app, &islands);
  plan_opt->excludes(job_opt)->excludes(run_opt)->excludes(islands_opt);
  islands_opt->excludes(job_opt)->excludes(run_opt);
  job_opt->excludes(run_opt);
  app.add_option("--cluster", cluster_ref, "the cluster (default: the plan's)");
  app.add_option("--model", model_ref, "the model (default: the plan's)");
  app.add_option("--profile", profile_path,
                 "measured layer times (a motley profile or Zorse's model_latencies.json; default: the run's "
                 "profile.json, else the roofline)");
  app.add_flag("--no-compare", no_compare, "skip planning every strategy for the comparison");
  app.add_option("-o,--output", out_path, "the page (default: report.html, or DIR/report.html for --run)");
  PlanQuery rent;  // --offers: what could be rented for the page's model and batch
  AddRentFlags(app, &rent);
  if (auto rc = ParseArgs(app, args)) return *rc;
  auto fail = [](const Status& s) {
    fmt::print(stderr, "{}\n", s.message());
    return kExitFailure;
  };
  if (!islands.plan_paths.empty()) {
    plan_path = islands.plan_paths.front();
    no_compare = true;  // motley plan --compare lists islands beside the synchronous plans
  }
  if (plan_path.empty() && job_ref.empty() && run_dir.empty()) {
    fmt::print(stderr,
               "motley report: give --plan FILE, --island-plan FILE for each island, --job FILE|default or "
               "--run DIR\n");
    return kExitUsage;
  }

  // The plan, what it runs on, and the profile.
  PlanInputs in;
  std::string subject;
  std::optional<RunRecord> run;
  if (!run_dir.empty()) {
    if (Status st = LoadRunFolder(run_dir, cluster_ref, model_ref, &in, &run, &profile_path); !st.ok())
      return fail(st);
    subject = "run " + run_dir;
  } else if (!plan_path.empty()) {
    Result<PlanInputs> loaded = LoadPlanInputs(plan_path, cluster_ref, model_ref);
    if (!loaded.ok()) return fail(loaded.status());
    in = std::move(*loaded);
    subject = islands.plan_paths.empty() ? "plan " + plan_path
                                         : fmt::format("islands {}", fmt::join(islands.plan_paths, ", "));
  }
  std::optional<Profile> profile;
  if (!profile_path.empty()) {
    Result<Profile> p = LoadAnyProfile(profile_path);
    if (!p.ok()) return fail(p.status());
    profile = std::move(*p);
  }
  if (!job_ref.empty()) {
    if (Status st = PlanTheJob(job_ref, &in, &profile); !st.ok()) return fail(st);
    subject = "job " + job_ref;
  }

  // One step, simulated with its trace.
  const CostModel costs(in.cluster, in.model, profile ? &*profile : nullptr, in.plan.seq_len,
                        in.plan.precision, in.plan.activation_checkpointing);
  FillDefaultRouting(&in.plan, in.cluster, in.model);
  Result<Schedule> schedule = LowerPlan(in.plan, in.cluster, in.model);
  if (!schedule.ok()) return fail(schedule.status());
  if (run) run->schedule_hash = ScheduleHash(*schedule);
  SimConfig config;
  config.record_trace = true;
  Result<SimResult> sim = Simulate(*schedule, in.cluster, costs, config);
  if (!sim.ok()) return fail(sim.status());

  // Every strategy for the same model, cluster and batch.
  std::vector<CompareRow> compare;
  if (!no_compare) compare = CompareEveryStrategy(in, costs, profile ? &*profile : nullptr, *schedule, *sim);

  ReportInputs page;
  page.subject = subject;
  page.cluster = &in.cluster;
  page.model = &in.model;
  page.plan = &in.plan;
  page.schedule = &*schedule;
  page.sim = &*sim;
  page.compare = std::move(compare);
  page.run = run ? &*run : nullptr;
  IslandsAnswer islands_answer;
  SimResult round_sim;
  if (!islands.plan_paths.empty()) {
    islands.cluster = cluster_ref;
    islands.model = model_ref;
    islands.profile = profile_path;
    Result<IslandsView> view = IslandsViewOf(islands, in.cluster, costs, &islands_answer, &round_sim);
    if (!view.ok()) return fail(view.status());
    page.islands = std::move(*view);
  }
  if (!rent.offers.empty()) {
    fmt::print("choosing what to rent from {} for the plan's model and batch...\n", rent.offers);
    Result<RentView> view = RentViewOf(rent, plan_path, in, *schedule, *sim);
    if (!view.ok()) return fail(view.status());
    page.rent = std::move(*view);
  }
  if (out_path.empty())
    out_path = run_dir.empty() ? "report.html" : (fs::path(run_dir) / "report.html").string();
  if (Status s = AtomicWriteFile(out_path, ReportHtml(page)); !s.ok()) return fail(s);
  fmt::print("report: {} ({}; open it in a browser, nothing is fetched)\n", out_path, subject);
  return kExitOk;
}

}  // namespace motley::cli
