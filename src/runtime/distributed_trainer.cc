#include "runtime/distributed_trainer.h"

#include <cstdint>
#include <chrono>
#include <cmath>
#include <filesystem>
#include <optional>

#include <fmt/format.h>
#include <nlohmann/json.hpp>

#include "core/file_io.h"
#include "core/message_tags.h"
#include "data/training_data.h"
#include "plan/lower.h"
#include "plan/plan_io.h"
#include "plan/transfer_order.h"
#include "runtime/checkpoint.h"
#include "runtime/communicator.h"
#include "runtime/cuda_device.h"
#include "runtime/evaluate.h"
#include "runtime/executor.h"
#include "runtime/llama_model.h"
#include "runtime/lr_schedule.h"
#include "runtime/memory_ledger.h"
#include "runtime/metrics_log.h"
#include "runtime/precision_dtypes.h"
#include "runtime/rank_device.h"
#include "sim/routing_costs.h"
#include "sim/cost_model.h"
#include "sim/profile.h"
#include "sim/simulator.h"

namespace motley {
namespace fs = std::filesystem;
namespace {

using Clock = std::chrono::steady_clock;
constexpr int kRankFields = 8;  // compute, comm, copy, step, bytes sent, peak memory, pruned, migrated

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
       static_cast<double>(r.migrated_units)},
      torch::kFloat64);
  torch::Tensor all = torch::empty({comm.world_size() * kRankFields}, torch::kFloat64);
  MOTLEY_RETURN_IF_ERROR(comm.AllGather(comm.world(), mine, all));
  std::vector<RankStepTimes> out;
  auto a = all.accessor<double, 1>();
  for (int k = 0; k < comm.world_size(); ++k) {
    const int b = k * kRankFields;
    out.push_back({k, a[b], a[b + 1], a[b + 2], a[b + 3] - a[b], a[b + 4], a[b + 5], a[b + 6], a[b + 7]});
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

}  // namespace

Result<TrainSummary> TrainWithPlan(const JobSpec& job, const TrainOptions& options, TrainObserver* observer) {
  const TrainingConfig& tc = job.training;
  const int64_t total_steps = options.steps > 0 ? options.steps : tc.steps;
  if (tc.precision == Precision::kFp16)
    return Status::InvalidArgument("[training] precision = \"fp16\": the multi-process runtime has no loss scaling "
                                   "yet; use \"bf16\" (same speed on GPUs since Ampere) or \"fp32\"");
  at::set_num_threads(options.threads > 0 ? options.threads : 1);
  MemoryLedger& ledger = MemoryLedger::Install();  // counts every tensor from here on

  MOTLEY_ASSIGN_OR_RETURN(Plan plan, LoadPlanFile(options.plan_path));
  MOTLEY_RETURN_IF_ERROR(CheckPlanMatchesJob(plan, job, options.plan_path));
  FillDefaultRouting(&plan, job.cluster, job.model);  // a hand-written plan's: as simulate's
  MOTLEY_ASSIGN_OR_RETURN(Schedule schedule, LowerPlan(plan, job.cluster, job.model));
  // Transfers and collectives match in the order they are issued (NCCL's rule, and Gloo's here).
  if (std::string problem = CheckTransferOrder(schedule); !problem.empty())
    return Status::Internal(fmt::format("{}: the plan's schedule cannot run: {}", options.plan_path, problem));
  MOTLEY_ASSIGN_OR_RETURN(Rendezvous rv, RendezvousFromEnv());
  rv.rank = PlanRankOf(schedule, job.cluster, rv.launcher_rank, rv.world_size);  // each device runs its own part
  MOTLEY_ASSIGN_OR_RETURN(torch::Device rank_device, RankDevice(options.device, rv));
  SetCurrentDevice(rank_device);
  CommConfig comm_config;
  comm_config.gpu = rank_device.is_cuda();
  MOTLEY_ASSIGN_OR_RETURN(std::unique_ptr<Communicator> comm, Communicator::Connect(rv, comm_config));
  const bool lead = comm->rank() == 0;
  TrainObserver quiet;
  if (observer == nullptr || !lead) observer = &quiet;

  const std::string job_dir = job.file.empty() ? "" : fs::path(job.file).parent_path().string();
  MOTLEY_ASSIGN_OR_RETURN(TrainingData data, OpenTrainingData(job.data, job_dir, job.model.vocab_size, tc.seq_len));

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
  // Resuming: every rank reads the checkpoint (the weights before its ministages are cut out,
  // the moments after) — the same files a single-process run writes and reads.
  TrainerState loaded;
  std::map<std::string, torch::Tensor> exp_avg, exp_avg_sq;
  if (!options.resume.empty()) {
    MOTLEY_ASSIGN_OR_RETURN(std::string dir, ResolveCheckpointDir(options.resume));
    MOTLEY_RETURN_IF_ERROR(LoadModelWeights(dir, *model));
    std::vector<ParamShard> whole = WholeParameterShards(*model);
    MOTLEY_ASSIGN_OR_RETURN(loaded, LoadTrainingState(dir, whole));
    MOTLEY_RETURN_IF_ERROR(CheckResumable(dir, loaded.seed, loaded.step, job, total_steps));
    for (const auto& s : whole) {
      exp_avg[s.name] = s.exp_avg;
      exp_avg_sq[s.name] = s.exp_avg_sq;
    }
  }
  // The model stays on the CPU: each rank's ministage buffers are made on its device from it.
  MOTLEY_ASSIGN_OR_RETURN(std::unique_ptr<Executor> executor,
                          Executor::Create(schedule, job.cluster, model, comm.get(), config));
  if (!options.resume.empty()) MOTLEY_RETURN_IF_ERROR(executor->LoadMoments(exp_avg, exp_avg_sq));
  exp_avg.clear();
  exp_avg_sq.clear();
  // The emulated device's memory, from here on (the whole model was built above only to
  // initialise every rank's part identically).
  const int device = executor->program().device;
  if (const EmulationConfig* emu = job.cluster.emulation(device); emu != nullptr) {
    ledger.set_capacity_bytes(static_cast<int64_t>(job.cluster.memory_bytes(device)));
    ledger.set_owner(fmt::format("rank {} (device {} of {}, emulated)", comm->rank(), device, job.cluster.name));
  }

  const std::string metrics_path =
      options.metrics_path.empty() ? (fs::path(job.checkpoint.dir) / "metrics.jsonl").string() : options.metrics_path;
  MetricsLog metrics;
  if (lead) MOTLEY_RETURN_IF_ERROR(metrics.Open(metrics_path));

  const int64_t batch = tc.global_batch_sequences, seq = tc.seq_len;
  const int64_t tokens_per_step = batch * seq;
  TrainStart start;
  start.device = fmt::format("{} rank{} on {} ({} plan, {})", comm->world_size(), comm->world_size() == 1 ? "" : "s",
                             rank_device.is_cuda() ? "CUDA, one GPU each" : "CPU", plan.strategy, options.plan_path);
  start.precision = std::string(PrecisionName(tc.precision));
  start.schedule_hash = ScheduleHash(schedule);
  start.parameters = TotalParams(job.model);
  start.total_steps = total_steps;
  start.first_step = loaded.step;
  start.tokens_per_step = tokens_per_step;
  start.train_data = data.train.name();
  start.validation_data = data.validation ? data.validation->name() : "";
  start.metrics_path = metrics_path;
  observer->OnStart(start);

  TrainerState state;
  state.total_steps = total_steps;
  state.seed = tc.seed;
  state.precision = start.precision;
  state.job_file = job.file;
  state.step = loaded.step;
  state.updates = loaded.updates;
  state.tokens_seen = loaded.tokens_seen;
  TrainSummary summary;
  const int64_t val_sequences =
      data.validation ? std::min(job.data.validation_sequences, NumEvaluationWindows(*data.validation, seq)) : 0;
  auto validate = [&](int64_t step) -> Status {
    if (val_sequences <= 0 || !options.validate) return Status::Ok();
    MOTLEY_ASSIGN_OR_RETURN(Executor::FullState full, executor->GatherFullState());
    if (lead) {
      AssembledModel a = Assemble(job.model, tc.precision, full);
      a.model->eval();
      const double loss = EvaluateLoss(*a.model, *data.validation, seq, val_sequences, torch::kCPU).loss;
      if (!summary.first_validation_loss) summary.first_validation_loss = loss;
      summary.last_validation_loss = loss;
      metrics.Write({{"step", step}, {"val_loss", loss}});
      observer->OnValidation(step, loss);
    }
    return comm->Barrier(comm->world());
  };
  auto checkpoint = [&]() -> Status {
    MOTLEY_ASSIGN_OR_RETURN(Executor::FullState full, executor->GatherFullState());
    if (lead) {
      AssembledModel a = Assemble(job.model, tc.precision, full);
      MOTLEY_ASSIGN_OR_RETURN(summary.checkpoint_dir,
                              SaveRunCheckpoint(job.checkpoint.dir, job.checkpoint.keep, *a.model, a.shards, state));
      observer->OnCheckpoint(summary.checkpoint_dir);
    }
    return comm->Barrier(comm->world());
  };

  const auto run_start = Clock::now();
  double timed_s = 0;
  int64_t timed_tokens = 0, timed_steps = 0;
  std::vector<RankStepTimes> rank_sums(comm->world_size());
  std::vector<int64_t> windows;
  if (state.step == 0) MOTLEY_RETURN_IF_ERROR(validate(0));
  while (state.step < total_steps) {
    const int64_t step = state.step;
    const bool trace = !options.trace_path.empty() && step + 1 == std::min(options.trace_step, total_steps);
    if (trace) MOTLEY_RETURN_IF_ERROR(comm->Barrier(comm->world()));  // one time origin for every rank
    StepInputs in;
    in.step = step;
    in.lr = LearningRate(job.optimizer, job.lr_schedule, step, total_steps);
    in.update = state.updates + 1;
    in.tokens = [&](int64_t first, int64_t n) {
      SampleTrainingWindows(data.train, tc.seed, step, first, n, seq, &windows);
      return torch::from_blob(windows.data(), {n, seq + 1}, torch::kInt64).clone();
    };
    in.die_mid_step = comm->rank() == options.die_rank && step + 1 == options.die_at_step;
    if (comm->rank() == options.perturb_rank) {
      in.loss_factor = options.perturb_loss_factor;
      in.loss_factor_microbatch = options.perturb_microbatch;
    }
    executor->set_record_trace(trace);
    MOTLEY_ASSIGN_OR_RETURN(RankStepReport report, executor->RunStep(in));
    MOTLEY_ASSIGN_OR_RETURN(std::vector<RankStepTimes> ranks, GatherRankTimes(*comm, report));
    if (trace) {
      MOTLEY_ASSIGN_OR_RETURN(std::vector<TraceEvent> events, GatherTrace(*comm, report.trace));
      if (lead) {
        SimResult sim;
        sim.trace = std::move(events);
        MOTLEY_RETURN_IF_ERROR(AtomicWriteFile(options.trace_path, ChromeTraceJson(schedule, job.cluster, sim)));
        summary.trace_path = options.trace_path;
      }
    }
    ++state.step;
    ++state.updates;
    state.tokens_seen += tokens_per_step;
    StepMetrics m;
    m.step = state.step;
    m.total_steps = total_steps;
    m.loss = report.loss;
    m.lr = in.lr;
    m.grad_norm = report.grad_norm;
    m.step_time_s = 0;
    for (const auto& r : ranks) m.step_time_s = std::max(m.step_time_s, r.compute_s + r.idle_s);
    m.tokens_per_s = static_cast<double>(tokens_per_step) / m.step_time_s;
    m.ranks = ranks;
    m.flextp = job.tensor_parallel.mode != "off";
    for (const auto& r : ranks) {
      m.pruned_fraction = std::max(m.pruned_fraction, r.pruned_fraction);
      m.migrated_units = std::max(m.migrated_units, r.migrated_units);
    }
    if (summary.steps_run == 0) summary.first_loss = m.loss;
    summary.last_loss = m.loss;
    if (++summary.steps_run > 1) {
      timed_s += m.step_time_s;
      timed_tokens += tokens_per_step;
      ++timed_steps;
      for (size_t k = 0; k < ranks.size(); ++k) {
        rank_sums[k].rank = static_cast<int>(k);
        rank_sums[k].compute_s += ranks[k].compute_s;
        rank_sums[k].comm_s += ranks[k].comm_s;
        rank_sums[k].copy_s += ranks[k].copy_s;
        rank_sums[k].idle_s += ranks[k].idle_s;
        rank_sums[k].bytes_sent += ranks[k].bytes_sent;
        rank_sums[k].peak_memory_bytes = std::max(rank_sums[k].peak_memory_bytes, ranks[k].peak_memory_bytes);
      }
    }
    if (lead) {
      nlohmann::json per_rank = nlohmann::json::array();
      for (const auto& r : ranks)
        per_rank.push_back({{"rank", r.rank},
                            {"compute_s", r.compute_s},
                            {"comm_s", r.comm_s},
                            {"copy_s", r.copy_s},
                            {"idle_s", r.idle_s},
                            {"bytes_sent", r.bytes_sent},
                            {"peak_memory_bytes", r.peak_memory_bytes}});
      metrics.Write({{"step", m.step},
                     {"loss", m.loss},
                     {"lr", m.lr},
                     {"tokens_per_s", m.tokens_per_s},
                     {"grad_norm", m.grad_norm},
                     {"step_time_s", m.step_time_s},
                     {"pruned_fraction", m.pruned_fraction},
                     {"migrated_units", m.migrated_units},
                     {"ranks", per_rank}});
    }
    observer->OnStep(m);
    if (ValidationDue(job, state.step, total_steps)) MOTLEY_RETURN_IF_ERROR(validate(state.step));
    if (CheckpointDue(job, state.step, total_steps)) MOTLEY_RETURN_IF_ERROR(checkpoint());
  }
  if (options.checkpoint_at_end && summary.steps_run > 0) MOTLEY_RETURN_IF_ERROR(checkpoint());
  summary.wall_s = std::chrono::duration<double>(Clock::now() - run_start).count();
  SetThroughput(job, timed_s, timed_tokens, &summary);
  if (timed_steps > 0) {
    for (auto& r : rank_sums) {
      r.compute_s /= static_cast<double>(timed_steps);
      r.comm_s /= static_cast<double>(timed_steps);
      r.copy_s /= static_cast<double>(timed_steps);
      r.idle_s /= static_cast<double>(timed_steps);
      r.bytes_sent /= static_cast<double>(timed_steps);
    }
    summary.ranks = rank_sums;
    summary.step_s = timed_s / static_cast<double>(timed_steps);
  }
  // Hardware FLOPs per second over the plan's devices' peak, measured and predicted (not for
  // emulated devices, whose catalog peaks are nominal).
  double peak = 0;
  for (const Program& p : schedule.programs) {
    const GpuSpec& spec = job.cluster.spec(p.device);
    const EmulationConfig* emu = job.cluster.emulation(p.device);
    peak += PeakFlops(spec, tc.precision) /
            (emu != nullptr ? emu->speed_factor : 1.0);
  }
  if (job.cluster.emulated()) peak = 0;
  if (summary.step_s > 0 && peak > 0) summary.hfu = schedule.hardware_flops_per_step / summary.step_s / peak;
  if (lead) {
    // The simulator's account of the same schedule: its memory always (it needs no timings), its
    // times with a profile.
    std::optional<Profile> profile;
    if (!options.profile_path.empty()) {
      MOTLEY_ASSIGN_OR_RETURN(profile, LoadProfileFile(options.profile_path));
    }
    CostModel costs(job.cluster, job.model, profile ? &*profile : nullptr, seq, tc.precision,
                    plan.activation_checkpointing);
    MOTLEY_ASSIGN_OR_RETURN(SimResult sim, Simulate(schedule, job.cluster, costs));
    for (const auto& d : sim.devices) summary.predicted_peak_memory_bytes.push_back(d.peak_memory_bytes);
    if (profile) {
      summary.predicted_step_s = sim.step_time_s;
      summary.predicted_hfu = peak > 0 ? schedule.hardware_flops_per_step / sim.step_time_s / peak : 0;
      for (const auto& d : sim.devices) summary.predicted_compute_s.push_back(d.compute_busy_s);
    }
  }
  return summary;
}

}  // namespace motley
