// motley demo: the main job on the built-in default (examples/jobs/default.toml, embedded).
#include <fmt/format.h>

#include <algorithm>

#include "cli/args.h"
#include "cli/command.h"
#include "cli/describe.h"
#include "cli/table_printer.h"
#include "core/builtin_files.h"
#include "core/job_parse.h"
#include "core/units.h"
#include "plan/lower.h"
#include "plan/plan_io.h"
#include "sim/routing_costs.h"
#include "sim/simulator.h"

namespace motley::cli {
namespace {

struct PlanOutcome {
  std::string name;
  std::string summary;
  SimResult result;
};

// The built-in example plans written for this job's model and cluster, simulated.
Result<std::vector<PlanOutcome>> SimulateExamplePlans(const JobSpec& job) {
  std::vector<PlanOutcome> out;
  for (const auto& f : BuiltinFiles()) {
    if (f.kind != "plans") continue;
    MOTLEY_ASSIGN_OR_RETURN(Plan plan, ParsePlanToml(f.text, std::string(f.path)));
    if (plan.model != job.model_ref || plan.cluster != job.cluster_ref) continue;
    MOTLEY_RETURN_IF_ERROR(ValidatePlan(plan, job.cluster, job.model).WithPrefix(std::string(f.path) + ": "));
    CostModel costs(job.cluster, job.model, nullptr, plan.seq_len, plan.precision, plan.activation_checkpointing);
    FillZorseRouting(&plan, costs);
    MOTLEY_ASSIGN_OR_RETURN(Schedule schedule, LowerPlan(plan, job.cluster, job.model));
    MOTLEY_ASSIGN_OR_RETURN(SimResult r, Simulate(schedule, job.cluster, costs));
    const bool data_parallel = !plan.is_pipeline() && plan.schedule != PipelineSchedule::kInterleaved;
    std::string summary = fmt::format(
        "{}, ZeRO-{}{}",
        data_parallel ? std::string("data parallel")
                      : fmt::format("{} groups, {}", plan.groups.size(), PipelineScheduleName(plan.schedule)),
        plan.zero_stage, plan.offload_params ? ", offload" : "");
    out.push_back({std::string(f.name), summary, std::move(r)});
  }
  std::sort(out.begin(), out.end(),
            [](const PlanOutcome& a, const PlanOutcome& b) { return a.result.step_time_s < b.result.step_time_s; });
  return out;
}

}  // namespace

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
  const double peak = t.precision == Precision::kFp32 ? [&] {
    double sum = 0;
    for (int d = 0; d < job->cluster.num_devices(); ++d) sum += job->cluster.spec(d).peak_fp32_flops;
    return sum;
  }() : job->cluster.total_peak_fp16_flops();

  Result<std::vector<PlanOutcome>> plans = SimulateExamplePlans(*job);
  if (!plans.ok()) {
    fmt::print(stderr, "{}\n", plans.status().message());
    return kExitFailure;
  }
  double even_s = 0;
  for (const auto& p : *plans)
    if (p.name == "local-even-dp") even_s = p.result.step_time_s;

  if (json) {
    nlohmann::json sims = nlohmann::json::array();
    for (const auto& p : *plans)
      sims.push_back({{"plan", p.name},
                      {"step_time_s", p.result.step_time_s},
                      {"tokens_per_s", p.result.tokens_per_s},
                      {"hfu", p.result.hfu},
                      {"fits_memory", p.result.fits_memory},
                      {"speedup_over_even_split", even_s > 0 ? even_s / p.result.step_time_s : 0}});
    nlohmann::json out = {{"job", file->path},
                          {"simulated_plans", sims},
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
  fmt::print("\nSimulated step of the example plans for this job (examples/plans/, roofline compute model):\n");
  TablePrinter table({"plan", "shape", "step", "tokens/s", "HFU", "memory", "vs even split"});
  table.AlignRight({2, 3, 4, 6});
  for (const auto& p : *plans) {
    table.AddRow({p.name, p.summary, FormatDuration(p.result.step_time_s),
                  fmt::format("{:.0f}", p.result.tokens_per_s), fmt::format("{:.1f}%", 100 * p.result.hfu),
                  p.result.fits_memory ? "fits" : "OOM",
                  even_s > 0 ? fmt::format("{:.2f}x", even_s / p.result.step_time_s) : "-"});
  }
  fmt::print("{}", table.ToString());
  fmt::print("\nThe job is valid. Next in motley: the planner chooses the plan itself and the runtime trains "
             "it; this build simulates hand-written plans.\n");
  return kExitOk;
}

}  // namespace motley::cli
