#include "cli/planned_train.h"

#include <cmath>

#include "core/metrics_file.h"

#include <algorithm>
#include <cstdint>
#include <filesystem>
#include <fstream>
#include <set>

#include <nlohmann/json.hpp>

#include <fmt/format.h>

#include "cli/command.h"
#include "cli/escalation.h"
#include "cli/launcher.h"
#include "cli/plan_inputs.h"
#include "cli/run_metrics.h"
#include "core/file_io.h"
#include "core/units.h"
#include "plan/baselines.h"
#include "plan/plan_io.h"
#include "cli/link_measurement.h"
#include "profile/cluster_profiler.h"
#include "profile/device_probe.h"
#include "runtime/device/rank_device.h"
#include "runtime/train/checkpoint.h"
#include "sim/plan_evaluator.h"
#include "sim/profile_calibration.h"
#include "sim/routing_costs.h"

namespace motley::cli {
namespace fs = std::filesystem;
namespace {

// What a plan does, in a few lines.
void PrintPlan(const Plan& plan) {
  for (size_t g = 0; g < plan.groups.size(); ++g) {
    const GroupPlan& group = plan.groups[g];
    std::vector<std::string> devices, layers;
    for (const auto& d : group.devices)
      devices.push_back(fmt::format("{}:{}x{}", d.device, d.num_microbatches, d.microbatch_size));
    for (const auto& r : group.ministages) layers.push_back(fmt::format("{}-{}", r.begin, r.end - 1));
    fmt::print("  group {}: devices {} (device:microbatches x sequences), layers {}\n", g, fmt::join(devices, " "),
               fmt::join(layers, " | "));
  }
}

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
    if (!m.event.empty() || !m.step_time_s || !std::isfinite(*m.step_time_s) || m.step.value_or(0) <= 2) continue;
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

// `args` without `--name VALUE` and `--name=VALUE`.
std::vector<std::string> WithoutOption(const std::vector<std::string>& args, const std::string& name) {
  std::vector<std::string> out;
  for (size_t i = 0; i < args.size(); ++i) {
    if (args[i] == name) {
      ++i;  // and its value
      continue;
    }
    if (args[i].rfind(name + "=", 0) == 0) continue;
    out.push_back(args[i]);
  }
  return out;
}

// The checkpoint this run has written since `since` (its `latest`), or "".
std::string CheckpointWrittenSince(const std::string& run_dir, fs::file_time_type since) {
  std::error_code ec;
  const fs::path latest = fs::path(run_dir) / "latest";
  if (!fs::exists(latest, ec) || fs::last_write_time(latest, ec) < since || ec) return "";
  Result<std::string> dir = ResolveCheckpointDir(run_dir);
  return dir.ok() ? *dir : "";
}

std::string Steps(int64_t first, int64_t last) {
  return first >= last ? fmt::format("step {} runs", last) : fmt::format("steps {}..{} run", first, last);
}

std::string Indented(std::string lines) {
  for (size_t at = lines.find('\n'); at != std::string::npos; at = lines.find('\n', at + 3)) lines.replace(at, 1, "\n  ");
  return lines;
}


// The cluster device each rank of `plan` runs on (ranks in plan order, as lowering numbers them).
std::vector<int> RankDevices(const Plan& plan) {
  std::vector<int> out;
  for (const GroupPlan& g : plan.groups)
    for (const DevicePlan& d : g.devices) out.push_back(d.device);
  return out;
}

// Where a restarted run continues: the newest checkpoint this supervised run wrote, else where it
// began. Sets `args`' --resume and returns what to say.
std::string ResumePoint(const SupervisedRun& run, fs::file_time_type started, int64_t failed_step,
                        std::vector<std::string>* args) {
  const std::string checkpoint = CheckpointWrittenSince(run.job.checkpoint.dir, started);
  if (!checkpoint.empty()) {
    *args = WithoutOption(*args, "--resume");
    args->insert(args->end(), {"--resume", checkpoint});
    const Result<int64_t> at = CheckpointStep(checkpoint);
    const int64_t step = at.ok() ? *at : -1;
    if (failed_step <= 0) return fmt::format("from the checkpoint of step {} ({})", step, checkpoint);
    return fmt::format("from the checkpoint of step {} ({}): {} again from the same weights and data", step, checkpoint,
                       Steps(step + 1, failed_step));
  }
  if (!run.options.resume.empty()) return fmt::format("from {} again (no checkpoint since)", run.options.resume);
  if (failed_step <= 0) return "from the start (no checkpoint since)";
  return fmt::format("from the start (no checkpoint since): {} again from the same seed and data", Steps(1, failed_step));
}

// A lost node: `plan` again on the devices left, after those of `lost_nodes`.
Result<StrategyOutcome> PlanWithout(const SupervisedRun& run, const Plan& plan, const std::set<int>& lost_nodes) {
  const JobSpec& job = run.job;
  PlanRequest request = run.request;
  request.devices.clear();
  for (int d = 0; d < job.cluster.num_devices(); ++d)
    if (!lost_nodes.contains(job.cluster.devices[d].node)) request.devices.push_back(d);
  if (request.devices.empty()) return Status::Infeasible("no device is left to train on");
  const TrainingConfig& tc = job.training;
  CostModel costs(job.cluster, job.model, &run.profile, tc.seq_len, tc.precision, tc.activation_checkpointing);
  const PlanEvaluator evaluate = SimulationEvaluator(job.cluster, job.model, costs);
  StrategyOutcome o = PlanWithStrategy(run.strategy, job.cluster, job.model, costs, request, evaluate);
  if (!o.status.ok())
    return Status::Infeasible(fmt::format("no plan on the {} devices left: {}", request.devices.size(), o.status.message()));
  o.plan.model = plan.model;
  o.plan.cluster = plan.cluster;
  FillZorseRouting(&o.plan, costs);
  return o;
}

}  // namespace

int LaunchEscalating(const SupervisedRun& run, Plan plan) {
  const JobSpec& job = run.job;
  const fs::path reports = fs::path(job.checkpoint.dir) / "failures";
  const auto started = fs::file_time_type::clock::now();
  Cluster planning = job.cluster;  // gathers the memory caps the failures teach
  std::vector<std::string> args = WithoutOption(WithoutOption(run.args, "--plan"), "--profile");
  // The run's folder keeps one step's trace, for `motley report --run` to lay beside the simulated
  // step — unless the command asked for one elsewhere.
  if (std::none_of(args.begin(), args.end(), [](const std::string& a) { return a == "--trace" || a.starts_with("--trace="); }))
    args.insert(args.end(), {"--trace", (fs::path(job.checkpoint.dir) / "trace.json").string()});
  EscalationConfig config;
  std::set<int> lost_nodes;
  int restarts = 0;
  for (int attempt = 0;; ++attempt) {
    std::error_code ec;
    fs::remove_all(reports, ec);
    int failed_rank = -1;
    LaunchOptions launch;
    launch.failed_rank = &failed_rank;
    launch.nproc = plan.num_devices();
    launch.command = {run.self, "train", "--metrics-append"};  // its attempts and events share one file
    launch.command.insert(launch.command.end(), args.begin(), args.end());
    for (const std::string& a : {std::string("--plan"), run.plan_path, std::string("--profile"), run.profile_path,
                                 std::string("--failure-reports"), reports.string()})
      launch.command.push_back(a);
    const int rc = Launch(launch);
    if (rc == 0) return rc;
    const std::vector<RankFailure> failures = ReadFailureReports(reports.string());
    // A diverged run stopped as its job asked (rank 0 said why): no device is to blame.
    if (std::any_of(failures.begin(), failures.end(), [](const RankFailure& f) { return f.diverged; })) return rc;
    if (std::none_of(failures.begin(), failures.end(), [](const RankFailure& f) { return f.out_of_memory; })) {
      // A rank died: its node is lost; the others go on without it, from the newest checkpoint.
      const std::vector<int> devices = RankDevices(plan);
      if (restarts >= run.options.max_restarts || failed_rank < 0 || failed_rank >= static_cast<int>(devices.size()))
        return rc;
      ++restarts;
      const int device = devices[failed_rank];
      const int node = job.cluster.devices[device].node;
      lost_nodes.insert(node);
      Result<StrategyOutcome> next = PlanWithout(run, plan, lost_nodes);
      if (!next.ok()) {
        fmt::print(stderr, "motley train: rank {} (device {}) failed and {}\n", failed_rank, device,
                   next.status().message());
        return rc;
      }
      if (Status s = AtomicWriteFile(run.plan_path, PlanToToml(next->plan)); !s.ok()) {
        fmt::print(stderr, "motley train: {}\n", s.message());
        return kExitFailure;
      }
      // The fault injected for tests happened once: the restarted ranks do not repeat it.
      args = WithoutOption(WithoutOption(args, "--die-rank"), "--die-at-step");
      const std::string from = ResumePoint(run, started, 0, &args);
      fmt::print("\nrank {} (device {}, node {}) failed: its node is lost — restart {} of {}: {} on the {} devices "
                 "left, predicted step {}\nresuming {}\n",
                 failed_rank, device, job.cluster.nodes[node].name, restarts, run.options.max_restarts,
                 next->strategy, next->plan.num_devices(), FormatDuration(next->evaluation.step_time_s), from);
      PrintPlan(next->plan);
      fmt::print("\n");
      std::fflush(stdout);
      std::ofstream(run.metrics_path, std::ios::app)
          << nlohmann::json{{"event", "restart"}, {"failed_rank", failed_rank}, {"device", device},
                            {"lost_node", job.cluster.nodes[node].name}, {"devices", next->plan.num_devices()},
                            {"plan", run.plan_path}}.dump()
          << "\n";
      plan = std::move(next->plan);
      continue;
    }
    if (attempt >= config.max_escalations) {
      fmt::print(stderr, "motley train: still out of memory after {} more frugal plans; giving up\n", attempt);
      return rc;
    }
    // Every rank agrees on the new plan: this process makes it, and every rank starts from it.
    Result<Escalation> e = PlanMoreFrugally(plan, failures, run.strategy, run.request, job.model, run.profile, &planning);
    if (!e.ok()) {
      fmt::print(stderr, "motley train: {}\n", e.status().message());
      return kExitFailure;
    }
    const std::string failed_path =
        (fs::path(run.plan_path).parent_path() / fmt::format("plan-out-of-memory-{}.toml", attempt + 1)).string();
    for (const auto& [path, p] : {std::pair<std::string, const Plan*>{failed_path, &plan}, {run.plan_path, &e->plan}})
      if (Status s = AtomicWriteFile(path, PlanToToml(*p)); !s.ok()) {
        fmt::print(stderr, "motley train: {}\n", s.message());
        return kExitFailure;
      }
    // The same state: the checkpoint this run wrote last, or the run's start (as it began).
    int64_t failed_step = 0;
    for (const RankFailure& f : failures)
      if (f.out_of_memory) failed_step = failed_step == 0 ? f.step : std::min(failed_step, f.step);
    const std::string checkpoint = CheckpointWrittenSince(job.checkpoint.dir, started);
    const std::string from = ResumePoint(run, started, failed_step, &args);
    fmt::print("\nout of memory — {}\nthe plan, more frugal ({}; the failed one kept as {}):\n  {}\nretrying {}\n\n",
               e->why, e->strategy, failed_path, Indented(e->changes), from);
    std::fflush(stdout);
    // The metrics say so, before the replayed steps' lines (the last line of a step is its result).
    std::ofstream(run.metrics_path, std::ios::app)
        << nlohmann::json{{"event", "escalation"}, {"step", failed_step}, {"why", e->why}, {"changes", e->changes},
                          {"plan", run.plan_path}, {"resume", checkpoint}}.dump()
        << "\n";
    plan = std::move(e->plan);
  }
}

int RunPlannedTrain(const std::string& job_arg, const JobSpec& job_as_given, const TrainOptions& options,
                    const std::vector<std::string>& args) {
  JobSpec job = job_as_given;  // its cluster takes the reserves the profile measured
  auto fail = [](const Status& s) {
    fmt::print(stderr, "motley train: {}\n", s.message());
    return kExitFailure;
  };
  const TrainingConfig& tc = job.training;
  // Before measuring anything: the folder is this run's (with --overwrite, another run's checkpoints
  // and metrics go now; rank 0 claims it again when it starts).
  if (options.checkpoint_at_end) {
    Result<std::unique_ptr<RunDirLock>> lock = RunDirLock::Acquire(job.checkpoint.dir);  // not while a run writes
    if (!lock.ok()) return fail(lock.status());
    if (Status s = ClaimRunDir(job.checkpoint.dir, !options.resume.empty(), options.overwrite, true); !s.ok())
      return fail(s);
  }
  const LocalDevices here = ProbeLocalDevices();
  const bool on_cpu = options.device == "cpu" || here.num_cuda_devices == 0;
  if (!on_cpu)
    if (Status s = CheckClusterFitsThisHost(job.cluster, here.num_cuda_devices, job_arg); !s.ok()) return fail(s);
  fmt::print("{} devices in {}: measure, plan, then launch one rank per device{}\n", job.cluster.num_devices(),
             job.cluster.name, !job.cluster.emulated() && on_cpu ? " (CPU ranks stand in for them)" : "");
  // 1. The profile.
  Profile profile;
  if (!options.profile_path.empty()) {
    Result<Profile> p = LoadAnyProfile(options.profile_path);
    if (!p.ok()) return fail(p.status());
    profile = *p;
  } else if (!job.plan.profile.empty()) {
    Result<Profile> p = LoadAnyProfile(Resolvable(job.plan.profile, job.file));
    if (!p.ok()) return fail(p.status());
    profile = *p;
  } else {
    ClusterProfileOptions po;
    po.layers.max_microbatch_cap = tc.global_batch_sequences;  // nothing larger is ever planned
    std::erase_if(po.layers.microbatches, [&](int64_t m) { return m > tc.global_batch_sequences; });
    po.progress = [](const std::string& s) {
      fmt::print("  profile: {}\n", s);
      std::fflush(stdout);
    };
    Result<Profile> p = ProfileCluster(job.cluster, job.model, tc.seq_len, tc.precision, po);
    if (!p.ok()) return fail(p.status());
    profile = *p;
    // The links of a local emulated cluster, measured the way training will use them.
    if (job.cluster.emulated() && job.cluster.num_devices() > 1) {
      Result<std::vector<ProfileLink>> links =
          MeasureLinksLocally(Resolvable(job.cluster_ref, job.file), job.cluster.num_devices(),
                              (fs::path(job.checkpoint.dir) / "links").string());
      if (!links.ok()) return fail(links.status());
      profile.links = *links;
      for (const ProfileLink& l : profile.links)
        fmt::print("  profile: link {}: {}, {:.0f} us, collectives +{:.0f} us a call\n",
                   l.a == l.b ? l.a + " (within)" : l.a + " <-> " + l.b, FormatBandwidth(l.bandwidth_bytes_per_s),
                   l.latency_s * 1e6, l.collective_overhead_s * 1e6);
    }
  }
  // A GPU's measured reserve replaces the catalog's default (not the cluster file's).
  if (Status s = ApplyMeasuredReserves(profile, "the profile", &job.cluster); !s.ok()) return fail(s);
  // 2. The plan, and the even split for comparison (or the plan given, as it is).
  const PlanRequest request = PlanRequestForJob(job);
  CostModel costs(job.cluster, job.model, &profile, tc.seq_len, tc.precision, tc.activation_checkpointing);
  const PlanEvaluator evaluate = SimulationEvaluator(job.cluster, job.model, costs);
  const std::string self = fs::read_symlink("/proc/self/exe").string();
  const fs::path dir = fs::absolute(job.checkpoint.dir);
  const std::string plan_path = (dir / "plan.toml").string(), profile_path = (dir / "profile.json").string();
  const std::string metrics =
      options.metrics_path.empty() ? (fs::path(job.checkpoint.dir) / "metrics.jsonl").string() : options.metrics_path;
  if (!options.plan_path.empty()) {
    Result<Plan> given = LoadPlanFile(options.plan_path);
    if (!given.ok()) return fail(given.status());
    Result<PlanEvaluation> predicted = evaluate(*given, {});
    if (!predicted.ok()) return fail(predicted.status());
    if (!predicted->fits_memory && !options.even_if_predicted_oom)
      return fail(Status::OutOfMemory(fmt::format(
          "{}: the simulator predicts this plan runs out of memory ({}); not started. Plan again (motley plan, or "
          "motley train {} without --plan), or pass --even-if-predicted-oom to try it anyway",
          options.plan_path, predicted->oom, job.file.empty() ? "JOB" : job.file)));
    fmt::print("plan: {} (given), predicted step {}{}\n", options.plan_path, FormatDuration(predicted->step_time_s),
               predicted->fits_memory ? "" : fmt::format(" — predicted not to fit: {}", predicted->oom));
    PrintPlan(*given);
    std::error_code ec;
    fs::create_directories(dir, ec);
    // The ranks read a copy: a more frugal plan replaces it, never the file given.
    if (Status s = AtomicWriteFile(plan_path, PlanToToml(*given)); !s.ok()) return fail(s);
    if (Status s = AtomicWriteFile(profile_path, ProfileToJson(profile).dump(1) + "\n"); !s.ok()) return fail(s);
    std::fflush(stdout);
    SupervisedRun run{job, options, args, self, plan_path, profile_path, metrics, profile, request, job.plan.strategy};
    return LaunchEscalating(run, *given);
  }
  StrategyOutcome chosen = PlanWithStrategy(job.plan.strategy, job.cluster, job.model, costs, request, evaluate);
  if (!chosen.status.ok()) return fail(chosen.status);
  StrategyOutcome even = PlanWithStrategy("deepspeed-even", job.cluster, job.model, costs, request, evaluate);
  chosen.plan.model = Resolvable(job.model_ref, job.file);
  chosen.plan.cluster = Resolvable(job.cluster_ref, job.file);
  FillZorseRouting(&chosen.plan, costs);
  fmt::print("plan: {} — {} group(s), ZeRO-{}, {} schedule{}{}\n", chosen.strategy, chosen.plan.groups.size(),
             chosen.plan.zero_stage, PipelineScheduleName(chosen.plan.schedule),
             chosen.plan.offload_params ? ", parameter offload" : "",
             chosen.plan.offload_activations ? ", activation offload" : "");
  PrintPlan(chosen.plan);
  if (!chosen.explain.empty()) fmt::print("  why: {}\n", chosen.explain);
  fmt::print("predicted step {} ({:.0f} tokens/s)", FormatDuration(chosen.evaluation.step_time_s),
             static_cast<double>(tc.global_batch_tokens()) / chosen.evaluation.step_time_s);
  if (even.status.ok() && even.evaluation.fits_memory)
    fmt::print("; the even split: {} — {:.2f}x", FormatDuration(even.evaluation.step_time_s),
               even.evaluation.step_time_s / chosen.evaluation.step_time_s);
  fmt::print("\n");
  std::fflush(stdout);

  // 3. Files the ranks read (and a person can inspect): beside the checkpoints.
  std::error_code ec;
  fs::create_directories(dir, ec);
  if (Status s = AtomicWriteFile(plan_path, PlanToToml(chosen.plan)); !s.ok()) return fail(s);
  if (Status s = AtomicWriteFile(profile_path, ProfileToJson(profile).dump(1) + "\n"); !s.ok()) return fail(s);
  fmt::print("plan: {}\n", plan_path);

  // 4. The baseline, measured: the even split for a few steps.
  double baseline_s = 0;
  if (options.baseline_steps > 0 && even.status.ok() && even.evaluation.fits_memory) {
    even.plan.model = chosen.plan.model;
    even.plan.cluster = chosen.plan.cluster;
    const std::string even_path = (dir / "baseline-even-split.toml").string();
    const std::string even_metrics = (dir / "baseline-even-split.jsonl").string();
    if (Status s = AtomicWriteFile(even_path, PlanToToml(even.plan)); !s.ok()) return fail(s);
    fmt::print("\nthe even split first, for {} steps (to measure the speed-up):\n", options.baseline_steps);
    std::fflush(stdout);
    LaunchOptions base;
    base.nproc = even.plan.num_devices();
    base.command = {self, "train", job_arg, "--plan", even_path, "--steps", std::to_string(options.baseline_steps),
                    "--metrics", even_metrics, "--metrics-append", "--no-checkpoint", "--no-validation"};
    const std::streamoff from = FileSize(even_metrics);
    if (Launch(base) != 0) return fail(Status::Internal("the even-split baseline failed (see above)"));
    baseline_s = MeanStepSeconds(even_metrics, from);
    // Online profiling: the profile scaled to what the devices computed all running together, and
    // the plan chosen again with it (the predictions below then carry it).
    Result<std::vector<double>> measured = MedianRankCompute(even_metrics, 3, from);
    Profile calibrated = profile;
    Result<std::vector<TypeCalibration>> c =
        measured.ok() ? CalibrateToRun(&calibrated, even.plan, job.cluster, job.model, *measured)
                      : Result<std::vector<TypeCalibration>>(measured.status());
    if (!c.ok()) {
      fmt::print("\nprofile not calibrated: {}\n", c.status().message());
    } else {
      std::vector<std::string> scales;
      for (const TypeCalibration& k : *c) scales.push_back(fmt::format("{} x{:.2f}", k.device_type, k.scale));
      fmt::print("\nprofile calibrated on the even split's run (compute {}); planning again:\n", fmt::join(scales, ", "));
      profile = std::move(calibrated);
      CostModel calibrated_costs(job.cluster, job.model, &profile, tc.seq_len, tc.precision,
                                 tc.activation_checkpointing);
      const PlanEvaluator again = SimulationEvaluator(job.cluster, job.model, calibrated_costs);
      StrategyOutcome replanned =
          PlanWithStrategy(job.plan.strategy, job.cluster, job.model, calibrated_costs, request, again);
      StrategyOutcome even_again =
          PlanWithStrategy("deepspeed-even", job.cluster, job.model, calibrated_costs, request, again);
      if (replanned.status.ok() && even_again.status.ok()) {
        replanned.plan.model = chosen.plan.model;
        replanned.plan.cluster = chosen.plan.cluster;
        FillZorseRouting(&replanned.plan, calibrated_costs);
        if (replanned.strategy != chosen.strategy || PlanToToml(replanned.plan) != PlanToToml(chosen.plan)) {
          fmt::print("plan: {} (changed)\n", replanned.strategy);
          PrintPlan(replanned.plan);
        }
        chosen = std::move(replanned);
        even = std::move(even_again);
        fmt::print("predicted step {}; the even split: {} — {:.2f}x\n", FormatDuration(chosen.evaluation.step_time_s),
                   FormatDuration(even.evaluation.step_time_s),
                   even.evaluation.step_time_s / chosen.evaluation.step_time_s);
        if (Status s = AtomicWriteFile(plan_path, PlanToToml(chosen.plan)); !s.ok()) return fail(s);
        if (Status s = AtomicWriteFile(profile_path, ProfileToJson(profile).dump(1) + "\n"); !s.ok()) return fail(s);
      }
    }
    fmt::print("\nnow the plan:\n");
    std::fflush(stdout);
  }

  // 5. One rank per device — again under a more frugal plan when a device runs out of memory.
  const std::streamoff from = FileSize(metrics);
  SupervisedRun run{job, options, args, self, plan_path, profile_path, metrics, profile, request, job.plan.strategy};
  const int rc = LaunchEscalating(run, chosen.plan);
  if (rc == 0 && baseline_s > 0) {
    const double plan_s = MeanStepSeconds(metrics, from);
    if (plan_s > 0)
      fmt::print("measured: {} {:.0f} ms a step, the even split {:.0f} ms — {:.2f}x faster (predicted {:.2f}x)\n",
                 chosen.strategy, plan_s * 1e3, baseline_s * 1e3, baseline_s / plan_s,
                 even.evaluation.step_time_s / chosen.evaluation.step_time_s);
  }
  return rc;
}

}  // namespace motley::cli
