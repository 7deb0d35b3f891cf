#include "runtime/train/distributed_trainer.h"
#include "runtime/train/straggler_monitor.h"

#include <array>
#include <cstdint>
#include <cstring>
#include <stdexcept>
#include <chrono>
#include <cmath>
#include <csignal>
#include <filesystem>
#include <set>
#include <optional>

#include <fmt/format.h>
#include <nlohmann/json.hpp>

#include "core/file_io.h"
#include "core/message_tags.h"
#include "data/training_data.h"
#include "plan/lower.h"
#include "plan/plan_io.h"
#include "plan/transfer_order.h"
#include "runtime/train/checkpoint.h"
#include "runtime/comm/communicator.h"
#include "runtime/device/cuda_device.h"
#include "runtime/train/evaluate.h"
#include "runtime/executor/executor.h"
#include "runtime/model/llama_model.h"
#include "runtime/train/lr_schedule.h"
#include "runtime/emulation/memory_ledger.h"
#include "runtime/train/metrics_log.h"
#include "runtime/model/precision_dtypes.h"
#include "runtime/device/rank_device.h"
#include "sim/routing_costs.h"
#include "sim/cost_model.h"
#include "sim/profile.h"
#include "sim/replan.h"
#include "sim/simulator.h"
#include "core/shard_index.h"
#include "core/units.h"

namespace motley {
namespace fs = std::filesystem;
namespace {

using Clock = std::chrono::steady_clock;
constexpr int kRankFields = 9;  // compute, comm, copy, step, bytes sent, peak memory, pruned, migrated, late

// The plan must describe the job's batch: same sequence length, global batch and precision.
Status CheckPlanMatchesJob(const Plan& plan, const JobSpec& job, const std::string& plan_path) {
  const TrainingConfig& tc = job.training;
  if (plan.seq_len != tc.seq_len)
    return Status::InvalidArgument(fmt::format("{}: seq_len = {} but the job {} trains with seq_len = {}; plan the "
                                               "job again (motley plan) or fix [training] seq_len",
                                               plan_path, plan.seq_len, job.file, tc.seq_len));
  if (plan.global_batch_sequences() != tc.global_batch_sequences)
    return Status::InvalidArgument(fmt::format(
        "{}: the plan's microbatches add up to {} sequences a step but the job {} has global_batch_sequences = {}; "
        "make microbatch_size x num_microbatches of each group sum to {}",
        plan_path, plan.global_batch_sequences(), job.file, tc.global_batch_sequences, tc.global_batch_sequences));
  if (plan.precision != tc.precision)
    return Status::InvalidArgument(fmt::format("{}: precision = \"{}\" but the job {} says \"{}\"; make them agree",
                                               plan_path, PrecisionName(plan.precision), job.file,
                                               PrecisionName(tc.precision)));
  const bool clipping = job.optimizer.grad_clip_norm > 0;
  if (plan.gradient_clipping != clipping)
    return Status::InvalidArgument(fmt::format(
        "{}: gradient_clipping = {}{} but the job {} has [optimizer] grad_clip_norm = {}; the plan's schedule "
        "places the updates by it — set gradient_clipping = {} in the plan (or plan the job again)",
        plan_path, plan.gradient_clipping, plan.gradient_clipping ? " (the default)" : "", job.file,
        job.optimizer.grad_clip_norm, clipping));
  return Status::Ok();
}

// Every rank's per-step figures, on every rank.
Result<std::vector<RankStepTimes>> GatherRankTimes(Communicator& comm, const RankStepReport& r) {
  torch::Tensor mine = torch::tensor(
      {r.compute_s, r.comm_s, r.copy_s, r.step_s, r.bytes_sent, r.peak_memory_bytes, r.pruned_fraction,
       static_cast<double>(r.migrated_units), r.late_s},
      torch::kFloat64);
  torch::Tensor all = torch::empty({comm.world_size() * kRankFields}, torch::kFloat64);
  MOTLEY_RETURN_IF_ERROR(comm.AllGather(comm.world(), mine, all));
  std::vector<RankStepTimes> out;
  auto a = all.accessor<double, 1>();
  for (int k = 0; k < comm.world_size(); ++k) {
    const int b = k * kRankFields;
    out.push_back({k, a[b], a[b + 1], a[b + 2], a[b + 3] - a[b], a[b + 8], a[b + 4], a[b + 5], a[b + 6], a[b + 7]});
  }
  return out;
}

// Every rank's trace events of one step, on rank 0.
Result<std::vector<TraceEvent>> GatherTrace(Communicator& comm, const std::vector<TraceEvent>& mine) {
  constexpr int kFields = 5;  // op, start, end, host start, host end
  torch::Tensor counts = torch::zeros({comm.world_size()}, torch::kInt64);
  counts[comm.rank()] = static_cast<int64_t>(mine.size());
  MOTLEY_RETURN_IF_ERROR(comm.AllReduceSum(comm.world(), counts));
  auto pack = [](const std::vector<TraceEvent>& ev) {
    torch::Tensor t = torch::empty({static_cast<int64_t>(ev.size()) * kFields + 1}, torch::kFloat64);
    for (size_t i = 0; i < ev.size(); ++i) {
      const double fields[kFields] = {static_cast<double>(ev[i].op), ev[i].start_s, ev[i].end_s, ev[i].host_start_s,
                                      ev[i].host_end_s};
      for (int k = 0; k < kFields; ++k) t[kFields * i + k] = fields[k];
    }
    return t;
  };
  std::vector<TraceEvent> out;
  const int64_t tag = MessageTag(TagRange::kTrace, 0);
  if (comm.rank() != 0) {
    MOTLEY_ASSIGN_OR_RETURN(PendingTransfer p, comm.Send(pack(mine), 0, tag));
    MOTLEY_RETURN_IF_ERROR(p.Wait());
    return out;
  }
  out = mine;
  for (int r = 1; r < comm.world_size(); ++r) {
    torch::Tensor t = torch::empty({counts[r].item<int64_t>() * kFields + 1}, torch::kFloat64);
    MOTLEY_ASSIGN_OR_RETURN(PendingTransfer p, comm.Recv(t, r, tag));
    MOTLEY_RETURN_IF_ERROR(p.Wait());
    const auto at = [&](int64_t i, int k) { return t[kFields * i + k].item<double>(); };
    for (int64_t i = 0; i < counts[r].item<int64_t>(); ++i)
      out.push_back({r, static_cast<int>(at(i, 0)), at(i, 1), at(i, 2), at(i, 3), at(i, 4)});
  }
  return out;
}

// A whole model on rank 0 holding the gathered parameters, with AdamW shards for checkpoints.
struct AssembledModel {
  LlamaModel model{nullptr};
  std::vector<ParamShard> shards;
};
AssembledModel Assemble(const ModelSpec& spec, Precision precision, const Executor::FullState& state) {
  AssembledModel a;
  a.model = LlamaModel(spec, 0);
  a.model->set_precision(precision);
  torch::NoGradGuard no_grad;
  for (auto& p : a.model->named_parameters()) p.value().copy_(state.params.at(p.key()));
  a.shards = WholeParameterShards(*a.model);
  for (auto& s : a.shards) {
    s.exp_avg = state.exp_avg.at(s.name);
    s.exp_avg_sq = state.exp_avg_sq.at(s.name);
  }
  return a;
}

// One rank's run of a plan: set up once, then step, record, validate and checkpoint.
class PlannedRun {
 public:
  static Result<std::unique_ptr<PlannedRun>> Start(const JobSpec& job, const TrainOptions& options,
                                                   TrainObserver* observer);
  bool done() const { return state_.step >= total_steps_; }
  /// One step: this rank's program, every rank's figures, the trace when asked for.
  Status Step();
  Status Validate(int64_t step);
  Status Checkpoint();
  Status ShardedCheckpoint(int64_t* host_bytes);
  /// This rank ends with an error: the others hear of it at once (Communicator::ReportFailure).
  bool AnotherRankFailedFirst() { return comm_ && comm_->AnotherRankFailedFirst(); }
  void ReportFailure(const std::string& why) {
    if (comm_) comm_->ReportFailure(why);
  }
  /// Throughput, the per-rank averages and the simulator's account of the same schedule.
  Result<TrainSummary> Finish();

  int64_t step() const { return state_.step; }
  int rank() const { return comm_ ? comm_->rank() : 0; }
  int device() const { return schedule_.programs.empty() ? -1 : schedule_.programs[rank()].device; }
  int64_t total_steps() const { return total_steps_; }
  int64_t steps_run() const { return summary_.steps_run; }

 private:
  PlannedRun(const JobSpec& job, const TrainOptions& options) : job_(job), options_(options) {}
  Status SetUp(TrainObserver* observer);
  Status Record(const StepInputs& in, const RankStepReport& report, const std::vector<RankStepTimes>& ranks);
  // Live rebalancing ([straggler_detection] rebalance).
  Status Rebalance(const std::vector<StragglerMonitor::Change>& changes);
  Status SwitchTo(const Plan& next);

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
  std::unique_ptr<StragglerMonitor> stragglers_;  // every rank's compute against its own norm
  std::vector<StragglerMonitor::Change> changes_;  // the last step's
  ExecutorConfig executor_config_;
  // Live rebalancing: the slowdowns the current plan was made for (device -> factor), and each
  // rank's change since (its last straggling or recovery's factor; 1 = none).
  std::map<int, double> planned_slowdown_;
  std::vector<double> changed_factor_;
  std::unique_ptr<RunDirLock> dir_lock_;  // rank 0: the run's folder is this run's
  TrainerState state_;
  TrainSummary summary_;
  bool lead_ = false;
  int64_t total_steps_ = 0, tokens_per_step_ = 0, val_sequences_ = 0;
  std::vector<int64_t> windows_;
  // Steps after the first (the first warms up), summed.
  Clock::time_point run_start_;
  double timed_s_ = 0;
  int64_t timed_tokens_ = 0, timed_steps_ = 0;
  std::vector<RankStepTimes> rank_sums_;
};

Result<std::unique_ptr<PlannedRun>> PlannedRun::Start(const JobSpec& job, const TrainOptions& options,
                                                      TrainObserver* observer) {
  auto run = std::unique_ptr<PlannedRun>(new PlannedRun(job, options));
  if (Status s = run->SetUp(observer); !s.ok()) {
    // Once connected, the others hear of it now (naming this rank), not at a collective's timeout.
    if (run->AnotherRankFailedFirst()) return Status::PeerFailed(s.message());
    run->ReportFailure(s.message());
    return s;
  }
  return run;
}

Status PlannedRun::SetUp(TrainObserver* observer) {
  const JobSpec& job = job_;
  const TrainOptions& options = options_;
  const TrainingConfig& tc = job.training;
  total_steps_ = options.steps > 0 ? options.steps : tc.steps;
  if (tc.precision == Precision::kFp16)
    return Status::InvalidArgument("[training] precision = \"fp16\": the multi-process runtime has no loss scaling "
                                   "yet; use \"bf16\" (same speed on GPUs since Ampere) or \"fp32\"");
  at::set_num_threads(options.threads > 0 ? options.threads : 1);
  MemoryLedger& ledger = MemoryLedger::Install();  // counts every tensor from here on

  MOTLEY_ASSIGN_OR_RETURN(plan_, LoadPlanFile(options.plan_path));
  MOTLEY_RETURN_IF_ERROR(CheckPlanMatchesJob(plan_, job, options.plan_path));
  FillDefaultRouting(&plan_, job.cluster, job.model);  // a hand-written plan's: as simulate's
  MOTLEY_ASSIGN_OR_RETURN(schedule_, LowerPlan(plan_, job.cluster, job.model));
  // Transfers and collectives match in the order they are issued (NCCL's rule, and Gloo's here).
  if (std::string problem = CheckTransferOrder(schedule_); !problem.empty())
    return Status::Internal(fmt::format("{}: the plan's schedule cannot run: {}", options.plan_path, problem));
  MOTLEY_ASSIGN_OR_RETURN(Rendezvous rv, RendezvousFromEnv());
  rv.rank = PlanRankOf(schedule_, job.cluster, rv.launcher_rank, rv.world_size);  // each device runs its own part
  MOTLEY_ASSIGN_OR_RETURN(torch::Device rank_device, RankDevice(options.device, rv));
  SetCurrentDevice(rank_device);
  CommConfig comm_config;
  comm_config.gpu = rank_device.is_cuda();
  MOTLEY_ASSIGN_OR_RETURN(comm_, Communicator::Connect(rv, comm_config));
  lead_ = comm_->rank() == 0;
  if (observer != nullptr && lead_) observer_ = observer;

  const std::string job_dir = job.file.empty() ? "" : fs::path(job.file).parent_path().string();
  MOTLEY_ASSIGN_OR_RETURN(TrainingData data, OpenTrainingData(job.data, job_dir, job.model.vocab_size, tc.seq_len));
  data_ = std::make_unique<TrainingData>(std::move(data));

  LlamaModel model(job.model, tc.seed);
  model->set_precision(tc.precision);
  ExecutorConfig config;
  config.device = rank_device;
  config.master_dtype = MasterDtype(tc.precision);
  config.compute_dtype = MixedComputeDtype(tc.precision);
  config.optimizer = job.optimizer;
  config.tensor_parallel = job.tensor_parallel;
  config.stragglers = job.stragglers;
  config.cpu_copy_threads = options.cpu_copy_threads;
  executor_config_ = config;
  // Resuming: every rank reads the checkpoint (the weights before its ministages are cut out,
  // the moments after) — the same files a single-process run writes and reads.
  TrainerState loaded;
  std::map<std::string, torch::Tensor> exp_avg, exp_avg_sq;
  if (!options.resume.empty()) {
    MOTLEY_ASSIGN_OR_RETURN(std::string dir, ResolveCheckpointDir(options.resume));
    // Only the parameters this rank holds are read (from a sharded checkpoint: only the files that
    // hold their pieces, whatever plan wrote them).
    const std::set<std::string> mine = RankParameterNames(schedule_, comm_->rank(), *model);
    MOTLEY_RETURN_IF_ERROR(LoadModelWeights(dir, *model, mine));
    std::vector<ParamShard> whole = WholeParameterShards(*model);
    std::erase_if(whole, [&](const ParamShard& s) { return !mine.count(s.name); });
    MOTLEY_ASSIGN_OR_RETURN(loaded, LoadTrainingState(dir, whole));
    MOTLEY_RETURN_IF_ERROR(CheckResumable(dir, loaded.seed, loaded.step, job, total_steps_));
    for (const auto& s : whole) {
      exp_avg[s.name] = s.exp_avg;
      exp_avg_sq[s.name] = s.exp_avg_sq;
    }
  }
  // The model stays on the CPU: each rank's ministage buffers are made on its device from it.
  MOTLEY_ASSIGN_OR_RETURN(executor_, Executor::Create(schedule_, job.cluster, model, comm_.get(), config));
  if (!options.resume.empty()) MOTLEY_RETURN_IF_ERROR(executor_->LoadMoments(exp_avg, exp_avg_sq));
  // The emulated device's memory, from here on (the whole model was built above only to
  // initialise every rank's part identically).
  const int device = executor_->program().device;
  if (const EmulationConfig* emu = job.cluster.emulation(device); emu != nullptr) {
    ledger.set_capacity_bytes(static_cast<int64_t>(job.cluster.memory_bytes(device)));
    ledger.set_owner(fmt::format("rank {} (device {} of {}, emulated)", comm_->rank(), device, job.cluster.name));
  }

  const std::string metrics_path =
      options.metrics_path.empty() ? (fs::path(job.checkpoint.dir) / "metrics.jsonl").string() : options.metrics_path;
  if (lead_) {
    MOTLEY_ASSIGN_OR_RETURN(dir_lock_, RunDirLock::Acquire(job.checkpoint.dir));
    if (options.checkpoint_at_end)
      MOTLEY_RETURN_IF_ERROR(ClaimRunDir(job.checkpoint.dir, !options.resume.empty(), options.overwrite, true));
    MOTLEY_RETURN_IF_ERROR(metrics_.Open(metrics_path));
  }

  tokens_per_step_ = tc.global_batch_sequences * tc.seq_len;
  TrainStart start;
  start.device = fmt::format("{} rank{} on {} ({} plan, {})", comm_->world_size(), comm_->world_size() == 1 ? "" : "s",
                             rank_device.is_cuda() ? "CUDA, one GPU each" : "CPU", plan_.strategy, options.plan_path);
  start.precision = std::string(PrecisionName(tc.precision));
  start.schedule_hash = ScheduleHash(schedule_);
  start.parameters = TotalParams(job.model);
  start.total_steps = total_steps_;
  start.first_step = loaded.step;
  start.tokens_per_step = tokens_per_step_;
  start.train_data = data_->train.name();
  start.validation_data = data_->validation ? data_->validation->name() : "";
  start.metrics_path = metrics_path;
  observer_->OnStart(start);

  state_.total_steps = total_steps_;
  state_.seed = tc.seed;
  state_.precision = start.precision;
  state_.job_file = job.file;
  state_.step = loaded.step;
  state_.updates = loaded.updates;
  state_.tokens_seen = loaded.tokens_seen;
  val_sequences_ = data_->validation
                       ? std::min(job.data.validation_sequences, NumEvaluationWindows(*data_->validation, tc.seq_len))
                       : 0;
  rank_sums_.assign(comm_->world_size(), {});
  stragglers_ = std::make_unique<StragglerMonitor>(job.straggler_detection, comm_->world_size());
  changed_factor_.assign(comm_->world_size(), 1.0);
  run_start_ = Clock::now();
  return Status::Ok();
}

Status PlannedRun::Validate(int64_t step) {
  if (val_sequences_ <= 0 || !options_.validate) return Status::Ok();
  HostMemoryScope host;  // the gathered model is host memory, not the (emulated) device's
  MOTLEY_ASSIGN_OR_RETURN(Executor::FullState full, executor_->GatherFullState());
  if (lead_) {
    AssembledModel a = Assemble(job_.model, job_.training.precision, full);
    a.model->eval();
    MOTLEY_ASSIGN_OR_RETURN(const EvalResult eval, EvaluateLoss(*a.model, *data_->validation, job_.training.seq_len,
                                                                val_sequences_, torch::kCPU));
    const double loss = eval.loss;
    if (!summary_.first_validation_loss) summary_.first_validation_loss = loss;
    summary_.last_validation_loss = loss;
    MOTLEY_RETURN_IF_ERROR(metrics_.Write({{"step", step}, {"val_loss", loss}}));
    observer_->OnValidation(step, loss);
  }
  return comm_->Barrier(comm_->world());
}

// A checkpoint, in the job's form. The metrics record how much host memory it took on a rank
// (sharded: the most any rank added; consolidated: rank 0's, which holds the whole model).
Status PlannedRun::Checkpoint() {
  MemoryLedger& ledger = MemoryLedger::Install();
  ledger.ResetHostPeak();
  const int64_t host_before = ledger.host_used_bytes();
  int64_t host_bytes = 0;
  if (job_.checkpoint.format == "sharded") {
    MOTLEY_RETURN_IF_ERROR(ShardedCheckpoint(&host_bytes));
  } else {
    HostMemoryScope host;  // the gathered model is host memory, not the (emulated) device's
    MOTLEY_ASSIGN_OR_RETURN(Executor::FullState full, executor_->GatherFullState());
    if (lead_) {
      AssembledModel a = Assemble(job_.model, job_.training.precision, full);
      MOTLEY_ASSIGN_OR_RETURN(summary_.checkpoint_dir, SaveRunCheckpoint(job_.checkpoint.dir, job_.checkpoint.keep,
                                                                         *a.model, a.shards, state_));
      host_bytes = ledger.host_peak_bytes() - host_before;
    }
  }
  if (lead_) {
    MOTLEY_RETURN_IF_ERROR(metrics_.Write({{"event", "checkpoint"},
                                           {"step", state_.step},
                                           {"form", job_.checkpoint.format},
                                           {"dir", summary_.checkpoint_dir},
                                           {"host_bytes", host_bytes}}));
    observer_->OnCheckpoint(summary_.checkpoint_dir);
  }
  return comm_->Barrier(comm_->world());
}

// Every rank writes the state it owns at once; rank 0 then writes the index and moves the folder
// into place (checkpoint.h). Nothing is gathered: a rank's host holds no more than its own state.
// `host_bytes` (rank 0): the most host memory a rank added while writing.
Status PlannedRun::ShardedCheckpoint(int64_t* host_bytes) {
  MemoryLedger& ledger = MemoryLedger::Install();
  const int64_t host_before = ledger.host_used_bytes();
  HostMemoryScope host;  // the pieces' host copies are host memory, not the (emulated) device's
  std::string tmp;
  if (lead_) {
    MOTLEY_ASSIGN_OR_RETURN(tmp, BeginShardedCheckpoint(job_.checkpoint.dir, state_.step));
  }
  MOTLEY_RETURN_IF_ERROR(comm_->Barrier(comm_->world()));
  if (!lead_) tmp = (fs::path(job_.checkpoint.dir) / (CheckpointFolderName(state_.step) + ".tmp")).string();
  MOTLEY_ASSIGN_OR_RETURN(const CheckpointFileRecord mine, WriteRankShards(tmp, comm_->rank(), executor_->OwnedState()));
  if (comm_->rank() == options_.die_rank && options_.die_in_checkpoint && state_.step == options_.die_at_step)
    ::raise(SIGKILL);  // fault injection: a rank lost with the checkpoint half written
  // Each rank's file record and host memory to every rank: bytes, CRC-32, host bytes added.
  torch::Tensor record = torch::tensor({mine.bytes, static_cast<int64_t>(mine.crc32),
                                        ledger.host_peak_bytes() - host_before},
                                       torch::kInt64);
  torch::Tensor records = torch::empty({3 * comm_->world_size()}, torch::kInt64);
  MOTLEY_RETURN_IF_ERROR(comm_->AllGather(comm_->world(), record, records));
  if (lead_) {
    std::vector<CheckpointFileRecord> files;
    for (int r = 0; r < comm_->world_size(); ++r) {
      files.push_back({records[3 * r].item<int64_t>(), static_cast<uint32_t>(records[3 * r + 1].item<int64_t>())});
      *host_bytes = std::max(*host_bytes, records[3 * r + 2].item<int64_t>());
    }
    MOTLEY_ASSIGN_OR_RETURN(summary_.checkpoint_dir, FinishShardedCheckpoint(job_.checkpoint.dir, job_.checkpoint.keep,
                                                                             tmp, job_.model, files, state_));
  }
  return Status::Ok();
}

Status PlannedRun::Step() {
  const int64_t step = state_.step, seq = job_.training.seq_len;
  const bool trace = !options_.trace_path.empty() && step + 1 == std::min(options_.trace_step, total_steps_);
  if (trace) MOTLEY_RETURN_IF_ERROR(comm_->Barrier(comm_->world()));  // one time origin for every rank
  StepInputs in;
  in.step = step;
  in.lr = LearningRate(job_.optimizer, job_.lr_schedule, step, total_steps_);
  in.update = state_.updates + 1;
  in.tokens = [&](int64_t first, int64_t n) {
    // The executor takes tokens from a callback; a shard cut short under the job is an exception
    // here, turned into this rank's error by the rank's guard (and named to the others).
    if (Status read = SampleTrainingWindows(data_->train, job_.training.seed, step, first, n, seq, &windows_);
        !read.ok())
      throw std::runtime_error(read.message());
    return torch::from_blob(windows_.data(), {n, seq + 1}, torch::kInt64).clone();
  };
  in.die_mid_step =
      comm_->rank() == options_.die_rank && step + 1 == options_.die_at_step && !options_.die_in_checkpoint;
  if (comm_->rank() == options_.perturb_rank) {
    in.loss_factor = options_.perturb_loss_factor;
    in.loss_factor_microbatch = options_.perturb_microbatch;
  }
  executor_->set_record_trace(trace);
  MOTLEY_ASSIGN_OR_RETURN(RankStepReport report, executor_->RunStep(in));
  MOTLEY_ASSIGN_OR_RETURN(std::vector<RankStepTimes> ranks, GatherRankTimes(*comm_, report));
  if (trace) {
    MOTLEY_ASSIGN_OR_RETURN(std::vector<TraceEvent> events, GatherTrace(*comm_, report.trace));
    if (lead_) {
      SimResult sim;
      sim.trace = std::move(events);
      MOTLEY_RETURN_IF_ERROR(AtomicWriteFile(options_.trace_path, ChromeTraceJson(schedule_, job_.cluster, sim)));
      summary_.trace_path = options_.trace_path;
    }
  }
  MOTLEY_RETURN_IF_ERROR(Record(in, report, ranks));
  if (job_.straggler_detection.rebalance && !changes_.empty() && !done()) return Rebalance(changes_);
  return Status::Ok();
}

Status PlannedRun::Record(const StepInputs& in, const RankStepReport& report,
                          const std::vector<RankStepTimes>& ranks) {
  ++state_.step;
  ++state_.updates;
  state_.tokens_seen += tokens_per_step_;
  StepMetrics m;
  m.step = state_.step;
  m.total_steps = total_steps_;
  m.loss = report.loss;
  m.lr = in.lr;
  m.grad_norm = report.grad_norm;
  m.step_time_s = 0;
  for (const auto& r : ranks) m.step_time_s = std::max(m.step_time_s, r.compute_s + r.idle_s);
  m.tokens_per_s = static_cast<double>(tokens_per_step_) / m.step_time_s;
  m.ranks = ranks;
  m.flextp = job_.tensor_parallel.mode != "off";
  for (const auto& r : ranks) {
    m.pruned_fraction = std::max(m.pruned_fraction, r.pruned_fraction);
    m.migrated_units = std::max(m.migrated_units, r.migrated_units);
  }
  if (summary_.steps_run == 0) summary_.first_loss = m.loss;
  summary_.last_loss = m.loss;
  if (++summary_.steps_run > 1) {
    timed_s_ += m.step_time_s;
    timed_tokens_ += tokens_per_step_;
    ++timed_steps_;
    for (size_t k = 0; k < ranks.size(); ++k) {
      rank_sums_[k].rank = static_cast<int>(k);
      rank_sums_[k].compute_s += ranks[k].compute_s;
      rank_sums_[k].comm_s += ranks[k].comm_s;
      rank_sums_[k].copy_s += ranks[k].copy_s;
      rank_sums_[k].idle_s += ranks[k].idle_s;
      rank_sums_[k].late_s += ranks[k].late_s;
      rank_sums_[k].bytes_sent += ranks[k].bytes_sent;
      rank_sums_[k].peak_memory_bytes = std::max(rank_sums_[k].peak_memory_bytes, ranks[k].peak_memory_bytes);
    }
  }
  std::vector<double> compute_s;
  for (const auto& r : ranks) compute_s.push_back(r.compute_s);
  changes_ = stragglers_->Observe(compute_s);
  for (const StragglerMonitor::Change& c : changes_) {
    const int device = schedule_.programs[c.rank].device;
    observer_->OnStraggler(m.step, c.rank, fmt::format("device {}, {}", device, job_.cluster.spec(device).name),
                           c.slowdown, c.straggling);
  }
  if (lead_) {
    nlohmann::json per_rank = nlohmann::json::array(), straggling = nlohmann::json::array();
    for (const auto& r : ranks) {
      if (stragglers_->straggling(r.rank))
        straggling.push_back({{"rank", r.rank}, {"slowdown", stragglers_->slowdown(r.rank)}});
      per_rank.push_back({{"rank", r.rank},
                          {"slowdown", stragglers_->slowdown(r.rank)},
                          {"compute_s", r.compute_s},
                          {"comm_s", r.comm_s},
                          {"copy_s", r.copy_s},
                          {"idle_s", r.idle_s},
                          {"late_s", r.late_s},
                          {"bytes_sent", r.bytes_sent},
                          {"peak_memory_bytes", r.peak_memory_bytes}});
    }
    MOTLEY_RETURN_IF_ERROR(metrics_.Write({{"step", m.step},
                    {"loss", m.loss},
                    {"lr", m.lr},
                    {"tokens_per_s", m.tokens_per_s},
                    {"grad_norm", m.grad_norm},
                    {"step_time_s", m.step_time_s},
                    {"pruned_fraction", m.pruned_fraction},
                    {"migrated_units", m.migrated_units},
                    {"stragglers", straggling},
                    {"ranks", per_rank}}));
  }
  observer_->OnStep(m);
  return Status::Ok();
}

// Rank 0's text to every rank ("" included).
Result<std::string> BroadcastText(Communicator& comm, const std::string& text) {
  torch::Tensor size = torch::tensor({static_cast<int64_t>(text.size())}, torch::kInt64);
  MOTLEY_RETURN_IF_ERROR(comm.Broadcast(comm.world(), size, 0));
  const int64_t n = size.item<int64_t>();
  if (n == 0) return std::string();
  torch::Tensor bytes = torch::empty({n}, torch::kUInt8);
  if (comm.rank() == 0) std::memcpy(bytes.data_ptr(), text.data(), static_cast<size_t>(n));
  MOTLEY_RETURN_IF_ERROR(comm.Broadcast(comm.world(), bytes, 0));
  return std::string(static_cast<const char*>(bytes.data_ptr()), static_cast<size_t>(n));
}

// Every rank's text, by rank.
Result<std::vector<std::string>> AllGatherText(Communicator& comm, const std::string& text) {
  const int world = comm.world_size();
  torch::Tensor size = torch::tensor({static_cast<int64_t>(text.size())}, torch::kInt64);
  torch::Tensor sizes = torch::empty({world}, torch::kInt64);
  MOTLEY_RETURN_IF_ERROR(comm.AllGather(comm.world(), size, sizes));
  std::vector<int64_t> counts(static_cast<size_t>(world));
  int64_t total = 0;
  for (int r = 0; r < world; ++r) total += counts[r] = sizes[r].item<int64_t>();
  torch::Tensor mine = torch::empty({static_cast<int64_t>(text.size())}, torch::kUInt8);
  if (!text.empty()) std::memcpy(mine.data_ptr(), text.data(), text.size());
  torch::Tensor all = torch::empty({total}, torch::kUInt8);
  MOTLEY_RETURN_IF_ERROR(comm.AllGather(comm.world(), mine, all, counts));
  std::vector<std::string> out;
  const char* at = static_cast<const char*>(all.data_ptr());
  for (int r = 0; r < world; ++r) {
    out.emplace_back(at, static_cast<size_t>(counts[r]));
    at += counts[r];
  }
  return out;
}

// Every rank saw the same changes (the figures behind them are all-gathered), so all of them come
// here together: rank 0 plans for the devices as measured, every rank switches when it says so.
Status PlannedRun::Rebalance(const std::vector<StragglerMonitor::Change>& changes) {
  const int64_t step = state_.step;
  const StragglerDetectionConfig& config = job_.straggler_detection;
  // Against what the current plan was made for: a straggler's slowdown, a recovery's speed-up (a
  // norm measured slow), or nothing any more.
  for (const StragglerMonitor::Change& c : changes) {
    const int device = schedule_.programs[c.rank].device;
    const bool planned_slow = planned_slowdown_.count(device) > 0;
    changed_factor_[c.rank] = c.straggling != planned_slow ? c.slowdown : 1.0;
  }
  Cluster measured = job_.cluster;
  measured.measured_slowdown = planned_slowdown_;
  for (size_t r = 0; r < changed_factor_.size(); ++r) {
    const int device = schedule_.programs[r].device;
    auto it = measured.measured_slowdown.try_emplace(device, 1.0).first;
    it->second *= changed_factor_[r];
    if (std::abs(it->second - 1) < 1e-3) measured.measured_slowdown.erase(it);
  }
  std::string text, message;
  nlohmann::json event = {{"event", "rebalance"}, {"step", step}};
  if (lead_) {
    const TrainingConfig& tc = job_.training;
    PlanRequest request;
    request.global_batch_sequences = tc.global_batch_sequences;
    request.seq_len = tc.seq_len;
    request.precision = tc.precision;
    request.activation_checkpointing = plan_.activation_checkpointing;
    request.gradient_clipping = job_.optimizer.grad_clip_norm > 0;
    std::optional<Profile> profile;
    std::string profile_path = options_.profile_path;
    if (profile_path.empty() && !job_.plan.profile.empty())
      profile_path = fs::path(job_.plan.profile).is_absolute() || job_.file.empty()
                         ? job_.plan.profile
                         : (fs::path(job_.file).parent_path() / job_.plan.profile).string();
    if (!profile_path.empty()) {
      Result<Profile> p = LoadProfileFile(profile_path);
      if (p.ok()) profile = *p;
    }
    std::string slowdowns;
    nlohmann::json by_device = nlohmann::json::object();
    for (const auto& [device, f] : measured.measured_slowdown) {
      slowdowns += fmt::format("{}device {} {:.2f}x", slowdowns.empty() ? "" : ", ", device, f);
      by_device[std::to_string(device)] = f;
    }
    event["slowdowns"] = by_device;
    Result<Replanned> r = ReplanInPlace(plan_, measured, job_.model, profile ? &*profile : nullptr, request);
    if (!r.ok()) {
      message = fmt::format("no plan for the devices as measured ({}): {}; the run goes on with its plan",
                            slowdowns.empty() ? "as planned" : slowdowns, r.status().message());
    } else {
      event["predicted_step_s"] = r->predicted_step_s;
      event["current_step_s"] = r->current_step_s;
      if (r->predicted_step_s > r->current_step_s * (1 - config.rebalance_min_gain)) {
        message = fmt::format("devices as measured ({}): a new plan ({}) would step in {} against the current plan's "
                              "{}; not worth a switch ([straggler_detection] rebalance_min_gain {:.0f}%)",
                              slowdowns.empty() ? "as planned" : slowdowns, r->why, FormatDuration(r->predicted_step_s),
                              FormatDuration(r->current_step_s), 100 * config.rebalance_min_gain);
      } else {
        text = PlanToToml(r->plan);
        const std::string path = (fs::path(job_.checkpoint.dir) / fmt::format("plan-step-{:06d}.toml", step)).string();
        MOTLEY_RETURN_IF_ERROR(AtomicWriteFile(path, text));
        event["plan"] = path;
        message = fmt::format("devices as measured ({}): switching to {} — predicted step {} (the current plan's: {}); "
                              "the plan: {}",
                              slowdowns.empty() ? "as planned" : slowdowns, r->why, FormatDuration(r->predicted_step_s),
                              FormatDuration(r->current_step_s), path);
      }
    }
  }
  MOTLEY_ASSIGN_OR_RETURN(text, BroadcastText(*comm_, text));
  event["switched"] = !text.empty();
  if (!text.empty()) {
    MOTLEY_ASSIGN_OR_RETURN(Plan next, ParsePlanToml(text, "the rebalanced plan"));
    const auto start = Clock::now();
    MOTLEY_RETURN_IF_ERROR(SwitchTo(next));
    event["switch_s"] = std::chrono::duration<double>(Clock::now() - start).count();
    planned_slowdown_ = measured.measured_slowdown;
    changed_factor_.assign(changed_factor_.size(), 1.0);
    std::vector<bool> slow;
    for (const Program& p : schedule_.programs) slow.push_back(planned_slowdown_.count(p.device) > 0);
    stragglers_->Restart(slow);
  }
  if (lead_) {
    event["message"] = message;
    MOTLEY_RETURN_IF_ERROR(metrics_.Write(event));
    observer_->OnRebalance(step, message);
  }
  return Status::Ok();
}

// The switch at a step boundary: the new plan's schedule, this rank's new part of the state from the
// ranks that hold it now (over c10d; nothing is written), then the new executor. Every rank keeps
// its device (ReplanInPlace).
Status PlannedRun::SwitchTo(const Plan& next_plan) {
  const int world = comm_->world_size(), me = comm_->rank();
  const TrainingConfig& tc = job_.training;
  MOTLEY_ASSIGN_OR_RETURN(Schedule next, LowerPlan(next_plan, job_.cluster, job_.model));
  if (std::string problem = CheckTransferOrder(next); !problem.empty())
    return Status::Internal(fmt::format("the rebalanced plan's schedule cannot run: {}", problem));
  for (int r = 0; r < world; ++r)
    if (next.programs[r].device != schedule_.programs[r].device)
      return Status::Internal(fmt::format("the rebalanced plan moves rank {} from device {} to {}", r,
                                          schedule_.programs[r].device, next.programs[r].device));
  std::map<std::string, torch::Tensor> whole[3];  // what this rank's new part holds: values, moments
  LlamaModel model(nullptr);
  {
    HostMemoryScope host;  // the state on its way is host memory, as a GPU rank stages it
    torch::NoGradGuard no_grad;
    model = LlamaModel(job_.model, tc.seed);
    model->set_precision(tc.precision);
    std::vector<std::set<std::string>> needs;
    for (int q = 0; q < world; ++q) needs.push_back(RankParameterNames(next, q, *model));
    // Every rank's pieces, known to all: which elements of which parameter each owns now.
    std::vector<StatePiece> mine = executor_->OwnedState();
    nlohmann::json list = nlohmann::json::array();
    for (const StatePiece& p : mine)
      list.push_back({p.param, p.shape, p.tp_degree, p.tp_index, p.begin, p.values.numel()});
    MOTLEY_ASSIGN_OR_RETURN(std::vector<std::string> lists, AllGatherText(*comm_, list.dump()));
    ShardIndex index;
    std::vector<std::pair<int, size_t>> owner;  // per piece: (rank, index in its list)
    for (int r = 0; r < world; ++r) {
      const nlohmann::json theirs = nlohmann::json::parse(lists[r]);
      for (size_t i = 0; i < theirs.size(); ++i) {
        const nlohmann::json& p = theirs[i];
        index.parameters[p[0].get<std::string>()] = {p[1].get<std::vector<int64_t>>(), p[2].get<int>()};
        index.pieces.push_back({fmt::format("rank {}", r), p[0].get<std::string>(), p[3].get<int>(),
                                p[4].get<int64_t>(), p[5].get<int64_t>()});
        owner.push_back({r, i});
      }
    }
    MOTLEY_RETURN_IF_ERROR(ValidateShardIndex(index, "the state to move"));
    // Each piece to the ranks whose new part needs its parameter: receives first, then sends.
    const torch::Dtype dtype = executor_config_.master_dtype;
    std::vector<std::array<torch::Tensor, 3>> received(index.pieces.size());
    std::vector<PendingTransfer> pending;
    for (size_t i = 0; i < index.pieces.size(); ++i) {
      const ShardPiece& p = index.pieces[i];
      if (owner[i].first == me || !needs[me].count(p.param)) continue;
      for (int k = 0; k < 3; ++k) {
        received[i][k] = torch::empty({p.count}, dtype);
        MOTLEY_ASSIGN_OR_RETURN(PendingTransfer t, comm_->Recv(received[i][k], owner[i].first,
                                                               MessageTag(TagRange::kRebalance, 3 * static_cast<int64_t>(i) + k)));
        pending.push_back(std::move(t));
      }
    }
    for (size_t i = 0; i < index.pieces.size(); ++i) {
      if (owner[i].first != me) continue;
      const StatePiece& p = mine[owner[i].second];
      const torch::Tensor parts[3] = {p.values, p.exp_avg, p.exp_avg_sq};
      for (int q = 0; q < world; ++q) {
        if (q == me || !needs[q].count(p.param)) continue;
        for (int k = 0; k < 3; ++k) {
          MOTLEY_ASSIGN_OR_RETURN(PendingTransfer t, comm_->Send(parts[k].contiguous(), q,
                                                                 MessageTag(TagRange::kRebalance, 3 * static_cast<int64_t>(i) + k)));
          pending.push_back(std::move(t));
        }
      }
    }
    for (PendingTransfer& t : pending) MOTLEY_RETURN_IF_ERROR(t.Wait());
    // This rank's parameters, whole, from their pieces.
    std::map<std::string, std::vector<const ShardPiece*>> by_param;
    for (const ShardPiece& p : index.pieces) by_param[p.param].push_back(&p);
    for (const std::string& name : needs[me])
      for (int k = 0; k < 3; ++k) {
        auto elements = [&](const ShardPiece& p) -> Result<torch::Tensor> {
          const size_t i = static_cast<size_t>(&p - index.pieces.data());
          if (owner[i].first != me) return received[i][k];
          const StatePiece& own = mine[owner[i].second];
          return k == 0 ? own.values : k == 1 ? own.exp_avg : own.exp_avg_sq;
        };
        MOTLEY_ASSIGN_OR_RETURN(whole[k][name],
                                AssembleParameter(job_.model, name, index.parameters.at(name), by_param[name], elements, dtype));
      }
    for (auto& p : model->named_parameters())
      if (auto it = whole[0].find(p.key()); it != whole[0].end()) p.value().copy_(it->second);
  }
  // The device holds one part at a time: the old one goes before the new one is built.
  executor_.reset();
  schedule_ = std::move(next);
  plan_ = next_plan;
  MOTLEY_ASSIGN_OR_RETURN(executor_, Executor::Create(schedule_, job_.cluster, model, comm_.get(), executor_config_));
  return executor_->LoadMoments(whole[1], whole[2]);
}

Result<TrainSummary> PlannedRun::Finish() {
  const TrainingConfig& tc = job_.training;
  summary_.wall_s = std::chrono::duration<double>(Clock::now() - run_start_).count();
  SetThroughput(job_, timed_s_, timed_tokens_, &summary_);
  if (timed_steps_ > 0) {
    for (auto& r : rank_sums_) {
      r.compute_s /= static_cast<double>(timed_steps_);
      r.comm_s /= static_cast<double>(timed_steps_);
      r.copy_s /= static_cast<double>(timed_steps_);
      r.idle_s /= static_cast<double>(timed_steps_);
      r.late_s /= static_cast<double>(timed_steps_);
      r.bytes_sent /= static_cast<double>(timed_steps_);
    }
    summary_.ranks = rank_sums_;
    summary_.step_s = timed_s_ / static_cast<double>(timed_steps_);
  }
  // Hardware FLOPs per second over the plan's devices' peak, measured and predicted (not for
  // emulated devices, whose catalog peaks are nominal).
  double peak = 0;
  for (const Program& p : schedule_.programs) {
    const GpuSpec& spec = job_.cluster.spec(p.device);
    const EmulationConfig* emu = job_.cluster.emulation(p.device);
    peak += PeakFlops(spec, tc.precision) / (emu != nullptr ? emu->speed_factor : 1.0);
  }
  if (job_.cluster.emulated()) peak = 0;
  if (summary_.step_s > 0 && peak > 0) summary_.hfu = schedule_.hardware_flops_per_step / summary_.step_s / peak;
  if (lead_) {
    // The simulator's account of the same schedule: its memory always (it needs no timings), its
    // times with a profile.
    std::optional<Profile> profile;
    if (!options_.profile_path.empty()) {
      MOTLEY_ASSIGN_OR_RETURN(profile, LoadProfileFile(options_.profile_path));
    }
    CostModel costs(job_.cluster, job_.model, profile ? &*profile : nullptr, tc.seq_len, tc.precision,
                    schedule_.activation_checkpointing);
    MOTLEY_ASSIGN_OR_RETURN(SimResult sim, Simulate(schedule_, job_.cluster, costs));
    for (const auto& d : sim.devices) summary_.predicted_peak_memory_bytes.push_back(d.peak_memory_bytes);
    if (profile) {
      summary_.predicted_step_s = sim.step_time_s;
      summary_.predicted_hfu = peak > 0 ? schedule_.hardware_flops_per_step / sim.step_time_s / peak : 0;
      for (const auto& d : sim.devices) summary_.predicted_compute_s.push_back(d.compute_busy_s);
    }
  }
  return summary_;
}

}  // namespace

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
    return Status::OutOfMemory(fmt::format("{} (outside a training step: validating or checkpointing); plan with "
                                           "more memory headroom or fewer sequences a microbatch",
                                           e.what_without_backtrace()));
  }
  return Status::Ok();
}

// What failed on this rank, for a supervising `motley train` (TrainOptions::failure_report_dir).
void WriteFailureReport(const TrainOptions& options, int rank, int device, int64_t step, const Status& s) {
  if (options.failure_report_dir.empty()) return;
  const nlohmann::json j = {{"rank", rank},
                            {"device", device},
                            {"step", step},
                            {"out_of_memory", s.code() == StatusCode::kOutOfMemory},
                            {"message", s.message()}};
  std::error_code ec;
  fs::create_directories(options.failure_report_dir, ec);
  (void)AtomicWriteFile((fs::path(options.failure_report_dir) / fmt::format("rank-{}.json", rank)).string(),
                        j.dump() + "\n");
}

Result<TrainSummary> RunToTheEnd(const JobSpec& job, const TrainOptions& options, TrainObserver* observer) {
  MOTLEY_ASSIGN_OR_RETURN(std::unique_ptr<PlannedRun> run, PlannedRun::Start(job, options, observer));
  if (Status s = TrainSteps(*run, job, options); !s.ok()) {
    // The step it failed in: the one after the last finished (validating or checkpointing after
    // step N fails "in" step N + 1 too: the retry starts from a state before it).
    // A consequence of another rank's failure (which the message names): not this rank's to report.
    if (run->AnotherRankFailedFirst()) return Status::PeerFailed(s.message());
    WriteFailureReport(options, run->rank(), run->device(), run->step() + 1, s);
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
    return Status::OutOfMemory(fmt::format("{} (setting up, before the first step); "
                                           "plan with more memory headroom or fewer sequences a microbatch",
                                           e.what_without_backtrace()));
  }
}

}  // namespace motley
