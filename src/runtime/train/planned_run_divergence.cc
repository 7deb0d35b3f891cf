// A diverged step in a planned run ([divergence]; runtime/train/divergence.h): every rank learns
// it from the step's one reduction of the loss and the gradient norm, so all of them take the same
// way — stop, or reload their part of the last good checkpoint and go on.
#include "runtime/train/planned_run.h"

#include <cmath>
#include <map>
#include <set>

#include <fmt/format.h>
#include <nlohmann/json.hpp>

#include "runtime/model/llama_model.h"
#include "runtime/model/precision_dtypes.h"
#include "runtime/train/checkpoint.h"
#include "runtime/train/divergence.h"

namespace motley {

Status PlannedRun::Diverged(const RankStepReport& report) {
  const int64_t step = state_.step + 1;
  const std::string what =
      DivergedStep(step, report.loss, report.grad_norm, report.diverged_ranks, report.diverged_in);
  const std::string good = LastGoodCheckpoint(job_.checkpoint.dir, options_.resume);
  const bool back = RollsBack(job_.divergence, good, state_.rollbacks);
  if (lead_)
    MOTLEY_RETURN_IF_ERROR(metrics_.Write(
        DivergedEvent(step, report.loss, report.grad_norm, report.diverged_ranks, report.diverged_in, back)));
  if (!back) {
    diverged_ = true;
    return StopDiverged(what, good, job_.divergence, state_.rollbacks);
  }
  MOTLEY_RETURN_IF_ERROR(RollBack(good));
  if (lead_) {
    fmt::print(stderr, "motley train: {}\n", RolledBackMessage(what, good, state_, job_.divergence));
    MOTLEY_RETURN_IF_ERROR(metrics_.Write(RollbackEvent(step, good, state_)));
  }
  return Status::Ok();
}

// Every rank reads its part of the checkpoint again (as a resume does, whatever plan wrote it) and
// builds its executor anew; the run's state goes back to the checkpoint's, the rollback's own
// figures on top (RolledBack).
Status PlannedRun::RollBack(const std::string& dir) {
  const int64_t diverged_step = state_.step + 1;
  const TrainingConfig& tc = job_.training;
  executor_.reset();  // its in-memory state is the diverged step's (updated before the norm was summed,
                      // without clipping)
  const std::set<std::string> mine =
      RankParameterNames(schedule_, comm_->rank(), *LlamaModel(job_.model, tc.seed, std::set<std::string>{}));
  LlamaModel model(job_.model, tc.seed, mine, MasterDtype(tc.precision));
  model->set_precision(tc.precision);
  MOTLEY_RETURN_IF_ERROR(LoadModelWeights(dir, *model, mine));
  std::vector<ParamShard> whole = WholeParameterShards(*model);
  std::erase_if(whole, [&](const ParamShard& s) { return !mine.count(s.name); });
  MOTLEY_ASSIGN_OR_RETURN(const TrainerState loaded, LoadTrainingState(dir, whole));
  std::map<std::string, torch::Tensor> exp_avg, exp_avg_sq;
  for (const auto& s : whole) {
    exp_avg[s.name] = s.exp_avg;
    exp_avg_sq[s.name] = s.exp_avg_sq;
  }
  MOTLEY_ASSIGN_OR_RETURN(executor_,
                          Executor::Create(schedule_, job_.cluster, model, comm_.get(), executor_config_));
  MOTLEY_RETURN_IF_ERROR(executor_->LoadMoments(exp_avg, exp_avg_sq));
  state_ = RolledBack(job_.divergence, state_, loaded, diverged_step);
  if (tc.loss_scaling) scaler_.Restore(loaded.loss_scale, loaded.loss_scale_good_steps);
  return Status::Ok();
}

}  // namespace motley
