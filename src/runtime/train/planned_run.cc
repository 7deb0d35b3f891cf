#include "runtime/train/planned_run.h"

#include <chrono>
#include <cmath>
#include <csignal>
#include <cstdint>
#include <filesystem>
#include <limits>
#include <memory>
#include <optional>
#include <set>
#include <stdexcept>

#include <fmt/format.h>
#include <nlohmann/json.hpp>

#include "core/file_io.h"
#include "core/message_tags.h"
#include "core/shard_index.h"
#include "core/units.h"
#include "data/training_data.h"
#include "plan/lower.h"
#include "plan/plan_io.h"
#include "plan/plan_matches_job.h"
#include "plan/transfer_order.h"
#include "runtime/comm/communicator.h"
#include "runtime/device/cuda_device.h"
#include "runtime/device/rank_device.h"
#include "runtime/emulation/memory_ledger.h"
#include "runtime/executor/executor.h"
#include "runtime/model/llama_model.h"
#include "runtime/model/precision_dtypes.h"
#include "runtime/train/checkpoint.h"
#include "runtime/train/evaluate.h"
#include "runtime/train/loaded_part.h"
#include "runtime/train/lr_schedule.h"
#include "runtime/train/metrics_log.h"
#include "sim/cost_model.h"
#include "sim/profile.h"
#include "sim/replan.h"
#include "sim/routing_costs.h"
#include "sim/simulator.h"

namespace motley {
namespace fs = std::filesystem;
namespace {

// compute, comm, copy, step, bytes sent, peak memory, pruned, migrated, late; FlexTP's load: predicted,
// prune ratio, units and heads given, units and heads received, projections lent
constexpr int kRankFields = 16;

// Every rank's per-step figures, on every rank.
Result<std::vector<RankStepTimes>> GatherRankTimes(Communicator& comm, const RankStepReport& r) {
  torch::Tensor mine =
      torch::tensor({r.compute_s, r.comm_s, r.copy_s, r.step_s, r.bytes_sent, r.peak_memory_bytes,
                     r.pruned_fraction, static_cast<double>(r.migrated_units), r.late_s, r.flextp.predicted_s,
                     r.flextp.prune_ratio, static_cast<double>(r.flextp.units_given),
                     static_cast<double>(r.flextp.heads_given), static_cast<double>(r.flextp.units_received),
                     static_cast<double>(r.flextp.heads_received), r.flextp.lend_projections ? 1.0 : 0.0},
                    torch::kFloat64);
  torch::Tensor all = torch::empty({comm.world_size() * kRankFields}, torch::kFloat64);
  MOTLEY_RETURN_IF_ERROR(comm.AllGather(comm.world(), mine, all));
  std::vector<RankStepTimes> out;
  auto a = all.accessor<double, 1>();
  for (int k = 0; k < comm.world_size(); ++k) {
    const int b = k * kRankFields;
    auto count = [&](int i) { return static_cast<int64_t>(std::llround(a[b + i])); };
    out.push_back({k,
                   a[b],
                   a[b + 1],
                   a[b + 2],
                   a[b + 3] - a[b],
                   a[b + 8],
                   a[b + 4],
                   a[b + 5],
                   a[b + 6],
                   a[b + 7],
                   {a[b + 9], a[b + 10], count(11), count(12), count(13), count(14), a[b + 15] > 0}});
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
      const double fields[kFields] = {static_cast<double>(ev[i].op), ev[i].start_s, ev[i].end_s,
                                      ev[i].host_start_s, ev[i].host_end_s};
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

}  // namespace

Result<std::unique_ptr<PlannedRun>> PlannedRun::Start(const JobSpec& job, const TrainOptions& options,
                                                      TrainObserver* observer,
                                                      std::unique_ptr<Communicator> comm) {
  auto run = std::unique_ptr<PlannedRun>(new PlannedRun(job, options));
  run->comm_ = std::move(comm);
  if (Status s = run->SetUp(observer); !s.ok()) {
    // Once connected, the others hear of it now (naming this rank), not at a collective's timeout.
    if (run->AnotherRankFailedFirst()) return Status::PeerFailed(s.message());
    run->ReportFailure(s.message());
    return s;
  }
  return run;
}

Status PlannedRun::SetUp(TrainObserver* observer) {
  const TrainingConfig& tc = job_.training;
  total_steps_ = options_.steps > 0 ? options_.steps : tc.steps;
  at::set_num_threads(options_.threads > 0 ? options_.threads : 1);
  MemoryLedger& ledger = MemoryLedger::Install();  // counts every tensor from here on
  torch::Device rank_device(torch::kCPU);
  MOTLEY_RETURN_IF_ERROR(ConnectToPlan(observer, &rank_device));
  const std::string job_dir = job_.file.empty() ? "" : fs::path(job_.file).parent_path().string();
  MOTLEY_ASSIGN_OR_RETURN(TrainingData data,
                          OpenTrainingData(job_.data, job_dir, job_.model.vocab_size, tc.seq_len));
  data_ = std::make_unique<TrainingData>(std::move(data));
  TrainerState loaded;
  MOTLEY_RETURN_IF_ERROR(BuildExecutor(rank_device, ledger, &loaded));
  const std::string metrics_path = options_.metrics_path.empty()
                                       ? (fs::path(job_.checkpoint.dir) / "metrics.jsonl").string()
                                       : options_.metrics_path;
  MOTLEY_RETURN_IF_ERROR(OpenOutputs(metrics_path));
  return BeginRun(loaded, rank_device, metrics_path);
}

// The plan loaded and lowered, this rank's place in it found and checked, its device chosen and the
// ranks connected.
Status PlannedRun::ConnectToPlan(TrainObserver* observer, torch::Device* device) {
  const JobSpec& job = job_;
  const TrainOptions& options = options_;
  MOTLEY_ASSIGN_OR_RETURN(plan_, LoadPlanFile(options.planned.plan_path));
  MOTLEY_RETURN_IF_ERROR(TakeUpResumedPlan());
  MOTLEY_RETURN_IF_ERROR(CheckPlanMatchesJob(plan_, job, options.planned.plan_path));
  MOTLEY_ASSIGN_OR_RETURN(schedule_, LowerPlanToRun(plan_, job));
  // Transfers and collectives match in the order they are issued (NCCL's rule, and Gloo's here).
  if (std::string problem = CheckTransferOrder(schedule_); !problem.empty())
    return Status::Internal(
        fmt::format("{}: the plan's schedule cannot run: {}", options.planned.plan_path, problem));
  MOTLEY_ASSIGN_OR_RETURN(Rendezvous rv, RendezvousFromEnv());
  // Each device runs its own part: found by host and local rank where the cluster names hosts,
  // else by the launcher's order. A rank on the wrong host stops here, before any step. Given its
  // ranks (an island's), its place among them.
  if (comm_) {
    rv.rank = comm_->rank();
  } else {
    MOTLEY_ASSIGN_OR_RETURN(rv.rank, PlanRankOnHost(schedule_, job.cluster, rv, FindThisHost()));
  }
  MOTLEY_ASSIGN_OR_RETURN(torch::Device rank_device, RankDevice(options.device, rv));
  *device = rank_device;
  SetCurrentDevice(rank_device);
  if (rank_device.is_cuda() && !job.cluster.emulated()) {  // the GPU is the kind the plan made this part for
    const GpuIdentity gpu = IdentifyGpu(rank_device);
    MOTLEY_RETURN_IF_ERROR(CheckRankGpu(job.cluster, schedule_.programs[rv.rank].device, rv.launcher_rank,
                                        gpu.name, gpu.total_bytes));
  }
  CommConfig comm_config;
  comm_config.gpu = rank_device.is_cuda();
  if (!comm_) {
    MOTLEY_ASSIGN_OR_RETURN(comm_, Communicator::Connect(rv, comm_config));
  }
  lead_ = summary_.led = comm_->rank() == 0 && options.planned.writes_outputs;
  writer_ = comm_->rank() == 0 && (lead_ || options.planned.writes_checkpoints);
  if (observer != nullptr && lead_) observer_ = observer;
  if (lead_ && !resumed_plan_note_.empty()) fmt::print("{}\n", resumed_plan_note_);
  return Status::Ok();
}

// This rank's part of the model (drawn from the seed, or loaded: only the tensors it holds) and
// the executor that runs its program; a resumed run's state into `loaded`.
Status PlannedRun::BuildExecutor(const torch::Device& rank_device, MemoryLedger& ledger, TrainerState* out) {
  const JobSpec& job = job_;
  const TrainOptions& options = options_;
  const TrainingConfig& tc = job.training;
  TrainerState& loaded = *out;
  // A rank that loads its weights (a Hugging Face folder, a checkpoint) makes only the parameters
  // its part of the plan holds; a fresh run draws the whole model from the seed on every rank, so
  // that each part is what one process draws.
  const bool loads_weights = !options.resume.empty() || !job.init_from.empty();
  const int64_t load_start = ledger.used_bytes();
  ledger.ResetPeak();
  // Starting from a folder, a tensor-parallel rank reads its slices only (a checkpoint it resumes
  // from is read whole: its moments are laid out by whole parameters), and a ZeRO-3 rank (without
  // tensor parallelism) its shards, straight into its device buffers (ExecutorConfig::shard_source).
  std::set<std::string> mine;
  WeightSlice slice;
  const Program& program = schedule_.programs[comm_->rank()];
  for (const ScheduleMinistage& m : schedule_.ministages)
    if (m.group == program.group && options.resume.empty()) slice = {program.tp_index, m.tp_degree};
  const bool reads_shards = !job.init_from.empty() && options.resume.empty() && schedule_.sharded_params &&
                            slice.tp == 1 && program.dp_size > 1;
  LlamaModel model{nullptr};
  if (loads_weights) {
    mine = RankParameterNames(schedule_, comm_->rank(),
                              *LlamaModel(job.model, tc.seed, std::set<std::string>{}));
    model = LlamaModel(job.model, tc.seed, reads_shards ? std::set<std::string>{} : mine,
                       MasterDtype(tc.precision), slice.tp);
  } else {
    model = LlamaModel(job.model, tc.seed);
  }
  model->set_precision(tc.precision);
  ExecutorConfig config;
  config.device = rank_device;
  config.master_dtype = MasterDtype(tc.precision);
  config.compute_dtype = MixedComputeDtype(tc.precision);
  config.optimizer = job.optimizer;
  config.tensor_parallel = job.tensor_parallel;
  config.stragglers = job.stragglers;
  config.cpu_copy_threads = options.planned.cpu_copy_threads;
  executor_config_ = config;
  // Resuming: every rank reads the checkpoint (the weights before its ministages are cut out,
  // the moments after) — the same files a single-process run writes and reads.
  std::map<std::string, torch::Tensor> exp_avg, exp_avg_sq;
  std::string dir;  // the checkpoint it resumes from
  if (!options.resume.empty()) {
    MOTLEY_ASSIGN_OR_RETURN(dir, ResolveCheckpointDir(options.resume));
    MOTLEY_RETURN_IF_ERROR(CheckResumedModel(dir, job));  // as one process refuses it
  }
  // Each rank reads only the tensors its part of the plan holds (from a sharded checkpoint: only
  // the files that hold their pieces, whatever plan wrote them).
  LoadedPart part;
  int64_t load_peak = 0;
  if (loads_weights && !reads_shards)
    MOTLEY_RETURN_IF_ERROR(LoadModelWeights(dir.empty() ? job.init_from : dir, *model, mine, slice));
  if (reads_shards) {
    MOTLEY_ASSIGN_OR_RETURN(ShardSource source, FolderShardSource(job.init_from, *model));
    config.shard_source = [source, read = part.shard_bytes](const std::string& name, int64_t begin,
                                                            torch::Tensor dest) {
      *read += dest.numel() * dest.element_size();
      return source(name, begin, dest);
    };
  }
  if (loads_weights) {
    const std::shared_ptr<int64_t> shard_bytes = part.shard_bytes;  // the source's counter
    part = MeasureLoadedPart(*model, job.model);
    part.shard_bytes = shard_bytes;
    load_peak = ledger.peak_bytes() - load_start;
  }
  if (!dir.empty()) {
    std::vector<ParamShard> whole = WholeParameterShards(*model);
    std::erase_if(whole, [&](const ParamShard& s) { return !mine.count(s.name); });
    MOTLEY_ASSIGN_OR_RETURN(loaded, LoadTrainingState(dir, whole));
    if (!options.planned.moments_from.empty())  // an island's own moments (planned_islands.cc)
      MOTLEY_RETURN_IF_ERROR(LoadTrainingState(options.planned.moments_from, whole).status());
    resumed_from_step_ = loaded.step;  // islands: an island's own steps then (the checkpoint's are the clock)
    const int64_t own =
        options.planned.resumed_steps ? options.planned.resumed_steps(loaded.step) : loaded.step;
    loaded.updates += own - loaded.step;
    loaded.step = own;
    MOTLEY_RETURN_IF_ERROR(CheckResumable(dir, loaded.seed, loaded.step, job, total_steps_));
    for (const auto& s : whole) {
      exp_avg[s.name] = s.exp_avg;
      exp_avg_sq[s.name] = s.exp_avg_sq;
    }
  }
  // The model stays on the CPU: each rank's ministage buffers are made on its device from it.
  MOTLEY_ASSIGN_OR_RETURN(executor_, Executor::Create(schedule_, job.cluster, model, comm_.get(), config));
  if (loads_weights) PrintLoadedPart(comm_->rank(), job.model, part, load_peak);
  if (!options.resume.empty()) MOTLEY_RETURN_IF_ERROR(executor_->LoadMoments(exp_avg, exp_avg_sq));
  // The emulated device's memory, from here on (a fresh run built the whole model above only to
  // initialise every rank's part identically).
  const int device = executor_->program().device;
  if (const EmulationConfig* emu = job.cluster.emulation(device); emu != nullptr) {
    ledger.set_capacity_bytes(static_cast<int64_t>(job.cluster.memory_bytes(device)));
    ledger.set_owner(
        fmt::format("rank {} (device {} of {}, emulated)", comm_->rank(), device, job.cluster.name));
  }
  return Status::Ok();
}

// Every rank's checkpoint folder checked writable; rank 0 takes the run folder and opens the
// metrics.
Status PlannedRun::OpenOutputs(const std::string& metrics_path) {
  const JobSpec& job = job_;
  const TrainOptions& options = options_;
  // Every rank writes its part of a sharded checkpoint: one on a host that cannot write the folder
  // stops now, named, not at the first save.
  if ((options.checkpoint_at_end || job.checkpoint.interval_steps > 0) && job.checkpoint.format == "sharded")
    MOTLEY_RETURN_IF_ERROR(CheckFolderWritable(
        job.checkpoint.dir, fmt::format("rank {} on {}", comm_->rank(), FindThisHost().Describe())));
  if (writer_) {
    MOTLEY_ASSIGN_OR_RETURN(dir_lock_, RunDirLock::Acquire(job.checkpoint.dir));
    if (options.checkpoint_at_end)
      MOTLEY_RETURN_IF_ERROR(
          ClaimRunDir(job.checkpoint.dir, !options.resume.empty(), options.overwrite, true));
  }
  if (lead_)
    MOTLEY_RETURN_IF_ERROR(
        metrics_.Open(metrics_path, !options.resume.empty() || options.metrics_append, options.overwrite));
  return Status::Ok();
}

// The start announced, and the run's state from where it starts.
Status PlannedRun::BeginRun(const TrainerState& loaded, const torch::Device& rank_device,
                            const std::string& metrics_path) {
  const JobSpec& job = job_;
  const TrainOptions& options = options_;
  const TrainingConfig& tc = job.training;
  tokens_per_step_ = tc.global_batch_sequences * tc.seq_len;
  TrainStart start;
  start.device = fmt::format(
      "{} rank{} on {} ({} plan, {})", comm_->world_size(), comm_->world_size() == 1 ? "" : "s",
      rank_device.is_cuda() ? "CUDA, one GPU each" : "CPU", plan_.strategy, options.planned.plan_path);
  start.precision = std::string(PrecisionName(tc.precision));
  start.schedule_hash = ScheduleHash(schedule_);
  start.outer_round_hash = options.planned.outer_round_hash;
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
  // Loss scaling: every rank keeps the same scale (each step's skip is decided by one collective).
  if (tc.loss_scaling && !options.resume.empty())
    scaler_.Restore(loaded.loss_scale, loaded.loss_scale_good_steps);
  state_.loss_scale = scaler_.scale();
  state_.loss_scale_good_steps = scaler_.good_steps();
  state_.tokens_seen = loaded.tokens_seen;
  state_.lr_factor = loaded.lr_factor;  // rollbacks before the checkpoint carry on
  state_.data_skip_steps = loaded.data_skip_steps;
  state_.rollbacks = loaded.rollbacks;
  // The metrics say which schedule their steps ran (calibrate checks it against a plan's).
  if (lead_)
    MOTLEY_RETURN_IF_ERROR(metrics_.Write({{"event", "start"},
                                           {"first_step", state_.step},
                                           {"ranks", comm_->world_size()},
                                           {"plan", options.planned.plan_path},
                                           {"schedule_hash", ScheduleHash(schedule_)},
                                           {"outer_round_schedule_hash", options.planned.outer_round_hash}}));
  val_sequences_ = data_->validation ? std::min(job.data.validation_sequences,
                                                NumEvaluationWindows(*data_->validation, tc.seq_len))
                                     : 0;
  rank_sums_.assign(comm_->world_size(), {});
  stragglers_ = std::make_unique<StragglerMonitor>(job.straggler_detection, comm_->world_size());
  changed_factor_.assign(comm_->world_size(), 1.0);
  run_start_ = Clock::now();
  return Status::Ok();
}

Status PlannedRun::Step() {
  const int64_t step = state_.step, seq = job_.training.seq_len;
  const bool trace =
      !options_.planned.trace_path.empty() && step + 1 == std::min(options_.planned.trace_step, total_steps_);
  if (trace) MOTLEY_RETURN_IF_ERROR(comm_->Barrier(comm_->world()));  // one time origin for every rank
  StepInputs in;
  in.step = step;
  in.lr = LearningRate(job_.optimizer, job_.lr_schedule, step, total_steps_) * state_.lr_factor;
  in.update = state_.updates + 1;
  in.loss_scale = job_.training.loss_scaling ? scaler_.scale() : 1.0;
  in.faults.inject_overflow =
      comm_->rank() == options_.faults.overflow_rank && step + 1 == options_.faults.overflow_step;
  in.tokens = [&](int64_t first, int64_t n) {
    // The executor takes tokens from a callback; a shard cut short under the job is an exception
    // here, turned into this rank's error by the rank's guard (and named to the others).
    if (Status read = SampleTrainingWindows(data_->train, job_.training.seed, step + state_.data_skip_steps,
                                            options_.planned.first_sequence + first, n, seq, &windows_);
        !read.ok())
      throw std::runtime_error(read.message());
    return torch::from_blob(windows_.data(), {n, seq + 1}, torch::kInt64).clone();
  };
  in.faults.die_mid_step = comm_->rank() == options_.faults.die_rank &&
                           step + 1 == options_.faults.die_at_step && !options_.faults.die_in_checkpoint;
  if (comm_->rank() == options_.faults.perturb_rank) {
    in.faults.loss_factor = options_.faults.perturb_loss_factor;
    in.faults.loss_factor_microbatch = options_.faults.perturb_microbatch;
  }
  if (comm_->rank() == options_.faults.diverge_rank && step + 1 == options_.faults.diverge_at_step &&
      !divergence_injected_) {
    divergence_injected_ = true;  // (a rolled-back run replays the step: it does not diverge again)
    in.faults.loss_factor = std::numeric_limits<double>::quiet_NaN();
  }
  executor_->set_record_trace(trace);
  MOTLEY_ASSIGN_OR_RETURN(RankStepReport report, executor_->RunStep(in));
  if (report.diverged) return Diverged(report);  // every rank knows: the step's reduction told them all
  MOTLEY_ASSIGN_OR_RETURN(std::vector<RankStepTimes> ranks, GatherRankTimes(*comm_, report));
  if (trace) {
    MOTLEY_ASSIGN_OR_RETURN(std::vector<TraceEvent> events, GatherTrace(*comm_, report.trace));
    if (lead_) {
      SimResult sim;
      sim.trace = std::move(events);
      MOTLEY_RETURN_IF_ERROR(
          AtomicWriteFile(options_.planned.trace_path, ChromeTraceJson(schedule_, job_.cluster, sim)));
      summary_.trace_path = options_.planned.trace_path;
    }
  }
  MOTLEY_RETURN_IF_ERROR(Record(in, report, ranks));
  if (job_.straggler_detection.rebalance && !changes_.empty() && !done()) return Rebalance(changes_);
  return Status::Ok();
}

Status PlannedRun::Record(const StepInputs& in, const RankStepReport& report,
                          const std::vector<RankStepTimes>& ranks) {
  ++state_.step;
  if (!report.skipped) ++state_.updates;
  if (job_.training.loss_scaling) {
    scaler_.Update(!report.skipped);
    state_.loss_scale = scaler_.scale();
    state_.loss_scale_good_steps = scaler_.good_steps();
  }
  state_.tokens_seen += tokens_per_step_;
  StepMetrics m;
  m.step = state_.step;
  m.total_steps = total_steps_;
  m.loss = report.loss;
  m.lr = in.lr;
  m.grad_norm = report.grad_norm;
  m.skipped = report.skipped;
  m.loss_scale = scaler_.scale();  // after this step's update, as one process reports it
  m.step_time_s = 0;
  for (const auto& r : ranks) m.step_time_s = std::max(m.step_time_s, r.compute_s + r.idle_s);
  m.tokens_per_s = static_cast<double>(tokens_per_step_) / m.step_time_s;
  m.ranks = ranks;
  m.flextp = schedule_.flextp_mode != "off";
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
    observer_->OnStraggler(m.step, c.rank,
                           fmt::format("device {}, {}", device, job_.cluster.spec(device).name), c.slowdown,
                           c.straggling);
  }
  MOTLEY_RETURN_IF_ERROR(LogStep(m, ranks));
  observer_->OnStep(m);
  return Status::Ok();
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
  if (summary_.step_s > 0 && peak > 0)
    summary_.hfu = schedule_.hardware_flops_per_step / summary_.step_s / peak;
  if (lead_) {
    // The simulator's account of the same schedule: its memory always (it needs no timings), its
    // times with a profile.
    std::optional<Profile> profile;
    if (!options_.planned.profile_path.empty()) {
      MOTLEY_ASSIGN_OR_RETURN(profile, LoadProfileFile(options_.planned.profile_path));
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

}  // namespace motley
