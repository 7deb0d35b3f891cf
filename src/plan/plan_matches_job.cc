#include "plan/plan_matches_job.h"

#include <fmt/format.h>

namespace motley {

Status CheckPlanMatchesJob(const Plan& plan, const JobSpec& job, const std::string& plan_path) {
  const TrainingConfig& tc = job.training;
  if (plan.seq_len != tc.seq_len)
    return Status::InvalidArgument(
        fmt::format("{}: seq_len = {} but the job {} trains with seq_len = {}; plan the "
                    "job again (motley plan) or fix [training] seq_len",
                    plan_path, plan.seq_len, job.file, tc.seq_len));
  if (plan.global_batch_sequences() != tc.global_batch_sequences)
    return Status::InvalidArgument(
        fmt::format("{}: the plan's microbatches add up to {} sequences a step but the job {} has "
                    "global_batch_sequences = {}; "
                    "make microbatch_size x num_microbatches of each group sum to {}",
                    plan_path, plan.global_batch_sequences(), job.file, tc.global_batch_sequences,
                    tc.global_batch_sequences));
  if (plan.precision != tc.precision)
    return Status::InvalidArgument(
        fmt::format("{}: precision = \"{}\" but the job {} says \"{}\"; make them agree", plan_path,
                    PrecisionName(plan.precision), job.file, PrecisionName(tc.precision)));
  const bool clipping = job.optimizer.grad_clip_norm > 0;
  if (plan.gradient_clipping != clipping)
    return Status::InvalidArgument(fmt::format(
        "{}: gradient_clipping = {}{} but the job {} has [optimizer] grad_clip_norm = {}; the plan's "
        "schedule "
        "places the updates by it — set gradient_clipping = {} in the plan (or plan the job again)",
        plan_path, plan.gradient_clipping, plan.gradient_clipping ? " (the default)" : "", job.file,
        job.optimizer.grad_clip_norm, clipping));
  if (plan.loss_scaled() != tc.loss_scaling)
    return Status::InvalidArgument(fmt::format(
        "{}: the plan {} loss scaling but the job {} {}; the plan's schedule places the updates by it — set "
        "loss_scaling = {} in the plan (or plan the job again)",
        plan_path, plan.loss_scaled() ? "has" : "has no", job.file,
        tc.loss_scaling ? "scales its loss ([training] loss_scaling, fp16)" : "does not", tc.loss_scaling));
  return Status::Ok();
}

}  // namespace motley
