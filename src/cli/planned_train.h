// `motley train JOB` on a cluster of several devices, end to end: measure the device types (or
// reuse the cache, or the job's [plan] profile), plan (the job's strategy, `auto` by default),
// print the plan with its predicted step time beside the even split's, launch one rank per device
// of the plan, and let rank 0 report the training and the measured-vs-predicted summary.
#pragma once

#include <string>
#include <vector>

#include "core/job.h"
#include "plan/baselines.h"
#include "runtime/train/trainer.h"
#include "sim/profile.h"

namespace motley::cli {

/// `job_arg`: the job as given on the command line; `args`: the command's own arguments (passed
/// on to every rank, plus --plan and --profile). With options.baseline_steps, the even split is
/// first trained for that many steps and the measured speed-up reported at the end.
int RunPlannedTrain(const std::string& job_arg, const JobSpec& job, const TrainOptions& options,
                    const std::vector<std::string>& args);

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

/// Launches the ranks of `plan`; when some run out of memory in a step, plans more frugally
/// (cli/escalation.h), says what changed and why, and launches them again from the same state.
/// Returns the exit code of the last launch.
int LaunchEscalating(const SupervisedRun& run, Plan plan);

}  // namespace motley::cli
