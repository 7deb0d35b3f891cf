// A job with [islands] trained in one process (trainer_parts.h, TrainIslands): the islands take
// their steps one after another, each on its own share of the global batch with its own replica of
// the model and its own AdamW state; every `inner_steps` steps (and at the run's end) their
// pseudo-gradients, as they would arrive over the link (compressed as the job says), are averaged
// (weighted by the tokens each trained on since) and the outer optimizer moves the anchor, which every
// replica then continues from (islands_outer_loop.h: overlapped rounds, and fragments of the model
// whose rounds are staggered). With inner_steps_per_island a slower island takes fewer steps a round
// (IslandsConfig::OwnSteps), on its own steps' batches, with its learning-rate schedule over its own
// steps: as its ranks do across processes (planned_islands.cc). The same
// tokens a step as the synchronous run of the job: the validation loss of the two compares at equal
// tokens (bench/islands_loss.sh). A checkpoint (taken at outer steps) holds the anchor as its model,
// island 0's moments as its optimizer state, and islands.safetensors: the outer momentum and the other
// islands' moments; it resumes under any number of islands (IslandsFromCheckpoint).
#include <algorithm>
#include <charconv>
#include <cmath>
#include <filesystem>
#include <numeric>
#include <optional>
#include <tuple>

#include <fmt/format.h>

#include "core/checkpoint_format.h"
#include "plan/plan_io.h"
#include "runtime/islands/island_exchange.h"
#include "runtime/islands/outer_optimizer.h"
#include "runtime/train/checkpoint.h"
#include "runtime/train/island_replica.h"
#include "runtime/train/islands_outer_loop.h"
#include "runtime/train/lr_schedule.h"
#include "runtime/train/trainer.h"
#include "runtime/train/trainer_parts.h"

namespace motley::trainer_parts {
namespace {

// What a run of islands cannot do yet: one error, naming what to change.
Status CheckIslandsRun(const JobSpec& job, const TrainOptions& options) {
  (void)options;
  if (job.training.loss_scaling)
    return Status::InvalidArgument(
        "[islands] with loss scaling (fp16) is not built yet: train in bf16, fp32 or fp64");
  return Status::Ok();
}

// Each island's sequences a step: its plan's batch where the islands have plans
// (options.planned.island_plans), else an equal share of the job's.
Result<std::vector<int64_t>> IslandShares(const JobSpec& job, const TrainOptions& options) {
  const std::vector<std::string>& plans = options.planned.island_plans;
  const int64_t batch = job.training.global_batch_sequences;
  if (plans.empty())
    return std::vector<int64_t>(static_cast<size_t>(job.islands.count), batch / job.islands.count);
  if (static_cast<int64_t>(plans.size()) != job.islands.count)
    return Status::InvalidArgument(fmt::format("{}: [islands] count = {} but {} island plans were given",
                                               job.file, job.islands.count, plans.size()));
  std::vector<int64_t> out;
  for (const std::string& path : plans) {
    MOTLEY_ASSIGN_OR_RETURN(const Plan plan, LoadPlanFile(path));
    out.push_back(plan.global_batch_sequences());
  }
  if (std::accumulate(out.begin(), out.end(), int64_t{0}) != batch)
    return Status::InvalidArgument(
        fmt::format("the island plans' batches add up to {} sequences a step but the job {} has "
                    "global_batch_sequences = {}; "
                    "make the islands' shares add up",
                    std::accumulate(out.begin(), out.end(), int64_t{0}), job.file, batch));
  return out;
}

Result<Replica> MakeReplica(const JobSpec& job, const torch::Device& device) {
  Replica r{LlamaModel(job.model, job.training.seed), {}, 0, 0, 0, 0, {}};
  r.model->set_precision(job.training.precision);
  r.model->to(device);
  r.shards = ShardsWithGradients(*r.model);
  if (!job.init_from.empty()) MOTLEY_RETURN_IF_ERROR(LoadModelWeights(job.init_from, *r.model));
  return r;
}

constexpr char kIslandsFile[] = "islands.safetensors";

// The islands' own state for a checkpoint: the outer momentum and every island's moments but island
// 0's (the checkpoint's optimizer.safetensors holds those); the count and outer steps as metadata.
CheckpointExtraFile IslandsState(const IslandsOuterLoop& outer, const std::vector<Replica>& replicas) {
  CheckpointExtraFile f{
      kIslandsFile,
      {},
      {{"islands", std::to_string(replicas.size())}, {"outer_steps", std::to_string(outer.steps())}}};
  const std::vector<torch::Tensor> momentum = outer.Momentum(replicas[0].shards.size());
  for (size_t k = 0; k < momentum.size(); ++k)
    if (momentum[k].defined())
      f.tensors.push_back({"outer." + replicas[0].shards[k].name + ".momentum", momentum[k]});
  for (size_t i = 1; i < replicas.size(); ++i)
    for (const ParamShard& s : replicas[i].shards) {
      if (!s.exp_avg.defined()) continue;
      f.tensors.push_back({fmt::format("island{}.{}.exp_avg", i, s.name), s.exp_avg});
      f.tensors.push_back({fmt::format("island{}.{}.exp_avg_sq", i, s.name), s.exp_avg_sq});
    }
  return f;
}

// What a checkpoint held for the outer loop.
struct OuterResumed {
  int64_t islands = 1;  // a synchronous run's checkpoint: 1
  int64_t steps = 0;
  std::vector<torch::Tensor> momentum;  // empty: none yet
};

Result<int64_t> MetadataCount(const SafetensorsFile& f, const std::string& key) {
  const auto it = f.metadata().find(key);
  int64_t v = -1;
  if (it != f.metadata().end()) std::from_chars(it->second.data(), it->second.data() + it->second.size(), v);
  if (v < 0)
    return Status::InvalidArgument(fmt::format(
        "{}: its metadata lacks a count \"{}\" (it was not written by motley's islands); resume without it",
        f.path(), key));
  return v;
}

// The checkpoint `resume` names into the replicas: replica 0 resumes as a synchronous run does, every
// other takes its weights (the anchor) and its moments: from island i's own checkpoint beside it where
// launched islands wrote one (core/checkpoint_format.h: IslandMomentsCheckpoint), else island (i mod k)'s
// of a checkpoint of k islands — island 0's are the optimizer's, and a synchronous checkpoint's go to
// every island. Returns
// the outer state it held.
Result<OuterResumed> IslandsFromCheckpoint(const JobSpec& job, const std::string& resume, int64_t total_steps,
                                           std::vector<Replica>& replicas, TrainerState* state) {
  LossScaler unscaled;  // islands refuse loss scaling
  MOTLEY_RETURN_IF_ERROR(
      Resume(job, resume, total_steps, *replicas[0].model, replicas[0].shards, state, &unscaled));
  MOTLEY_ASSIGN_OR_RETURN(const std::string dir, ResolveCheckpointDir(resume));
  OuterResumed out;
  std::optional<SafetensorsFile> file;
  if (const auto path = std::filesystem::path(dir) / kIslandsFile; std::filesystem::exists(path)) {
    MOTLEY_ASSIGN_OR_RETURN(file, SafetensorsFile::Open(path.string()));
    MOTLEY_ASSIGN_OR_RETURN(out.islands, MetadataCount(*file, "islands"));
    MOTLEY_ASSIGN_OR_RETURN(out.steps, MetadataCount(*file, "outer_steps"));
  }
  torch::NoGradGuard no_grad;
  const std::vector<ParamShard>& first = replicas[0].shards;
  auto load = [&](const std::string& name, const torch::Tensor& like) -> Result<torch::Tensor> {
    if (!file || !file->contains(name))
      return Status::InvalidArgument(fmt::format("{}/{}: no {}", dir, kIslandsFile, name));
    MOTLEY_ASSIGN_OR_RETURN(torch::Tensor t, file->Load(name, like.scalar_type()));
    if (t.sizes() != like.sizes())
      return Status::InvalidArgument(
          fmt::format("{}/{}: {} has another shape than its parameter", dir, kIslandsFile, name));
    return t.to(like.device());
  };
  for (size_t i = 1; i < replicas.size(); ++i) {
    const int64_t from = static_cast<int64_t>(i) % std::max<int64_t>(out.islands, 1);
    // An island's own checkpoint beside it (launched islands write them): its moments.
    const std::string own = IslandMomentsCheckpoint(
        dir, static_cast<int>(i), job.islands.OwnSteps(static_cast<int64_t>(i), state->step));
    for (size_t k = 0; k < first.size(); ++k)
      replicas[i].shards[k].param.detach().copy_(first[k].param.detach());
    if (!own.empty()) {
      MOTLEY_RETURN_IF_ERROR(LoadTrainingState(own, replicas[i].shards).status());
      continue;
    }
    for (size_t k = 0; k < first.size(); ++k) {
      ParamShard& s = replicas[i].shards[k];
      if (from == 0 || !first[k].exp_avg.defined()) {
        if (first[k].exp_avg.defined()) s.exp_avg = first[k].exp_avg.clone();
        if (first[k].exp_avg_sq.defined()) s.exp_avg_sq = first[k].exp_avg_sq.clone();
        continue;
      }
      MOTLEY_ASSIGN_OR_RETURN(s.exp_avg, load(fmt::format("island{}.{}.exp_avg", from, s.name), s.param));
      MOTLEY_ASSIGN_OR_RETURN(s.exp_avg_sq,
                              load(fmt::format("island{}.{}.exp_avg_sq", from, s.name), s.param));
    }
  }
  if (file && file->contains("outer." + first[0].name + ".momentum"))
    for (const ParamShard& s : first) {
      MOTLEY_ASSIGN_OR_RETURN(torch::Tensor m, load("outer." + s.name + ".momentum", s.param));
      out.momentum.push_back(std::move(m));
    }
  // Launched islands' sharded checkpoint: the momentum is in its pieces.
  if (file && file->metadata().count("momentum") > 0 && file->metadata().at("momentum") == "shards") {
    std::vector<std::string> names;
    for (const ParamShard& s : first) names.push_back(s.name);
    MOTLEY_ASSIGN_OR_RETURN(auto whole, LoadShardedOuterMomentum(dir, names, first[0].param.scalar_type()));
    for (const ParamShard& s : first) out.momentum.push_back(whole.at(s.name).to(s.param.device()));
  }
  return out;
}

// Island `i`'s next own step: its sequences of its own step's batch (the k-th step of an island reads
// the k-th global batch's share, so islands of different step counts never read the same sequences),
// clipped, AdamW at the learning rate of its own steps (each island's schedule spans its own steps).
// Returns its loss and gradient norm.
Result<std::pair<double, double>> IslandStep(const JobSpec& job, const TrainOptions& options,
                                             const AdamW& adamw, const TrainingData& data,
                                             const torch::Device& device, int64_t i, int64_t update_offset,
                                             Replica& r) {
  const TrainingConfig& tc = job.training;
  for (auto& s : r.shards) s.grad.zero_();
  TrainingConfig share = tc;  // the island's sequences of the step
  share.global_batch_sequences = r.sequences;
  const int64_t micro =
      options.microbatch_sequences > 0 ? std::min(options.microbatch_sequences, r.sequences) : r.sequences;
  MOTLEY_ASSIGN_OR_RETURN(const double loss, AccumulateGradients(*r.model, data.train, share, r.steps, micro,
                                                                 device, 0, false, r.first_sequence));
  const double norm = std::sqrt(GradNormSquared(r.shards));
  if (!std::isfinite(loss) || !std::isfinite(norm))
    return Status::Internal(
        fmt::format("island {}'s step {}: diverged (loss {}, gradient norm {}); a run of islands stops there "
                    "(lower the learning rate)",
                    i, r.steps + 1, loss, norm));
  ClipGradients(r.shards, norm, job.optimizer.grad_clip_norm);
  adamw.Step(r.shards, LearningRate(job.optimizer, job.lr_schedule, r.steps, r.total_steps),
             r.steps + update_offset + 1);
  ++r.steps;
  for (int64_t& since : r.sequences_since) since += r.sequences;
  return std::pair{loss, norm};
}

}  // namespace

Result<TrainSummary> TrainIslands(const JobSpec& job, const TrainOptions& options, TrainObserver* observer) {
  MOTLEY_RETURN_IF_ERROR(CheckIslandsRun(job, options));
  const TrainingConfig& tc = job.training;
  const int64_t total_steps = options.steps > 0 ? options.steps : tc.steps, islands = job.islands.count;
  MOTLEY_ASSIGN_OR_RETURN(torch::Device device, ChooseDevice(options.device));
  MOTLEY_RETURN_IF_ERROR(CheckPrecisionOn(tc.precision, device));
  if (device.is_cpu()) at::set_num_threads(options.threads > 0 ? options.threads : 1);
  const std::string job_dir = job.file.empty() ? "" : std::filesystem::path(job.file).parent_path().string();
  MOTLEY_ASSIGN_OR_RETURN(TrainingData data,
                          OpenTrainingData(job.data, job_dir, job.model.vocab_size, tc.seq_len));
  MOTLEY_ASSIGN_OR_RETURN(const std::vector<int64_t> shares, IslandShares(job, options));
  std::vector<Replica> replicas;
  for (int64_t i = 0, first = 0; i < islands; first += shares[static_cast<size_t>(i)], ++i) {
    MOTLEY_ASSIGN_OR_RETURN(Replica r, MakeReplica(job, device));
    r.first_sequence = first;
    r.sequences = shares[static_cast<size_t>(i)];
    replicas.push_back(std::move(r));
  }
  TrainerState state = FreshState(job, total_steps);
  OuterResumed resumed;
  if (!options.resume.empty()) {
    MOTLEY_ASSIGN_OR_RETURN(resumed,
                            IslandsFromCheckpoint(job, options.resume, total_steps, replicas, &state));
  }
  for (int64_t i = 0; i < islands; ++i) {
    Replica& r = replicas[static_cast<size_t>(i)];
    r.steps = job.islands.OwnSteps(i, state.step);
    r.total_steps = job.islands.OwnSteps(i, total_steps);
  }
  const int64_t update_offset = state.updates - state.step;  // steps a resumed run skipped, if any
  // The anchor: the start, or the checkpoint's model.
  IslandsOuterLoop outer(job, replicas, resumed.momentum, resumed.steps);
  const std::string metrics_path =
      options.metrics_path.empty() ? (std::filesystem::path(job.checkpoint.dir) / "metrics.jsonl").string()
                                   : options.metrics_path;
  MetricsLog metrics;
  MOTLEY_ASSIGN_OR_RETURN(const std::unique_ptr<RunDirLock> dir_lock,
                          OpenRunFolder(job, options, metrics_path, &metrics));
  const int64_t tokens_per_step = tc.global_batch_sequences * tc.seq_len;
  observer->OnStart(StartOf(job, device, state, total_steps, tokens_per_step, data, metrics_path));
  TrainSummary summary;
  const int64_t val_sequences =
      data.validation && options.validate
          ? std::min(job.data.validation_sequences, NumEvaluationWindows(*data.validation, tc.seq_len))
          : 0;
  // Validation and checkpoints come at outer steps (the job checked their intervals), where every
  // replica holds the anchor.
  auto validate = [&](int64_t step) {
    if (val_sequences <= 0) return Status::Ok();
    return Validate(*replicas[0].model, *data.validation, tc.seq_len, val_sequences, device, step, &summary,
                    metrics, observer);
  };
  const AdamW adamw(job.optimizer);
  const auto run_start = Clock::now();
  double timed_s = 0;
  int64_t timed_tokens = 0;
  MOTLEY_RETURN_IF_ERROR(validate(0));
  while (state.step < total_steps) {
    const auto step_start = Clock::now();
    const int64_t step = state.step;
    const double lr = LearningRate(job.optimizer, job.lr_schedule, step, total_steps);
    StepMetrics m;
    int64_t sequences = 0, stepped = 0;  // of the islands that take a step at this step of the clock
    for (int64_t i = 0; i < islands; ++i) {
      Replica& r = replicas[static_cast<size_t>(i)];
      if (job.islands.OwnSteps(i, step + 1) == r.steps) continue;  // a slower island's turn is later
      MOTLEY_ASSIGN_OR_RETURN(const auto loss_norm,
                              IslandStep(job, options, adamw, data, device, i, update_offset, r));
      // The mean loss over the sequences trained on; the islands' mean gradient norm.
      m.loss += loss_norm.first * static_cast<double>(r.sequences);
      m.grad_norm += loss_norm.second;
      sequences += r.sequences;
      ++stepped;
    }
    m.loss /= static_cast<double>(sequences);
    m.grad_norm /= static_cast<double>(stepped);
    ++state.updates;
    ++state.step;
    state.tokens_seen += sequences * tc.seq_len;
    m.islands = islands;
    std::tie(m.outer_step, m.outer_compression_error) = outer.At(state.step, total_steps, replicas);
    m.step = state.step;
    m.total_steps = total_steps;
    m.lr = lr;
    m.step_time_s = std::chrono::duration<double>(Clock::now() - step_start).count();
    m.tokens_per_s = static_cast<double>(sequences * tc.seq_len) / m.step_time_s;
    if (summary.steps_run == 0) summary.first_loss = m.loss;
    summary.last_loss = m.loss;
    if (++summary.steps_run > 1) {
      timed_s += m.step_time_s;
      timed_tokens += sequences * tc.seq_len;
    }
    MOTLEY_RETURN_IF_ERROR(metrics.Write(StepLine(m, false)));
    observer->OnStep(m);
    if (m.outer_step && ValidationDue(job, state.step, total_steps))
      MOTLEY_RETURN_IF_ERROR(validate(state.step));
    if ((m.outer_step && CheckpointDue(job, state.step, total_steps)) ||
        (state.step == total_steps && options.checkpoint_at_end)) {
      // The anchor (every replica holds it) with island 0's optimizer state, and the islands' own.
      MOTLEY_ASSIGN_OR_RETURN(summary.checkpoint_dir,
                              SaveRunCheckpoint(job.checkpoint.dir, job.checkpoint.keep, *replicas[0].model,
                                                replicas[0].shards, state, {IslandsState(outer, replicas)}));
      observer->OnCheckpoint(summary.checkpoint_dir);
    }
  }
  summary.wall_s = std::chrono::duration<double>(Clock::now() - run_start).count();
  SetThroughput(job, timed_s, timed_tokens, &summary);
  return summary;
}

}  // namespace motley::trainer_parts
