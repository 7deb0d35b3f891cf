// PlannedRun: one rank's run of a plan (TrainWithPlan, below: planned_run_train.cc) — set up once, then
// step, record, validate and checkpoint (planned_run.cc); with [straggler_detection] rebalance, a
// switch to a plan made for the devices as measured at a step boundary (planned_run_rebalance.cc).
#pragma once

#include <chrono>
#include <cstdint>
#include <deque>
#include <functional>
#include <map>
#include <memory>
#include <string>
#include <vector>

#include "core/job.h"
#include "core/status.h"
#include "data/training_data.h"
#include "plan/plan.h"
#include "plan/schedule.h"
#include "runtime/comm/communicator.h"
#include "runtime/executor/executor.h"
#include "runtime/train/checkpoint.h"
#include "runtime/train/loss_scaler.h"
#include "runtime/train/metrics_log.h"
#include "runtime/train/straggler_monitor.h"
#include "runtime/train/trainer.h"

namespace motley {

class MemoryLedger;  // runtime/emulation/memory_ledger.h

class PlannedRun {
 public:
  using Clock = std::chrono::steady_clock;
  /// `comm`: the ranks to run with, connected already (an island's world inside a run of islands);
  /// null: connects to the launcher's rendezvous.
  static Result<std::unique_ptr<PlannedRun>> Start(const JobSpec& job, const TrainOptions& options,
                                                   TrainObserver* observer,
                                                   std::unique_ptr<Communicator> comm = nullptr);
  bool done() const { return state_.step >= total_steps_; }
  /// One step: this rank's program, every rank's figures, the trace when asked for.
  Status Step();
  Status Validate(int64_t step);
  /// Writes `event` to the run's metrics (its lead rank only; the others ignore it).
  Status WriteEvent(const nlohmann::json& event) { return lead_ ? metrics_.Write(event) : Status::Ok(); }
  /// `extra`: files beside the model (a run of islands' outer state: its lead rank's are written).
  /// `owned`: the pieces this rank writes into a sharded checkpoint (a run of islands' carry the outer
  /// momentum); null: the executor's OwnedState.
  using OwnedStateFn = std::function<Result<std::vector<StatePiece>>()>;
  Status Checkpoint(const std::vector<CheckpointExtraFile>& extra = {}, const OwnedStateFn& owned = nullptr);
  Status ShardedCheckpoint(int64_t* host_bytes, const std::vector<CheckpointExtraFile>& extra,
                           const OwnedStateFn& owned);
  /// This rank ends with an error: the others hear of it at once (Communicator::ReportFailure).
  bool AnotherRankFailedFirst() { return comm_ && comm_->AnotherRankFailedFirst(); }
  void ReportFailure(const std::string& why) {
    if (comm_) comm_->ReportFailure(why);
  }
  /// Throughput, the per-rank averages and the simulator's account of the same schedule.
  Result<TrainSummary> Finish();
  /// A run of islands whose first island was lost, on the island that leads now (its job's checkpoint
  /// folder the run's already): from here its rank 0 writes the run's checkpoints and metrics (appended)
  /// and tells `observer`.
  Status LeadOutputs(TrainObserver* observer);

  int64_t step() const { return state_.step; }
  /// The checkpoint's step a resumed run started from (before PlannedRunOptions::resumed_steps); 0.
  int64_t resumed_from_step() const { return resumed_from_step_; }
  int rank() const { return comm_ ? comm_->rank() : 0; }
  int device() const { return schedule_.programs.empty() ? -1 : schedule_.programs[rank()].device; }
  int64_t total_steps() const { return total_steps_; }
  int64_t steps_run() const { return summary_.steps_run; }
  Executor& executor() { return *executor_; }
  /// The run stopped at a diverged step ([divergence]): every rank knows it at once (the step's
  /// one reduction told them all), so none of them blames another.
  bool diverged() const { return diverged_; }

 private:
  PlannedRun(const JobSpec& job, const TrainOptions& options) : job_(job), options_(options) {}
  Status SetUp(TrainObserver* observer);  // its phases:
  Status ConnectToPlan(TrainObserver* observer, torch::Device* device);
  Status BuildExecutor(const torch::Device& device, MemoryLedger& ledger, TrainerState* loaded);
  Status OpenOutputs(const std::string& metrics_path);
  Status BeginRun(const TrainerState& loaded, const torch::Device& device, const std::string& metrics_path);
  Status Record(const StepInputs& in, const RankStepReport& report, const std::vector<RankStepTimes>& ranks);
  // Its metrics line (planned_run_metrics.cc), and a live island's lines kept until it leads.
  Status LogStep(const StepMetrics& m, const std::vector<RankStepTimes>& ranks);
  Status LogUnlogged(const std::string& metrics_path);
  std::deque<nlohmann::json> unlogged_;
  // Live rebalancing ([straggler_detection] rebalance).
  Status Rebalance(const std::vector<StragglerMonitor::Change>& changes);
  Status SwitchTo(const Plan& next);
  // Resuming a checkpoint written after a live rebalance: the plan the run was last on, not the one
  // given (the checkpoint records it), said so.
  Status TakeUpResumedPlan();
  std::string resumed_plan_note_;
  // A diverged step ([divergence]; planned_run_divergence.cc): stop, or roll back to the last good
  // checkpoint and go on.
  Status Diverged(const RankStepReport& report);
  Status RollBack(const std::string& dir);

  const JobSpec& job_;
  const TrainOptions& options_;
  TrainObserver quiet_;
  TrainObserver* observer_ = &quiet_;  // rank 0's observer; the others stay quiet
  Plan plan_;
  Schedule schedule_;
  std::unique_ptr<Communicator> comm_;
  std::unique_ptr<TrainingData> data_;
  std::unique_ptr<Executor> executor_;
  MetricsLog metrics_;
  std::unique_ptr<StragglerMonitor> stragglers_;   // every rank's compute against its own norm
  std::vector<StragglerMonitor::Change> changes_;  // the last step's
  ExecutorConfig executor_config_;
  // Live rebalancing: the slowdowns the current plan was made for (device -> factor), and each
  // rank's change since (its last straggling or recovery's factor; 1 = none).
  std::map<int, double> planned_slowdown_;
  std::vector<double> changed_factor_;
  std::unique_ptr<RunDirLock> dir_lock_;  // rank 0: the run's folder is this run's
  TrainerState state_;
  LossScaler scaler_;  // [training] loss_scaling: the same on every rank
  TrainSummary summary_;
  bool lead_ = false;    // rank 0 of a run that writes the metrics and checkpoints
  bool writer_ = false;  // rank 0 of a run that writes checkpoints (lead_'s, or an island's own)
  bool diverged_ = false;
  bool divergence_injected_ = false;  // fault injection (tests): once a process
  int64_t total_steps_ = 0, tokens_per_step_ = 0, val_sequences_ = 0, resumed_from_step_ = 0;
  std::vector<int64_t> windows_;
  // Steps after the first (the first warms up), summed.
  Clock::time_point run_start_;
  double timed_s_ = 0;
  int64_t timed_tokens_ = 0, timed_steps_ = 0;
  std::vector<RankStepTimes> rank_sums_;
};

/// Trains `job` as this process's rank of `plan` (read from options.planned.plan_path). The observer is
/// called on rank 0 only.
Result<TrainSummary> TrainWithPlan(const JobSpec& job, const TrainOptions& options, TrainObserver* observer);

/// The schedule a run of `plan` follows (its routing and FlexTP mode filled in as the run does).
Result<Schedule> LowerPlanToRun(Plan& plan, const JobSpec& job);

}  // namespace motley
