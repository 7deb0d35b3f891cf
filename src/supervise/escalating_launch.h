// The supervisor's launch (issue #23, #29): one rank per device of a plan, watched; when ranks run
// out of memory in a step it plans more frugally (escalation.h), says what changed and why, and
// launches every rank again from the same state; when a rank dies its node is lost, and the ranks
// left go on under a plan for the devices that remain, from the newest checkpoint (at most
// TrainOptions::max_restarts times). Every decision is said on stdout and in the run's metrics.
#pragma once

#include <filesystem>
#include <string>
#include <vector>

#include "core/job.h"
#include "plan/baselines.h"
#include "plan/plan.h"
#include "runtime/train/trainer.h"
#include "sim/profile.h"

namespace motley {

/// A launch of one rank per device of a plan that `motley train` supervises.
struct SupervisedRun {
  const JobSpec& job;
  const TrainOptions& options;
  std::vector<std::string> args;  // the command's own arguments, passed on to every rank
  std::string self;               // this executable
  std::string plan_path;          // where the ranks read the plan (rewritten when it changes)
  std::string profile_path;
  std::string metrics_path;
  Profile profile;
  PlanRequest request;
  std::string strategy;  // the planner that makes a more frugal plan
};

/// Launches the ranks of `plan` and escalates or restarts as above. Returns the exit code of the
/// last launch.
int LaunchEscalating(const SupervisedRun& run, Plan plan);

/// What a plan does, in a few lines (the supervisor's log).
void PrintPlan(const Plan& plan);

/// `args` without `--name VALUE` and `--name=VALUE` (what a relaunch passes on changes).
std::vector<std::string> WithoutOption(const std::vector<std::string>& args, const std::string& name);

/// The checkpoint the run in `run_dir` has written since `since` (its `latest`), or "".
std::string CheckpointWrittenSince(const std::string& run_dir, std::filesystem::file_time_type since);

}  // namespace motley
