#include "supervise/island_supervisor.h"

#include <algorithm>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <numeric>

#include <fmt/format.h>
#include <fmt/ranges.h>
#include <nlohmann/json.hpp>

#include "core/exit_codes.h"
#include "core/metrics_file.h"
#include "core/rendezvous.h"
#include "plan/plan_io.h"
#include "runtime/comm/failure_reports.h"
#include "runtime/train/checkpoint.h"
#include "supervise/escalating_launch.h"
#include "supervise/escalation.h"
#include "supervise/launcher.h"

namespace motley {
namespace fs = std::filesystem;
namespace {

// The state of the islands' run across its launches.
struct IslandRun {
  const JobSpec& job;
  const TrainOptions& options;
  std::string self;            // this executable
  std::string metrics_path;    // where the supervisor's events go (the ranks' metrics file)
  fs::path reports;            // the ranks' failure reports
  fs::file_time_type started;  // checkpoints written since are this run's
  std::vector<int> ranks;      // each island's plan's ranks
  int Launched() const {
    int n = 0;
    for (int i : present) n += ranks[static_cast<size_t>(i)];
    return n;
  }
  // The island a rank of the launch belongs to.
  int IslandOf(int rank) const {
    for (int i : present) {
      if (rank < ranks[static_cast<size_t>(i)]) return i;
      rank -= ranks[static_cast<size_t>(i)];
    }
    return -1;
  }
  int64_t clock_steps = 0;        // the run's length, in island 0's steps
  std::vector<std::string> args;  // every rank's arguments (its --resume moves on)
  std::vector<int> present;       // the islands launched next
  std::vector<int> lost;          // islands left out until `rejoin_step`
  int64_t rejoin_step = 0;        // the clock step the launch of the present islands stops at (0: none)
  int restarts = 0;
  // Live islands: a lost island's ranks fall alone and the others go on in the same launch (the
  // ranks decide when it joins again: planned_islands.cc); else every rank stops and the islands left
  // are launched again from the newest checkpoint.
  bool live = false;
  int lost_by = -1, lost_island = -1;  // live, this launch: the rank whose end made an island fall, and it
  // The launch ranks of island `island` (empty: not launched).
  std::vector<int> RanksOfIsland(int island) const {
    std::vector<int> out;
    int first = 0;
    for (int i : present) {
      if (i == island)
        for (int k = 0; k < ranks[static_cast<size_t>(i)]; ++k) out.push_back(first + k);
      first += ranks[static_cast<size_t>(i)];
    }
    return out;
  }
};

void WriteEvent(const IslandRun& r, nlohmann::json event) {
  event["time_unix_s"] = NowUnixS();
  std::ofstream(r.metrics_path, std::ios::app) << event.dump() << "\n";
}

// Live islands: the ranks that fall with failed launch rank `rank` — its island's, when a restart is
// left and an island that keeps the run's clock goes on (the first island left leads: its inner steps
// must be the clock's) — or none (every rank stops).
std::vector<int> FallsWith(IslandRun& r, int rank) {
  const int island = r.IslandOf(rank);
  if (island < 0) return {};
  if (std::find(r.lost.begin(), r.lost.end(), island) != r.lost.end()) return r.RanksOfIsland(island);
  if (r.restarts >= r.options.supervisor.max_restarts) return {};
  std::vector<int> left;
  for (int i : r.present)
    if (i != island && std::find(r.lost.begin(), r.lost.end(), i) == r.lost.end()) left.push_back(i);
  if (left.empty() || r.job.islands.InnerSteps(left[0]) != r.job.islands.inner_steps) return {};
  ++r.restarts;
  r.lost.push_back(island);
  r.lost_by = rank;
  r.lost_island = island;
  std::sort(r.lost.begin(), r.lost.end());
  r.args = WithoutOption(WithoutOption(r.args, "--die-rank"), "--die-at-step");  // (as LeaveOut's)
  fmt::print(
      "\nrank {} (island {}) failed: island {} is lost — {} of {}: island{} {} go{} on without stopping, "
      "and island {} joins again at a round's end\n\n",
      rank, island, island, r.restarts, r.options.supervisor.max_restarts, left.size() == 1 ? "" : "s",
      fmt::join(left, ", "), left.size() == 1 ? "es" : "", island);
  std::fflush(stdout);
  WriteEvent(r, {{"event", "island_lost"},
                 {"island", island},
                 {"failed_rank", rank},
                 {"present", left},
                 {"live", true}});
  return r.RanksOfIsland(island);
}

// Launches the present islands' ranks once; `failed_rank`: the rank blamed for a failure (-1: none).
int LaunchOnce(IslandRun& r, int* failed_rank) {
  r.lost_by = r.lost_island = -1;
  std::error_code ec;
  fs::remove_all(r.reports, ec);
  LaunchOptions launch;
  launch.failed_rank = failed_rank;
  launch.nproc = r.Launched();
  launch.command = {r.self, "train"};
  launch.command.insert(launch.command.end(), r.args.begin(), r.args.end());
  launch.command.insert(launch.command.end(), {"--failure-reports", r.reports.string()});
  if (static_cast<int64_t>(r.present.size()) < r.job.islands.count)
    launch.command.insert(launch.command.end(),
                          {"--islands-present", fmt::format("{}", fmt::join(r.present, ","))});
  if (r.rejoin_step > 0)
    launch.command.insert(launch.command.end(), {"--stop-at-step", std::to_string(r.rejoin_step)});
  // Live, the store is this process's, not the first island's first rank's: it outlives any island.
  std::unique_ptr<StoreServer> store;
  if (r.live) {
    Result<std::unique_ptr<StoreServer>> started = StoreServer::Start();
    if (!started.ok()) {
      fmt::print(stderr, "motley train: {}\n", started.status().message());
      return 1;
    }
    store = std::move(*started);
    launch.master_port = store->port();
    ::setenv(kStoreByLauncherEnv, "1", 1);
    launch.command.push_back("--islands-live");
    launch.falls_with = [&r](int rank) { return FallsWith(r, rank); };
    launch.on_fallen = [](const std::string& addr, int port, const std::vector<int>& ranks,
                          const std::string& why) {
      // (Unreported, the ranks going on find them lost when their heartbeats stop.)
      if (Status s = ReportFailuresOf(addr, port, ranks, why); !s.ok())
        fmt::print(stderr, "motley: {}\n", s.message());
    };
  }
  const int rc = Launch(launch);
  ::unsetenv(kStoreByLauncherEnv);
  return rc;
}

// The next launch resumes from the newest checkpoint this run wrote (else where the run began): sets
// the arguments' --resume and returns its step.
int64_t ResumeFromNewest(IslandRun& r) {
  std::string from = CheckpointWrittenSince(r.job.checkpoint.dir, r.started);
  if (from.empty()) from = r.options.resume;
  r.args = WithoutOption(r.args, "--resume");
  if (from.empty()) return 0;
  r.args.insert(r.args.end(), {"--resume", from});
  const Result<int64_t> step = CheckpointStep(from);
  return step.ok() ? *step : 0;
}

// A rank of island `island` failed: the island is lost and the others go on, or (false) the run stops.
bool LeaveOut(IslandRun& r, int failed_rank, int island) {
  const IslandsConfig& islands = r.job.islands;
  if (r.restarts >= r.options.supervisor.max_restarts) return false;
  std::vector<int> left = r.present;
  if (const auto it = std::find(left.begin(), left.end(), island); it != left.end()) left.erase(it);
  if (left.empty()) return false;
  if (islands.InnerSteps(left[0]) != islands.inner_steps) {
    fmt::print(
        stderr,
        "motley train: island {} was lost, and island {} left takes {} inner steps a round to the clock's "
        "{}: islands of their own inner steps go on only while island 0 is present\n",
        island, left[0], islands.InnerSteps(left[0]), islands.inner_steps);
    return false;
  }
  ++r.restarts;
  r.present = left;
  if (std::find(r.lost.begin(), r.lost.end(), island) == r.lost.end()) r.lost.push_back(island);
  std::sort(r.lost.begin(), r.lost.end());
  // The fault injected for tests happened once: the restarted ranks do not repeat it.
  r.args = WithoutOption(WithoutOption(r.args, "--die-rank"), "--die-at-step");
  const int64_t from = ResumeFromNewest(r);
  const int64_t rejoin_after = r.options.supervisor.island_rejoin_steps > 0
                                   ? r.options.supervisor.island_rejoin_steps
                                   : islands.inner_steps;
  // The first round's end at least `rejoin_after` steps on; none when the run ends first.
  const int64_t at =
      (from + rejoin_after + islands.inner_steps - 1) / islands.inner_steps * islands.inner_steps;
  r.rejoin_step = at < r.clock_steps ? at : 0;
  fmt::print(
      "\nrank {} (island {}) failed: island {} is lost — restart {} of {}: island{} {} go{} on from {}{}\n\n",
      failed_rank, island, island, r.restarts, r.options.supervisor.max_restarts,
      r.present.size() == 1 ? "" : "s", fmt::join(r.present, ", "), r.present.size() == 1 ? "es" : "",
      from > 0 ? fmt::format("the checkpoint of step {}", from) : std::string("the start"),
      r.rejoin_step > 0
          ? fmt::format("; island {} joins again at step {}", fmt::join(r.lost, ", "), r.rejoin_step)
          : std::string(" to the end"));
  std::fflush(stdout);
  WriteEvent(r, {{"event", "island_lost"},
                 {"island", island},
                 {"failed_rank", failed_rank},
                 {"present", r.present},
                 {"resume_step", from},
                 {"rejoin_step", r.rejoin_step}});
  return true;
}

// The present islands stopped at the rejoin step: every island resumes from their checkpoint.
void Rejoin(IslandRun& r) {
  const int64_t from = ResumeFromNewest(r);
  fmt::print("\nisland{} {} join{} again at step {}, from the outer state of its checkpoint\n\n",
             r.lost.size() == 1 ? "" : "s", fmt::join(r.lost, ", "), r.lost.size() == 1 ? "s" : "", from);
  std::fflush(stdout);
  WriteEvent(r, {{"event", "island_rejoined"}, {"islands", r.lost}, {"step", from}});
  r.present.resize(static_cast<size_t>(r.job.islands.count));
  std::iota(r.present.begin(), r.present.end(), 0);
  r.lost.clear();
  r.rejoin_step = 0;
}

}  // namespace

int SuperviseIslands(const JobSpec& job, const TrainOptions& options, const std::vector<std::string>& args) {
  std::error_code ec;
  IslandRun r{job,
              options,
              fs::read_symlink("/proc/self/exe", ec).string(),
              options.metrics_path.empty() ? (fs::path(job.checkpoint.dir) / "metrics.jsonl").string()
                                           : options.metrics_path,
              fs::path(job.checkpoint.dir) / "failures",
              fs::file_time_type::clock::now(),
              {},
              options.steps > 0 ? options.steps : job.training.steps,
              WithoutOption(WithoutOption(args, "--islands-present"), "--stop-at-step"),
              options.planned.islands_present,
              {},
              options.planned.stop_at_step,
              0};
  r.live = options.supervisor.max_restarts > 0;
  for (const std::string& path : options.planned.island_plans) {
    Result<Plan> plan = LoadPlanFile(path);
    if (!plan.ok()) {
      fmt::print(stderr, "motley train: {}\n", plan.status().message());
      return kExitFailure;
    }
    r.ranks.push_back(plan->num_devices());
  }
  if (r.present.empty()) {  // else: the islands the command names (launched by hand, as this does)
    r.present.resize(options.planned.island_plans.size());
    std::iota(r.present.begin(), r.present.end(), 0);
  }
  for (;;) {
    int failed_rank = -1;
    const int rc = LaunchOnce(r, &failed_rank);
    if (rc == 0) {
      if (r.lost.empty()) return kExitOk;
      // Live, the islands left stopped at the rejoin step the ranks chose — or at the run's end.
      const std::string newest = CheckpointWrittenSince(r.job.checkpoint.dir, r.started);
      const Result<int64_t> at = CheckpointStep(newest);
      if (r.live && (newest.empty() || !at.ok() || *at >= r.clock_steps)) {
        fmt::print("\nthe run ended before island{} {} could join again\n", r.lost.size() == 1 ? "" : "s",
                   fmt::join(r.lost, ", "));
        return kExitOk;
      }
      Rejoin(r);
    } else {
      const std::vector<RankFailure> failures = ReadFailureReports(r.reports.string());
      const bool own_cause = std::any_of(failures.begin(), failures.end(),
                                         [](const RankFailure& f) { return f.diverged || f.out_of_memory; });
      int island = failed_rank >= 0 && failed_rank < r.Launched() ? r.IslandOf(failed_rank) : -1;
      // Islands lost live in this launch stay out of the next.
      for (const int i : r.lost) std::erase(r.present, i);
      if (!own_cause && island >= 0 && r.lost_by >= 0 &&
          std::find(r.lost.begin(), r.lost.end(), island) == r.lost.end()) {
        // An island left failed after one was lost live: waiting for it across islands (a round's
        // exchange, the islands' checkpoint), it could not go on — the islands left start again.
        fmt::print(
            "\nrank {} (island {}) failed after island {} was lost, waiting for it: the islands left "
            "start again from the newest checkpoint\n",
            failed_rank, island, r.lost_island);
        failed_rank = r.lost_by;
        island = r.lost_island;
      }
      if (own_cause || island < 0 || !LeaveOut(r, failed_rank, island)) return kExitFailure;
    }
    // Later launches add to the metrics of the first.
    if (std::find(r.args.begin(), r.args.end(), "--metrics-append") == r.args.end())
      r.args.push_back("--metrics-append");
  }
}

}  // namespace motley
