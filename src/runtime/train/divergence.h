// Divergence ([divergence] in a job; issue #48): a step whose loss or gradient norm is not finite
// is an event, not a state. No rank applies it and no checkpoint is written (or pruned) after it;
// the run then stops — naming the step, the ranks whose own part was not finite and the last good
// checkpoint — or rolls back to that checkpoint and goes on with the learning rate lowered and the
// data windows that led there skipped, as large runs' logbooks do by hand. Both trainers (one
// process, and every rank of a planned run) decide the same way through these functions.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "core/checkpoint_format.h"
#include "core/job.h"
#include "core/status.h"

namespace motley {

/// "step 7: the loss is nan and the gradient norm is nan (rank 1's own loss was not finite)" —
/// `ranks` where it began, `in` "loss" or "gradients" (none: one process).
std::string DivergedStep(int64_t step, double loss, double grad_norm, const std::vector<int>& ranks,
                         const std::string& in);

/// The newest checkpoint a run can go back to: the newest in its folder, else the one it resumed
/// from ("" when neither).
std::string LastGoodCheckpoint(const std::string& run_dir, const std::string& resumed_from);

/// The error that stops a diverged run (`good`: LastGoodCheckpoint's answer).
Status StopDiverged(const std::string& what, const std::string& good, const DivergenceConfig& config,
                    int64_t rollbacks);

/// Whether the run rolls back (the job asks for it, a checkpoint is there, rollbacks are left).
bool RollsBack(const DivergenceConfig& config, const std::string& good, int64_t rollbacks);

/// The trainer state after rolling back from step `diverged_step` (1-based) to the checkpoint
/// whose state is `loaded`: its step, updates and scale, the learning-rate factor lowered again
/// and the data moved on past the diverged step's windows (`skip_data`), one rollback more.
TrainerState RolledBack(const DivergenceConfig& config, const TrainerState& now, const TrainerState& loaded,
                        int64_t diverged_step);

/// What a rollback says to the user (one line, after `what`) and the metrics' event for it: from
/// diverged step `step` back to checkpoint `good`, the state now `s`.
std::string RolledBackMessage(const std::string& what, const std::string& good, const TrainerState& s,
                              const DivergenceConfig& config);
nlohmann::json RollbackEvent(int64_t step, const std::string& good, const TrainerState& s);
/// The metrics' event for diverged step `step` (`ranks`/`in` as DivergedStep takes them).
nlohmann::json DivergedEvent(int64_t step, double loss, double grad_norm, const std::vector<int>& ranks,
                             const std::string& in, bool rolls_back);

}  // namespace motley
