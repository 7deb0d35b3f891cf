// `motley train JOB` on a cluster of several devices, end to end, as named phases (job_supervisor.cc):
//   1. ProfileForJob  — measure the device types (or take the profile given, or the job's [plan]
//                       profile), and the links of a local emulated cluster;
//   2. PlanForJob     — plan by the job's strategy (`auto` by default), the even split beside it;
//   3. the files the ranks read (plan, profile) beside the checkpoints;
//   4. MeasureBaseline — with --baseline-steps, the even split trained for that many steps, the
//                       profile calibrated on what it measured and the job planned again;
//   5. LaunchEscalating (escalating_launch.h) — one rank per device, again under a more frugal
//                       plan when a device runs out of memory, or around a lost node;
// and rank 0 reports the training; the supervisor the measured speed-up against the baseline.
#pragma once

#include <string>
#include <vector>

#include "core/job.h"
#include "runtime/train/trainer.h"

namespace motley {

/// `job_arg`: the job as given on the command line; `args`: the command's own arguments (passed
/// on to every rank, plus --plan and --profile). Returns the process's exit code.
int SuperviseJob(const std::string& job_arg, const JobSpec& job, const TrainOptions& options,
                 const std::vector<std::string>& args);

}  // namespace motley
