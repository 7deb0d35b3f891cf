// motley demo: the main job on the built-in default (examples/jobs/default.toml, embedded).
#include <fmt/format.h>

#include "cli/args.h"
#include "cli/command.h"
#include "cli/describe.h"
#include "core/builtin_files.h"
#include "core/job_parse.h"
#include "core/units.h"

namespace motley::cli {

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

  if (json) {
    nlohmann::json out = {{"job", file->path},
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
  fmt::print(
      "\nThe job is valid. This build of motley describes it; planning, simulation and "
      "training are not in this build yet.\n");
  return kExitOk;
}

}  // namespace motley::cli
