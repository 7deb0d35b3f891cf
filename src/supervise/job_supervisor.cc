#include "supervise/job_supervisor.h"

#include <cmath>
#include <filesystem>
#include <numeric>
#include <optional>
#include <utility>

#include <fmt/format.h>
#include <fmt/ranges.h>

#include "api/plan_inputs.h"
#include "core/exit_codes.h"
#include "core/file_io.h"
#include "core/metrics_file.h"
#include "core/units.h"
#include "plan/baselines.h"
#include "plan/plan_io.h"
#include "plan/plan_matches_job.h"
#include "profile/cluster_profiler.h"
#include "profile/device_probe.h"
#include "runtime/device/rank_device.h"
#include "runtime/train/checkpoint.h"
#include "sim/plan_evaluator.h"
#include "sim/profile_calibration.h"
#include "sim/routing_costs.h"
#include "supervise/escalating_launch.h"
#include "supervise/launcher.h"
#include "supervise/link_measurement.h"
#include "supervise/plan_hosts.h"
#include "supervise/run_metrics.h"

namespace motley {
namespace fs = std::filesystem;
namespace {

// A reference the ranks can open from any directory: a path made absolute (relative to the job
// file), a preset or built-in name as it is.
std::string Resolvable(const std::string& ref, const std::string& job_file) {
  if (ref.find('/') == std::string::npos && !ref.ends_with(".toml") && !ref.ends_with(".json")) return ref;
  return fs::absolute(fs::path(job_file).parent_path() / ref).string();
}

// The mean step time in a metrics file's lines from byte `from` on, without the first two steps
// (warm-up); 0 when there are none.
double MeanStepSeconds(const std::string& path, std::streamoff from) {
  Result<std::vector<MetricsLine>> lines = ReadMetricsFile(path, from);
  if (!lines.ok()) return 0;
  double sum = 0;
  int n = 0;
  for (const MetricsLine& m : *lines) {
    if (!m.event.empty() || !m.step_time_s || !std::isfinite(*m.step_time_s) || m.step.value_or(0) <= 2)
      continue;
    sum += *m.step_time_s;
    ++n;
  }
  return n > 0 ? sum / n : 0;
}

std::streamoff FileSize(const std::string& path) {
  std::error_code ec;
  const auto size = fs::file_size(path, ec);
  return ec ? 0 : static_cast<std::streamoff>(size);
}

// Where the supervisor keeps what the ranks read (and a person can inspect): beside the checkpoints.
struct JobFiles {
  fs::path dir;
  std::string plan, profile, metrics;
  std::string self;  // this executable, which every rank runs
};

JobFiles FilesFor(const JobSpec& job, const TrainOptions& options) {
  JobFiles f;
  f.dir = fs::absolute(job.checkpoint.dir);
  f.plan = (f.dir / "plan.toml").string();
  f.profile = (f.dir / "profile.json").string();
  f.metrics = options.metrics_path.empty() ? (fs::path(job.checkpoint.dir) / "metrics.jsonl").string()
                                           : options.metrics_path;
  f.self = fs::read_symlink("/proc/self/exe").string();
  return f;
}

Status WritePlanAndProfile(const JobFiles& files, const Plan& plan, const Profile& profile) {
  std::error_code ec;
  fs::create_directories(files.dir, ec);
  if (Status s = AtomicWriteFile(files.plan, PlanToToml(plan)); !s.ok()) return s;
  return AtomicWriteFile(files.profile, ProfileToJson(profile).dump(1) + "\n");
}

// 1. The profile: given (--profile), the job's [plan] profile, or measured now — the device types
// and, for a local emulated cluster (or across hosts, --hosts), its links the way training will use them.
Result<Profile> ProfileForJob(const JobSpec& job, const TrainOptions& options) {
  if (!options.planned.profile_path.empty()) return LoadAnyProfile(options.planned.profile_path);
  if (!job.plan.profile.empty()) return LoadAnyProfile(Resolvable(job.plan.profile, job.file));
  const TrainingConfig& tc = job.training;
  ClusterProfileOptions po;
  po.layers.max_microbatch_cap = tc.global_batch_sequences;  // nothing larger is ever planned
  std::erase_if(po.layers.microbatches, [&](int64_t m) { return m > tc.global_batch_sequences; });
  po.progress = [](const std::string& s) {
    fmt::print("  profile: {}\n", s);
    std::fflush(stdout);
  };
  Result<Profile> profile = ProfileCluster(job.cluster, job.model, tc.seq_len, tc.precision, po);
  const bool across_hosts = options.supervisor.across_hosts;
  if (!profile.ok() || !(job.cluster.emulated() || across_hosts) || job.cluster.num_devices() < 2)
    return profile;
  std::vector<LaunchHost> hosts;  // on the hosts themselves: the links between them are real
  if (across_hosts) {
    std::vector<int> devices(static_cast<size_t>(job.cluster.num_devices()));
    std::iota(devices.begin(), devices.end(), 0);
    MOTLEY_ASSIGN_OR_RETURN(PlanHosts on, HostsOfDevices(devices, job.cluster));
    hosts = std::move(on.hosts);
  }
  Result<std::vector<ProfileLink>> links = MeasureLinks(
      Resolvable(job.cluster_ref, job.file), job.cluster.num_devices(),
      fs::absolute(fs::path(job.checkpoint.dir) / "links").string(), hosts, options.supervisor.remote);
  if (!links.ok()) return links.status();
  profile->links = *links;
  for (const ProfileLink& l : profile->links)
    fmt::print("  profile: link {}: {}, {:.0f} us, collectives +{:.0f} us a call\n",
               l.a == l.b ? l.a + " (within)" : l.a + " <-> " + l.b, FormatBandwidth(l.bandwidth_bytes_per_s),
               l.latency_s * 1e6, l.collective_overhead_s * 1e6);
  return profile;
}

// 2. The plan by the job's strategy, and the even split beside it (for the comparison and the
// baseline), both under `profile`.
struct JobPlans {
  StrategyOutcome chosen, even;
};

Result<JobPlans> PlanForJob(const JobSpec& job, const Profile& profile, const PlanRequest& request) {
  const TrainingConfig& tc = job.training;
  CostModel costs(job.cluster, job.model, &profile, tc.seq_len, tc.precision, tc.activation_checkpointing);
  const PlanEvaluator evaluate = SimulationEvaluator(job.cluster, job.model, costs);
  JobPlans p{PlanWithStrategy(job.plan.strategy, job.cluster, job.model, costs, request, evaluate),
             PlanWithStrategy("deepspeed-even", job.cluster, job.model, costs, request, evaluate)};
  if (!p.chosen.status.ok()) return p.chosen.status;
  for (StrategyOutcome* o : {&p.chosen, &p.even}) {
    o->plan.model = Resolvable(job.model_ref, job.file);
    o->plan.cluster = Resolvable(job.cluster_ref, job.file);
  }
  FillZorseRouting(&p.chosen.plan, costs);
  return p;
}

void PrintPlans(const JobPlans& p, const TrainingConfig& tc) {
  const Plan& plan = p.chosen.plan;
  fmt::print("plan: {} — {} group(s), ZeRO-{}, {} schedule{}{}\n", p.chosen.strategy, plan.groups.size(),
             plan.zero_stage, PipelineScheduleName(plan.schedule),
             plan.offload_params ? ", parameter offload" : "",
             plan.offload_activations ? ", activation offload" : "");
  PrintPlan(plan);
  if (!p.chosen.explain.empty()) fmt::print("  why: {}\n", p.chosen.explain);
  fmt::print("predicted step {} ({:.0f} tokens/s)", FormatDuration(p.chosen.evaluation.step_time_s),
             static_cast<double>(tc.global_batch_tokens()) / p.chosen.evaluation.step_time_s);
  if (p.even.status.ok() && p.even.evaluation.fits_memory)
    fmt::print("; the even split: {} — {:.2f}x", FormatDuration(p.even.evaluation.step_time_s),
               p.even.evaluation.step_time_s / p.chosen.evaluation.step_time_s);
  fmt::print("\n");
  std::fflush(stdout);
}

// A plan given on the command line (--plan, read and checked against the job before measuring),
// launched as it is — unless the simulator predicts it runs out of memory and the command did not
// insist.
int LaunchGivenPlan(const JobSpec& job, const TrainOptions& options, const std::vector<std::string>& args,
                    const JobFiles& files, const Profile& profile, const PlanRequest& request,
                    const Plan& given) {
  auto fail = [](const Status& s) {
    fmt::print(stderr, "motley train: {}\n", s.message());
    return kExitFailure;
  };
  const TrainingConfig& tc = job.training;
  CostModel costs(job.cluster, job.model, &profile, tc.seq_len, tc.precision, tc.activation_checkpointing);
  Result<PlanEvaluation> predicted = SimulationEvaluator(job.cluster, job.model, costs)(given, {});
  if (!predicted.ok()) return fail(predicted.status());
  if (!predicted->fits_memory && !options.supervisor.even_if_predicted_oom)
    return fail(Status::OutOfMemory(
        fmt::format("{}: the simulator predicts this plan runs out of memory ({}); not started. Plan again "
                    "(motley plan, or "
                    "motley train {} without --plan), or pass --even-if-predicted-oom to try it anyway",
                    options.planned.plan_path, predicted->oom, job.file.empty() ? "JOB" : job.file)));
  fmt::print("plan: {} (given), predicted step {}{}\n", options.planned.plan_path,
             FormatDuration(predicted->step_time_s),
             predicted->fits_memory ? "" : fmt::format(" — predicted not to fit: {}", predicted->oom));
  PrintPlan(given);
  // The ranks read a copy: a more frugal plan replaces it, never the file given.
  if (Status s = WritePlanAndProfile(files, given, profile); !s.ok()) return fail(s);
  std::fflush(stdout);
  SupervisedRun run{job,           options,       args,    files.self, files.plan,
                    files.profile, files.metrics, profile, request,    job.plan.strategy};
  return LaunchEscalating(run, given);
}

// 4. The baseline, measured: the even split trained for options.supervisor.baseline_steps; then online
// profiling — the profile scaled to what the devices computed all running together, and the job
// planned again with it (`profile` and `plans` take the result, and the files are rewritten).
// Returns the even split's mean step.
Result<double> MeasureBaseline(const JobSpec& job, const std::string& job_arg, const TrainOptions& options,
                               const JobFiles& files, const PlanRequest& request, Profile* profile,
                               JobPlans* plans) {
  const std::string even_path = (files.dir / "baseline-even-split.toml").string();
  const std::string even_metrics = (files.dir / "baseline-even-split.jsonl").string();
  if (Status s = AtomicWriteFile(even_path, PlanToToml(plans->even.plan)); !s.ok()) return s;
  fmt::print("\nthe even split first, for {} steps (to measure the speed-up):\n",
             options.supervisor.baseline_steps);
  std::fflush(stdout);
  LaunchOptions base;
  base.nproc = plans->even.plan.num_devices();
  base.command = {files.self,
                  "train",
                  job_arg,
                  "--plan",
                  even_path,
                  "--steps",
                  std::to_string(options.supervisor.baseline_steps),
                  "--metrics",
                  even_metrics,
                  "--metrics-append",
                  "--no-checkpoint",
                  "--no-validation"};
  if (options.supervisor.across_hosts)
    MOTLEY_RETURN_IF_ERROR(PlaceOnHosts(plans->even.plan, job.cluster, options.supervisor.remote, &base));
  const std::streamoff from = FileSize(even_metrics);
  if (Launch(base) != 0) return Status::Internal("the even-split baseline failed (see above)");
  const double baseline_s = MeanStepSeconds(even_metrics, from);

  Result<std::vector<double>> measured = MedianRankCompute(even_metrics, 3, from);
  Profile calibrated = *profile;
  Result<std::vector<TypeCalibration>> c =
      measured.ok() ? CalibrateToRun(&calibrated, plans->even.plan, job.cluster, job.model, *measured)
                    : Result<std::vector<TypeCalibration>>(measured.status());
  if (!c.ok()) {
    fmt::print("\nprofile not calibrated: {}\n", c.status().message());
    return baseline_s;
  }
  std::vector<std::string> scales;
  for (const TypeCalibration& k : *c) scales.push_back(fmt::format("{} x{:.2f}", k.device_type, k.scale));
  fmt::print("\nprofile calibrated on the even split's run (compute {}); planning again:\n",
             fmt::join(scales, ", "));
  *profile = std::move(calibrated);
  Result<JobPlans> again = PlanForJob(job, *profile, request);
  if (!again.ok() || !again->even.status.ok()) return baseline_s;
  if (again->chosen.strategy != plans->chosen.strategy ||
      PlanToToml(again->chosen.plan) != PlanToToml(plans->chosen.plan)) {
    fmt::print("plan: {} (changed)\n", again->chosen.strategy);
    PrintPlan(again->chosen.plan);
  }
  *plans = std::move(*again);
  fmt::print("predicted step {}; the even split: {} — {:.2f}x\n",
             FormatDuration(plans->chosen.evaluation.step_time_s),
             FormatDuration(plans->even.evaluation.step_time_s),
             plans->even.evaluation.step_time_s / plans->chosen.evaluation.step_time_s);
  if (Status s = WritePlanAndProfile(files, plans->chosen.plan, *profile); !s.ok()) return s;
  return baseline_s;
}

}  // namespace

int SuperviseJob(const std::string& job_arg, const JobSpec& job_as_given, const TrainOptions& options,
                 const std::vector<std::string>& args) {
  JobSpec job = job_as_given;  // its cluster takes the reserves the profile measured
  auto fail = [](const Status& s) {
    fmt::print(stderr, "motley train: {}\n", s.message());
    return kExitFailure;
  };
  // Before measuring anything: the folder is this run's (with --overwrite, another run's checkpoints
  // and metrics go now; rank 0 claims it again when it starts).
  if (options.checkpoint_at_end) {
    Result<std::unique_ptr<RunDirLock>> lock =
        RunDirLock::Acquire(job.checkpoint.dir);  // not while a run writes
    if (!lock.ok()) return fail(lock.status());
    if (Status s = ClaimRunDir(job.checkpoint.dir, !options.resume.empty(), options.overwrite, true); !s.ok())
      return fail(s);
  }
  const LocalDevices here = ProbeLocalDevices();
  const bool on_cpu = options.device == "cpu" || here.num_cuda_devices == 0;
  if (options.supervisor.across_hosts) {
    if (Status s = CheckEveryNodeNamesItsHost(job.cluster); !s.ok()) return fail(s);
  } else if (!on_cpu) {
    if (Status s = CheckClusterFitsThisHost(job.cluster, here.num_cuda_devices, job_arg); !s.ok())
      return fail(s);
  }
  std::optional<Plan> given;  // --plan: a plan for another batch is said before measuring
  if (!options.planned.plan_path.empty()) {
    Result<Plan> read = LoadPlanFile(options.planned.plan_path);
    if (!read.ok()) return fail(read.status());
    if (Status s = CheckPlanMatchesJob(*read, job, options.planned.plan_path); !s.ok()) return fail(s);
    given = std::move(*read);
  }
  fmt::print("{} devices in {}: measure, plan, then launch one rank per device{}\n",
             job.cluster.num_devices(), job.cluster.name,
             !job.cluster.emulated() && on_cpu ? " (CPU ranks stand in for them)" : "");

  Result<Profile> profile = ProfileForJob(job, options);  // 1
  if (!profile.ok()) return fail(profile.status());
  // A GPU's measured reserve replaces the catalog's default (not the cluster file's).
  if (Status s = ApplyMeasuredReserves(*profile, "the profile", &job.cluster); !s.ok()) return fail(s);
  const JobFiles files = FilesFor(job, options);
  const PlanRequest request = PlanRequestForJob(job);
  if (given) return LaunchGivenPlan(job, options, args, files, *profile, request, *given);

  Result<JobPlans> plans = PlanForJob(job, *profile, request);  // 2
  if (!plans.ok()) return fail(plans.status());
  PrintPlans(*plans, job.training);
  if (Status s = WritePlanAndProfile(files, plans->chosen.plan, *profile); !s.ok()) return fail(s);  // 3
  fmt::print("plan: {}\n", files.plan);

  double baseline_s = 0;  // 4
  if (options.supervisor.baseline_steps > 0 && plans->even.status.ok() &&
      plans->even.evaluation.fits_memory) {
    Result<double> measured = MeasureBaseline(job, job_arg, options, files, request, &*profile, &*plans);
    if (!measured.ok()) return fail(measured.status());
    baseline_s = *measured;
    fmt::print("\nnow the plan:\n");
    std::fflush(stdout);
  }

  const std::streamoff from = FileSize(files.metrics);  // 5
  SupervisedRun run{job,           options,       args,     files.self, files.plan,
                    files.profile, files.metrics, *profile, request,    job.plan.strategy};
  const int rc = LaunchEscalating(run, plans->chosen.plan);
  if (rc == 0 && baseline_s > 0) {
    const double plan_s = MeanStepSeconds(files.metrics, from);
    if (plan_s > 0)
      fmt::print(
          "measured: {} {:.0f} ms a step, the even split {:.0f} ms — {:.2f}x faster (predicted {:.2f}x)\n",
          plans->chosen.strategy, plan_s * 1e3, baseline_s * 1e3, baseline_s / plan_s,
          plans->even.evaluation.step_time_s / plans->chosen.evaluation.step_time_s);
  }
  return rc;
}

}  // namespace motley
