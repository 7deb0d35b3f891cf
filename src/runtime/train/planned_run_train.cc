// TrainWithPlan (planned_run.h): every rank of a launched run (motley launch, torchrun, srun,
// mpirun) executes its program of the plan's schedule step after step — rank 0 reports, validates
// and writes checkpoints — and what failed on this rank is said to a supervising `motley train`.
#include "runtime/train/planned_run.h"

#include <filesystem>

#include <fmt/format.h>
#include <nlohmann/json.hpp>

#include "core/file_io.h"
#include "plan/lower.h"
#include "sim/routing_costs.h"

namespace motley {
namespace fs = std::filesystem;

namespace {

Status TrainSteps(PlannedRun& run, const JobSpec& job, const TrainOptions& options) {
  try {
    if (run.step() == 0) MOTLEY_RETURN_IF_ERROR(run.Validate(0));
    while (!run.done()) {
      MOTLEY_RETURN_IF_ERROR(run.Step());
      if (ValidationDue(job, run.step(), run.total_steps())) MOTLEY_RETURN_IF_ERROR(run.Validate(run.step()));
      if (CheckpointDue(job, run.step(), run.total_steps())) MOTLEY_RETURN_IF_ERROR(run.Checkpoint());
    }
    if (options.checkpoint_at_end && run.steps_run() > 0) MOTLEY_RETURN_IF_ERROR(run.Checkpoint());
  } catch (const c10::OutOfMemoryError& e) {
    return Status::OutOfMemory(
        fmt::format("{} (outside a training step: validating or checkpointing); plan with "
                    "more memory headroom or fewer sequences a microbatch",
                    e.what_without_backtrace()));
  }
  return Status::Ok();
}

// What failed on this rank, for a supervising `motley train` (TrainOptions::failure_report_dir).
void WriteFailureReport(const TrainOptions& options, int rank, int device, int64_t step, const Status& s,
                        bool diverged) {
  if (options.planned.failure_report_dir.empty()) return;
  const nlohmann::json j = {{"rank", rank},         {"device", device},
                            {"step", step},         {"out_of_memory", s.code() == StatusCode::kOutOfMemory},
                            {"diverged", diverged}, {"message", s.message()}};
  std::error_code ec;
  fs::create_directories(options.planned.failure_report_dir, ec);
  (void)AtomicWriteFile(
      (fs::path(options.planned.failure_report_dir) / fmt::format("rank-{}.json", rank)).string(),
      j.dump() + "\n");
}

Result<TrainSummary> RunToTheEnd(const JobSpec& job, const TrainOptions& options, TrainObserver* observer) {
  MOTLEY_ASSIGN_OR_RETURN(std::unique_ptr<PlannedRun> run, PlannedRun::Start(job, options, observer));
  if (Status s = TrainSteps(*run, job, options); !s.ok()) {
    // The step it failed in: the one after the last finished (validating or checkpointing after
    // step N fails "in" step N + 1 too: the retry starts from a state before it).
    // A consequence of another rank's failure (which the message names): not this rank's to report.
    // A diverged run: every rank knows at once; rank 0 says so (and reports it), the others follow.
    if (run->diverged() && run->rank() != 0)
      return Status::PeerFailed("stopped with the run, which diverged");
    if (run->diverged()) {
      WriteFailureReport(options, run->rank(), run->device(), run->step() + 1, s, true);
      return s;
    }
    if (run->AnotherRankFailedFirst()) return Status::PeerFailed(s.message());
    WriteFailureReport(options, run->rank(), run->device(), run->step() + 1, s, false);
    run->ReportFailure(s.message());  // the other ranks stop now, naming this one, not at a timeout
    return s;
  }
  return run->Finish();
}

}  // namespace

Result<TrainSummary> TrainWithPlan(const JobSpec& job, const TrainOptions& options, TrainObserver* observer) {
  // A step's out-of-memory is a Status already (the executor's), one while validating or
  // checkpointing becomes one in TrainSteps; one while setting up is named here.
  try {
    return RunToTheEnd(job, options, observer);
  } catch (const c10::OutOfMemoryError& e) {
    return Status::OutOfMemory(
        fmt::format("{} (setting up, before the first step); "
                    "plan with more memory headroom or fewer sequences a microbatch",
                    e.what_without_backtrace()));
  }
}

Result<Schedule> LowerPlanToRun(Plan& plan, const JobSpec& job) {
  FillDefaultRouting(&plan, job.cluster, job.model);  // a hand-written plan's: as simulate's
  // FlexTP's mode is the plan's (the schedule carries it to the executor); a plan without one
  // takes the job's [tensor_parallel] mode.
  if (plan.flextp_mode.empty()) plan.flextp_mode = job.tensor_parallel.mode;
  return LowerPlan(plan, job.cluster, job.model);
}

}  // namespace motley
