#include "supervise/escalating_launch.h"

#include <algorithm>
#include <cstdint>
#include <filesystem>
#include <fstream>
#include <optional>
#include <set>

#include <fmt/format.h>
#include <fmt/ranges.h>
#include <nlohmann/json.hpp>

#include "core/exit_codes.h"
#include "core/file_io.h"
#include "core/metrics_file.h"
#include "core/units.h"
#include "plan/plan_io.h"
#include "runtime/train/checkpoint.h"
#include "sim/plan_evaluator.h"
#include "sim/routing_costs.h"
#include "supervise/escalation.h"
#include "supervise/launcher.h"
#include "supervise/plan_hosts.h"

namespace motley {
namespace fs = std::filesystem;

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

namespace {

// The arguments every rank gets: the supervisor's own, less what only the supervisor reads.
std::vector<std::string> RankArgs(const std::vector<std::string>& args) {
  std::vector<std::string> out =
      WithoutOption(WithoutOption(WithoutOption(args, "--plan"), "--profile"), "--remote");
  out.erase(std::remove(out.begin(), out.end(), std::string("--hosts")), out.end());
  return out;
}

std::string Steps(int64_t first, int64_t last) {
  return first >= last ? fmt::format("step {} runs", last) : fmt::format("steps {}..{} run", first, last);
}

std::string Indented(std::string lines) {
  for (size_t at = lines.find('\n'); at != std::string::npos; at = lines.find('\n', at + 3))
    lines.replace(at, 1, "\n  ");
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
    return fmt::format("from the checkpoint of step {} ({}): {} again from the same weights and data", step,
                       checkpoint, Steps(step + 1, failed_step));
  }
  if (!run.options.resume.empty())
    return fmt::format("from {} again (no checkpoint since)", run.options.resume);
  if (failed_step <= 0) return "from the start (no checkpoint since)";
  return fmt::format("from the start (no checkpoint since): {} again from the same seed and data",
                     Steps(1, failed_step));
}

// A lost node: `plan` again on the devices left, after those of `lost_nodes`.
Result<StrategyOutcome> PlanWithout(const SupervisedRun& run, const Plan& plan,
                                    const std::set<int>& lost_nodes) {
  const JobSpec& job = run.job;
  PlanRequest request = run.request;
  request.devices.clear();
  for (int d = 0; d < job.cluster.num_devices(); ++d)
    if (!lost_nodes.contains(job.cluster.devices[d].node)) request.devices.push_back(d);
  if (request.devices.empty()) return Status::Infeasible("no device is left to train on");
  const TrainingConfig& tc = job.training;
  CostModel costs(job.cluster, job.model, &run.profile, tc.seq_len, tc.precision,
                  tc.activation_checkpointing);
  const PlanEvaluator evaluate = SimulationEvaluator(job.cluster, job.model, costs);
  StrategyOutcome o = PlanWithStrategy(run.strategy, job.cluster, job.model, costs, request, evaluate);
  if (!o.status.ok())
    return Status::Infeasible(
        fmt::format("no plan on the {} devices left: {}", request.devices.size(), o.status.message()));
  o.plan.model = plan.model;
  o.plan.cluster = plan.cluster;
  FillZorseRouting(&o.plan, costs);
  return o;
}

}  // namespace

void PrintPlan(const Plan& plan) {
  for (size_t g = 0; g < plan.groups.size(); ++g) {
    const GroupPlan& group = plan.groups[g];
    std::vector<std::string> devices, layers;
    for (const auto& d : group.devices)
      devices.push_back(fmt::format("{}:{}x{}", d.device, d.num_microbatches, d.microbatch_size));
    for (const auto& r : group.ministages) layers.push_back(fmt::format("{}-{}", r.begin, r.end - 1));
    fmt::print("  group {}: devices {} (device:microbatches x sequences), layers {}\n", g,
               fmt::join(devices, " "), fmt::join(layers, " | "));
  }
}

namespace {

// The state of one supervised run across its launches.
struct Supervision {
  const SupervisedRun& run;
  fs::path reports;               // where the ranks write their failure reports
  fs::file_time_type started;     // checkpoints written since are this run's
  Cluster planning;               // the cluster with the memory caps the failures taught
  std::vector<std::string> args;  // every rank's arguments (its --resume moves on)
  std::set<int> lost_nodes;
  int restarts = 0;
};

// What comes after a failed launch: a plan to launch next, or the exit code to stop with.
struct Next {
  std::optional<Plan> plan;
  int rc = kExitFailure;
};

// Launches the plan's ranks once; `failed_device` is the device of the rank blamed for a failure
// (-1: none).
int LaunchOnce(const Supervision& s, const Plan& plan, int* failed_rank, int* failed_device) {
  std::error_code ec;
  fs::remove_all(s.reports, ec);
  LaunchOptions launch;
  launch.failed_rank = failed_rank;
  launch.nproc = plan.num_devices();
  std::vector<int> device_of_rank = RankDevices(plan);
  if (s.run.options.supervisor.across_hosts) {
    if (Status st =
            PlaceOnHosts(plan, s.run.job.cluster, s.run.options.supervisor.remote, &launch, &device_of_rank);
        !st.ok()) {
      fmt::print(stderr, "motley train: {}\n", st.message());
      return kExitUsage;
    }
  }
  launch.command = {s.run.self, "train", "--metrics-append"};  // its attempts and events share one file
  launch.command.insert(launch.command.end(), s.args.begin(), s.args.end());
  for (const std::string& a : {std::string("--plan"), s.run.plan_path, std::string("--profile"),
                               s.run.profile_path, std::string("--failure-reports"), s.reports.string()})
    launch.command.push_back(a);
  const int rc = Launch(launch);
  *failed_device = *failed_rank >= 0 && *failed_rank < static_cast<int>(device_of_rank.size())
                       ? device_of_rank[*failed_rank]
                       : -1;
  return rc;
}

// A rank died: its node is lost; the others go on without it, from the newest checkpoint.
Next AroundLostNode(Supervision& s, const Plan& plan, int failed_rank, int device, int rc) {
  const JobSpec& job = s.run.job;
  if (s.restarts >= s.run.options.supervisor.max_restarts || device < 0) return {std::nullopt, rc};
  ++s.restarts;
  const int node = job.cluster.devices[device].node;
  s.lost_nodes.insert(node);
  Result<StrategyOutcome> next = PlanWithout(s.run, plan, s.lost_nodes);
  if (!next.ok()) {
    fmt::print(stderr, "motley train: rank {} (device {}) failed and {}\n", failed_rank, device,
               next.status().message());
    return {std::nullopt, rc};
  }
  if (Status st = AtomicWriteFile(s.run.plan_path, PlanToToml(next->plan)); !st.ok()) {
    fmt::print(stderr, "motley train: {}\n", st.message());
    return {};
  }
  // The fault injected for tests happened once: the restarted ranks do not repeat it.
  s.args = WithoutOption(WithoutOption(s.args, "--die-rank"), "--die-at-step");
  const std::string from = ResumePoint(s.run, s.started, 0, &s.args);
  fmt::print(
      "\nrank {} (device {}, node {}) failed: its node is lost — restart {} of {}: {} on the {} devices "
      "left, predicted step {}\nresuming {}\n",
      failed_rank, device, job.cluster.nodes[node].name, s.restarts, s.run.options.supervisor.max_restarts,
      next->strategy, next->plan.num_devices(), FormatDuration(next->evaluation.step_time_s), from);
  PrintPlan(next->plan);
  fmt::print("\n");
  std::fflush(stdout);
  std::ofstream(s.run.metrics_path, std::ios::app)
      << nlohmann::json{{"event", "restart"},
                        {"failed_rank", failed_rank},
                        {"device", device},
                        {"lost_node", job.cluster.nodes[node].name},
                        {"devices", next->plan.num_devices()},
                        {"plan", s.run.plan_path},
                        {"time_unix_s", NowUnixS()}}
             .dump()
      << "\n";
  return {std::move(next->plan), 0};
}

// Ranks ran out of memory: every rank agrees on a more frugal plan — this process makes it, and
// every rank starts from it, from the same state (the checkpoint this run wrote last, or its start).
Next MoreFrugal(Supervision& s, const Plan& plan, const std::vector<RankFailure>& failures, int attempt) {
  const SupervisedRun& run = s.run;
  Result<Escalation> e =
      PlanMoreFrugally(plan, failures, run.strategy, run.request, run.job.model, run.profile, &s.planning);
  if (!e.ok()) {
    fmt::print(stderr, "motley train: {}\n", e.status().message());
    return {};
  }
  const std::string failed_path =
      (fs::path(run.plan_path).parent_path() / fmt::format("plan-out-of-memory-{}.toml", attempt + 1))
          .string();
  for (const auto& [path, p] :
       {std::pair<std::string, const Plan*>{failed_path, &plan}, {run.plan_path, &e->plan}})
    if (Status st = AtomicWriteFile(path, PlanToToml(*p)); !st.ok()) {
      fmt::print(stderr, "motley train: {}\n", st.message());
      return {};
    }
  int64_t failed_step = 0;
  for (const RankFailure& f : failures)
    if (f.out_of_memory) failed_step = failed_step == 0 ? f.step : std::min(failed_step, f.step);
  const std::string checkpoint = CheckpointWrittenSince(run.job.checkpoint.dir, s.started);
  const std::string from = ResumePoint(run, s.started, failed_step, &s.args);
  fmt::print(
      "\nout of memory — {}\nthe plan, more frugal ({}; the failed one kept as {}):\n  {}\nretrying {}\n\n",
      e->why, e->strategy, failed_path, Indented(e->changes), from);
  std::fflush(stdout);
  // The metrics say so, before the replayed steps' lines (the last line of a step is its result).
  std::ofstream(run.metrics_path, std::ios::app)
      << nlohmann::json{{"event", "escalation"}, {"step", failed_step},   {"why", e->why},
                        {"changes", e->changes}, {"plan", run.plan_path}, {"resume", checkpoint}}
             .dump()
      << "\n";
  return {std::move(e->plan), 0};
}

}  // namespace

int LaunchEscalating(const SupervisedRun& run, Plan plan) {
  const JobSpec& job = run.job;
  Supervision s{run,
                fs::path(job.checkpoint.dir) / "failures",
                fs::file_time_type::clock::now(),
                job.cluster,
                RankArgs(run.args),
                {},
                0};
  // The run's folder keeps one step's trace, for `motley report --run` to lay beside the simulated
  // step — unless the command asked for one elsewhere.
  if (std::none_of(s.args.begin(), s.args.end(),
                   [](const std::string& a) { return a == "--trace" || a.starts_with("--trace="); }))
    s.args.insert(s.args.end(), {"--trace", (fs::path(job.checkpoint.dir) / "trace.json").string()});
  const EscalationConfig config;
  for (int attempt = 0;; ++attempt) {
    int failed_rank = -1, failed_device = -1;
    const int rc = LaunchOnce(s, plan, &failed_rank, &failed_device);
    if (rc == 0) return rc;
    const std::vector<RankFailure> failures = ReadFailureReports(s.reports.string());
    // A diverged run stopped as its job asked (rank 0 said why): no device is to blame.
    if (std::any_of(failures.begin(), failures.end(), [](const RankFailure& f) { return f.diverged; }))
      return rc;
    const bool out_of_memory =
        std::any_of(failures.begin(), failures.end(), [](const RankFailure& f) { return f.out_of_memory; });
    if (out_of_memory && attempt >= config.max_escalations) {
      fmt::print(stderr, "motley train: still out of memory after {} more frugal plans; giving up\n",
                 attempt);
      return rc;
    }
    Next next = out_of_memory ? MoreFrugal(s, plan, failures, attempt)
                              : AroundLostNode(s, plan, failed_rank, failed_device, rc);
    if (!next.plan) return next.rc;
    plan = std::move(*next.plan);
  }
}

}  // namespace motley
