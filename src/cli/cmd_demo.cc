// motley demo: the main job on the built-in default (examples/jobs/default.toml, embedded).
#include <fmt/format.h>

#include <algorithm>

#include "api/describe.h"
#include "api/table_printer.h"
#include "cli/args.h"
#include "cli/command.h"
#include "core/builtin_files.h"
#include "core/job_parse.h"
#include "core/units.h"
#include "plan/baselines.h"
#include "sim/plan_evaluator.h"

namespace motley::cli {
namespace {}  // namespace

int RunDemo(const std::vector<std::string>& args) {
  CLI::App app(
      "Run motley's main job on the built-in default: an emulated cluster of "
      "4 local devices (two fast, two 3x slower with half the memory, two "
      "nodes joined by a slow link) and a small Llama on the built-in corpus.",
      "motley demo");
  bool json = false;
  app.add_flag("--json", json, "print the job's figures as JSON");
  if (auto rc = ParseArgs(app, args)) return *rc;

  const BuiltinFile* file = FindBuiltinFile("jobs", "default");
  if (file == nullptr) {
    fmt::print(stderr, "motley demo: this binary has no built-in default job (rebuild motley)\n");
    return kExitFailure;
  }
  Result<JobSpec> job = ParseJobToml(file->text, std::string(file->path));
  if (!job.ok()) {
    fmt::print(stderr, "{}\n", job.status().message());
    return kExitFailure;
  }
  const TrainingConfig& t = job->training;
  const double step_flops =
      TrainFlopsPerToken(job->model, t.seq_len, t.activation_checkpointing) * t.global_batch_tokens();
  double peak = 0;
  for (int d = 0; d < job->cluster.num_devices(); ++d) peak += PeakFlops(job->cluster.spec(d), t.precision);

  // Plan the job with every strategy on the same cost models, each plan judged by the simulator.
  CostModel costs(job->cluster, job->model, nullptr, t.seq_len, t.precision, t.activation_checkpointing);
  const PlanEvaluator evaluate = SimulationEvaluator(job->cluster, job->model, costs);
  const PlanRequest request = PlanRequestForJob(*job);
  std::vector<StrategyOutcome> plans = PlanEveryStrategy(job->cluster, job->model, costs, request, evaluate);
  const StrategyOutcome* best = nullptr;
  double even_s = 0;
  for (const auto& p : plans) {
    if (p.strategy == "deepspeed-even" && p.status.ok()) even_s = p.evaluation.step_time_s;
    if (p.status.ok() && (best == nullptr || p.evaluation.step_time_s < best->evaluation.step_time_s))
      best = &p;
  }
  if (best == nullptr) {
    fmt::print(stderr, "motley demo: no strategy found a plan for the default job\n");
    return kExitFailure;
  }

  if (json) {
    nlohmann::json sims = nlohmann::json::array();
    for (const auto& p : plans) {
      if (!p.status.ok()) continue;
      sims.push_back({{"strategy", p.strategy},
                      {"step_time_s", p.evaluation.step_time_s},
                      {"tokens_per_s", t.global_batch_tokens() / p.evaluation.step_time_s},
                      {"hfu", p.evaluation.hfu},
                      {"fits_memory", p.evaluation.fits_memory},
                      {"speedup_over_even_split", even_s > 0 ? even_s / p.evaluation.step_time_s : 0}});
    }
    nlohmann::json out = {{"job", file->path},
                          {"simulated_plans", sims},
                          {"chosen", best->strategy},
                          {"speedup_over_even_split", even_s > 0 ? even_s / best->evaluation.step_time_s : 0},
                          {"model", DescribeModelJson(job->model, t.seq_len, t.precision)},
                          {"cluster", DescribeClusterJson(job->cluster)},
                          {"steps", t.steps},
                          {"global_batch_tokens", t.global_batch_tokens()},
                          {"flops_per_step", step_flops},
                          {"ideal_step_time_s", step_flops / peak}};
    fmt::print("{}\n", out.dump(2));
    return kExitOk;
  }
  fmt::print("motley demo: the main job on the built-in default ({})\n\n", file->path);
  fmt::print("{}\n", DescribeClusterText(job->cluster));
  fmt::print("{}\n", DescribeModelText(job->model, t.seq_len, t.precision));
  fmt::print("job: {} steps x {} sequences of {} tokens ({} tokens per step) in {}, strategy {}\n", t.steps,
             t.global_batch_sequences, t.seq_len, t.global_batch_tokens(), PrecisionName(t.precision),
             job->plan.strategy);
  fmt::print("  {:.3g} FLOPs per step; at 100% of the cluster's {} peak a step would take {}\n", step_flops,
             FormatFlops(peak), FormatDuration(step_flops / peak));
  fmt::print("\nPlanned with every strategy, each plan simulated (roofline compute model):\n");
  TablePrinter table({"strategy", "step", "tokens/s", "HFU", "memory", "vs even split", "plan"});
  table.AlignRight({1, 2, 3, 5});
  for (const auto& p : plans) {
    if (!p.status.ok()) {
      table.AddRow({p.strategy, "-", "-", "-", "no plan", "-", p.status.message().substr(0, 60)});
      continue;
    }
    const Plan& plan = p.plan;
    const bool data_parallel = !plan.is_pipeline() && plan.schedule != PipelineSchedule::kInterleaved;
    table.AddRow({p.strategy, FormatDuration(p.evaluation.step_time_s),
                  fmt::format("{:.0f}", t.global_batch_tokens() / p.evaluation.step_time_s),
                  fmt::format("{:.1f}%", 100 * p.evaluation.hfu), p.evaluation.fits_memory ? "fits" : "OOM",
                  even_s > 0 ? fmt::format("{:.2f}x", even_s / p.evaluation.step_time_s) : "-",
                  fmt::format("{}, ZeRO-{}{}",
                              data_parallel ? std::string("data parallel")
                                            : fmt::format("{} group{}, {}", plan.groups.size(),
                                                          plan.groups.size() == 1 ? "" : "s",
                                                          PipelineScheduleName(plan.schedule)),
                              plan.zero_stage, plan.offload_params ? ", offload" : "")});
  }
  fmt::print("{}", table.ToString());
  fmt::print("\nchosen (auto): {} — {}\n", best->strategy, best->explain);
  if (even_s > 0)
    fmt::print("predicted speed-up over the even split: {:.2f}x ({} vs {} a step)\n",
               even_s / best->evaluation.step_time_s, FormatDuration(best->evaluation.step_time_s),
               FormatDuration(even_s));
  fmt::print(
      "\nTrain this job's model in one process: motley train default (executing the plan across the "
      "cluster's ranks is next).\n");
  return kExitOk;
}

}  // namespace motley::cli
