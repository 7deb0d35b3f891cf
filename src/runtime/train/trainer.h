// Trainer: the single-process training loop — the job's model, data, AdamW with its schedule and
// clipping, mixed precision, validation at intervals, checkpoints, resume. Everything the loop
// produces goes to a TrainObserver (the CLI prints it) and to a JSON-lines metrics file.
//
// One step: the global batch's sequences (sampled by (seed, step, index)) run in microbatches;
// each microbatch's loss is its summed cross-entropy over the step's total token count, so the
// accumulated gradient is exactly the global batch's mean-loss gradient.
#pragma once

#include <cstdint>
#include <functional>
#include <optional>
#include <string>
#include <vector>

#include "core/job.h"
#include "core/status.h"
#include "cost/flextp_balancer.h"

namespace motley {

/// Faults a test injects into a run (the command's hidden --die-rank, --perturb-rank, ...): each
/// rank turns them into its step's StepFaults (executor.h).
struct FaultInjection {
  // This rank kills itself halfway through this step's program (from 1).
  int die_rank = -1;
  int64_t die_at_step = 0;
  // ... or, with this, once it has written its part of the (sharded) checkpoint after that step.
  bool die_in_checkpoint = false;
  // This rank multiplies its loss by this factor (StepFaults::loss_factor).
  int perturb_rank = -1;
  double perturb_loss_factor = 1;
  int64_t perturb_microbatch = -1;  // only this global microbatch; -1: every one
  // With loss scaling, this rank's gradients overflow (one is made infinite) in this step (from 1;
  // 0: never) — every rank must then skip the step.
  int overflow_rank = 0;
  int64_t overflow_step = 0;
  // This rank's loss is NaN in this step (from 1; once a process) — the run diverges there
  // ([divergence]).
  int diverge_rank = -1;
  int64_t diverge_at_step = 0;
};

/// What the supervisor of a job on a cluster does besides launching the plan's ranks.
struct SupervisorOptions {
  int64_t baseline_steps = 0;  // planned runs: first measure the even split for this many steps
  // `motley train JOB --plan P`: start P even when the simulator predicts it runs out of memory
  // (refused otherwise: it would run until the step that overflows, then fail or be re-planned).
  bool even_if_predicted_oom = false;
  // `motley train JOB` on a cluster: when a rank dies (not out of memory), its node is taken as lost
  // and the run is planned again without it and resumed from the newest checkpoint, this many
  // times at most (0: the run fails).
  int max_restarts = 0;
  // `motley train JOB --hosts`: each launch starts its ranks on the hosts its plan's devices sit on
  // (the cluster file's [[nodes]] host) through `remote`, one agent a host (supervise/plan_hosts.h).
  bool across_hosts = false;
  std::string remote = "ssh {host}";
  // Islands launched by `motley train --island-plan ...`: a lost island is left out for this many
  // clock steps after the last round it took part in (the others go on: island_membership.h), then
  // every island resumes together from the survivors' checkpoint at the first round's end after them
  // (0: one round, inner_steps).
  int64_t island_rejoin_steps = 0;
};

// A rank of a launched run (motley launch, torchrun, srun, mpirun) executing a plan: PlannedRun
// and TrainWithPlan (planned_run.h).
struct PlannedRunOptions {
  std::string plan_path;     // the plan each rank executes ("" = train in this process)
  std::string trace_path;    // a Chrome trace of one step of the real run, in the simulator's format
  std::string profile_path;  // with a plan: rank 0 predicts the step with it and reports both
  int64_t trace_step = 2;    // which step (from 1) the trace records
  // A rank that fails writes what failed here, as rank-R.json (rank, device, step, out_of_memory,
  // message), for the `motley train` that launched it and may retry with a more frugal plan
  // (supervise/escalation.h). "" = none.
  std::string failure_report_dir;
  bool cpu_copy_threads = false;  // tests: CPU offload copies asynchronous, as on a GPU (copy_engine.h)
  // A run of islands ([islands] count > 1) across processes: each island's plan, in island order;
  // the launched ranks are the islands' ranks one island after another (planned_islands.h).
  std::vector<std::string> island_plans;
  // Set for one island's run by the islands' driver: where its sequences start in each step's global
  // batch, and whether its rank 0 writes the metrics and checkpoints (island 0's only).
  int64_t first_sequence = 0;
  bool writes_outputs = true;
  // Islands other than the first present: the island's rank 0 writes the island's own checkpoints (its
  // inner state, core/checkpoint_format.h: IslandCheckpointRunDir) without the run's other outputs; and
  // a resumed island's moments come from `moments_from` (its own checkpoint at the resumed step; "":
  // the resumed checkpoint's).
  bool writes_checkpoints = false;
  std::string moments_from;
  // Live islands other than the first present: rank 0 keeps its last steps' metrics lines (none: 0), for
  // the run's metrics should this island take the lead (PlannedRun::LeadOutputs).
  int64_t keep_unlogged_steps = 0;
  // Islands: the outer round's schedule hash, reported beside the island's step schedule.
  std::string outer_round_hash;
  // Islands: a resumed island's own steps when island 0, the run's clock, had taken the checkpoint's
  // (IslandsConfig::OwnSteps); null: the checkpoint's.
  std::function<int64_t(int64_t)> resumed_steps;
  // Elastic islands (the islands' supervisor, supervise/island_supervisor.h): the islands launched
  // this time, in island order (empty: every one) — each reads its own share of every step's batch,
  // an absent island's share is not trained — and the clock step at which they stop with a checkpoint
  // so that a lost island can join them again (0: the run's end).
  std::vector<int> islands_present;
  int64_t stop_at_step = 0;
  // Live islands (set by the supervisor with --max-restarts): a lost island's ranks are left out of the
  // outer loop and the others go on without stopping (island_membership.h).
  bool islands_live = false;
};

/// How `motley train` runs: the run's own options (one process or a rank of a planned run), and
/// those of a planned run, of its supervisor and of fault injection, each in a struct of its own.
struct TrainOptions {
  int64_t steps = 0;                 // the run's total length; 0 = the job's [training] steps
  std::string resume;                // a checkpoint (or run) directory to continue from
  std::string device = "auto";       // auto (CUDA when present) | cpu | cuda
  std::string metrics_path;          // "" = <checkpoint dir>/metrics.jsonl
  int64_t microbatch_sequences = 0;  // 0 = the whole batch at once
  int threads = 0;                   // torch's CPU threads; 0 = 1 (OpenBLAS threads the matmuls)
  bool checkpoint_at_end = true;
  bool overwrite = false;  // a run not resuming may take over a folder holding another run's checkpoints
  bool validate = true;    // validation at the job's interval and at the end
  // Add to an existing metrics file (a new run refuses one that holds lines otherwise; a resumed
  // run always adds to it).
  bool metrics_append = false;
  PlannedRunOptions planned;     // a rank of a launched run executing a plan (planned_run.h)
  SupervisorOptions supervisor;  // `motley train JOB` on a cluster (supervise/job_supervisor.h)
  FaultInjection faults;         // tests only
};

/// What one rank did in a step (several processes only).
struct RankStepTimes {
  int rank = 0;
  double compute_s = 0;  // forward, backward, optimizer (emulated slowness included)
  double comm_s = 0;     // collectives and waits for transfers, waiting for peers included
  double copy_s = 0;     // offload and prefetch
  double idle_s = 0;     // step time - compute
  double late_s = 0;     // emulated devices: compute past the emulated speed, the host busy (RankStepReport)
  double bytes_sent = 0;
  double peak_memory_bytes = 0;
  double pruned_fraction = 0;  // FlexTP: the share of its tensor-parallel team's MLP units pruned
  double migrated_units = 0;   // FlexTP: MLP units its team's stragglers had computed by others
  FlexTpRankLoad flextp;       // FlexTP: its part of its team's balance (all 0 without a FlexTP mode)
};

struct StepMetrics {
  int64_t step = 0;  // counted from 1
  int64_t total_steps = 0;
  double loss = 0;
  double lr = 0;
  double grad_norm = 0;
  double tokens_per_s = 0;
  double step_time_s = 0;
  bool skipped = false;  // fp16 overflow: the update was skipped
  double loss_scale = 1;
  std::vector<RankStepTimes> ranks;  // several processes: one per rank
  bool flextp = false;               // a FlexTP mode is on (the two below are shown)
  double pruned_fraction = 0;        // the largest over the tensor-parallel teams
  double migrated_units = 0;         // the largest over the teams
  // A run of islands ([islands]): how many; whether this step ended with an outer step, and the
  // largest relative error its compression made in an island's pseudo-gradient.
  int64_t islands = 0;
  bool outer_step = false;
  double outer_compression_error = 0;
};

struct TrainStart {
  std::string device;            // "cpu (2 threads)", "cuda:0"
  std::string schedule_hash;     // several processes: the schedule every rank runs (ScheduleHash)
  std::string outer_round_hash;  // islands: the outer round's schedule (plan/outer_round.h)
  std::string precision;
  int64_t parameters = 0;
  int64_t first_step = 0;  // > 0 when resumed
  int64_t total_steps = 0;
  int64_t tokens_per_step = 0;
  std::string train_data, validation_data;  // names
  std::string metrics_path;
};

struct TrainSummary {
  int64_t steps_run = 0;
  double first_loss = 0, last_loss = 0;
  std::optional<double> first_validation_loss, last_validation_loss;
  double tokens_per_s = 0;           // mean over the run, excluding its first step (warm-up)
  double model_tflops_per_s = 0;     // 6N + attention FLOPs per token x tokens/s
  double hardware_tflops_per_s = 0;  // including the recomputed forward
  double wall_s = 0;
  std::string checkpoint_dir;               // "" when none was written
  std::vector<RankStepTimes> ranks;         // several processes: per rank, mean over the timed steps
  std::string trace_path;                   // "" when no trace was written
  double step_s = 0;                        // several processes: mean step time over the timed steps
  double predicted_step_s = 0;              // the simulator's, with TrainOptions::profile_path (else 0)
  std::vector<double> predicted_compute_s;  // per rank
  std::vector<double> predicted_peak_memory_bytes;  // per rank: the simulator's (several processes)
  double hfu = 0, predicted_hfu = 0;                // hardware FLOPs over the plan's devices' peak
  bool led = false;  // this process wrote the run's outputs (a run's rank 0; an island's that took the lead)
};

class TrainObserver {
 public:
  virtual ~TrainObserver() = default;
  virtual void OnStart(const TrainStart&) {}
  virtual void OnStep(const StepMetrics&) {}
  virtual void OnValidation(int64_t /*step*/, double /*loss*/) {}
  virtual void OnCheckpoint(const std::string& /*dir*/) {}
  /// A rank began straggling (its compute `slowdown` times its own norm) or recovered, at `step`
  /// (straggler_monitor.h); `device` describes it.
  virtual void OnStraggler(int64_t /*step*/, int /*rank*/, const std::string& /*device*/, double /*slowdown*/,
                           bool /*straggling*/) {}
  /// Live rebalancing ([straggler_detection] rebalance): what was re-planned after `step`, and
  /// whether the run switched to it.
  virtual void OnRebalance(int64_t /*step*/, const std::string& /*message*/) {}
};

// Shared by the single-process and the distributed trainer.
/// After `step` (from 1) of `total`: validate now? checkpoint now (the end has its own)?
bool ValidationDue(const JobSpec& job, int64_t step, int64_t total);
bool CheckpointDue(const JobSpec& job, int64_t step, int64_t total);
/// A checkpoint resumed under `job`: its config.json must describe the job's model (shape, rotary
/// base and scaling, tying) — in one process and in a planned run alike.
Status CheckResumedModel(const std::string& dir, const JobSpec& job);
/// Whether a checkpoint's state can continue this job: same seed (the data order), not at the end.
/// `dir` names the checkpoint in messages.
Status CheckResumable(const std::string& dir, uint64_t seed, int64_t step, const JobSpec& job,
                      int64_t total_steps);
/// Fills the summary's tokens/s and TFLOP/s from the timed steps' seconds and tokens.
void SetThroughput(const JobSpec& job, double timed_s, int64_t timed_tokens, TrainSummary* summary);

/// Trains `job` in this process. Relative paths in the job (data, checkpoint dir) are relative to
/// the working directory for the checkpoint dir (as documented in job.h) and to the job file for data.
/// A job with [islands] trains its islands here one after another (islands_trainer.cc).
Result<TrainSummary> Train(const JobSpec& job, const TrainOptions& options, TrainObserver* observer);

}  // namespace motley
