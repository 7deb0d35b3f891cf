#include "runtime/train/trainer.h"

#include <chrono>
#include <cmath>
#include <cstdint>
#include <filesystem>
#include <fstream>
#include <limits>

#include <fmt/format.h>
#include <nlohmann/json.hpp>

#include "data/training_data.h"
#include "runtime/model/llama_model.h"
#include "runtime/optim/adamw.h"
#include "runtime/train/checkpoint.h"
#include "runtime/train/divergence.h"
#include "runtime/train/evaluate.h"
#include "runtime/train/loss_scaler.h"
#include "runtime/train/lr_schedule.h"
#include "runtime/train/metrics_log.h"
#include "runtime/train/trainer_parts.h"

namespace motley {
namespace fs = std::filesystem;
namespace trainer_parts {

Result<torch::Device> ChooseDevice(const std::string& name) {
  if (name == "cpu") return torch::Device(torch::kCPU);
  if (name == "cuda") {
    if (!torch::cuda::is_available())
      return Status::InvalidArgument("--device cuda: no CUDA device is visible to this build of libtorch");
    return torch::Device(torch::kCUDA, 0);
  }
  if (name == "auto")
    return torch::cuda::is_available() ? torch::Device(torch::kCUDA, 0) : torch::Device(torch::kCPU);
  return Status::InvalidArgument(fmt::format("--device {}: expected auto, cpu or cuda", name));
}

Status CheckPrecisionOn(Precision p, const torch::Device& device) {
  if (p == Precision::kFp16 && device.is_cpu())
    return Status::InvalidArgument(
        "[training] precision = \"fp16\" needs a CUDA device (libtorch's CPU matmuls lack fp16); use "
        "\"bf16\", "
        "\"fp32\" or \"fp64\" on CPU");
  return Status::Ok();
}

}  // namespace trainer_parts

bool ValidationDue(const JobSpec& job, int64_t step, int64_t total) {
  const int64_t vi = job.data.validation_interval_steps;
  return step == total || (vi > 0 && step % vi == 0);
}

bool CheckpointDue(const JobSpec& job, int64_t step, int64_t total) {
  const int64_t ci = job.checkpoint.interval_steps;
  return ci > 0 && step % ci == 0 && step != total;
}

Status CheckResumedModel(const std::string& dir, const JobSpec& job) {
  MOTLEY_ASSIGN_OR_RETURN(const ModelSpec saved, LoadCheckpointModelSpec(dir));
  const ModelSpec& a = saved;
  const ModelSpec& b = job.model;
  const bool same = a.hidden_size == b.hidden_size && a.num_layers == b.num_layers &&
                    a.num_heads == b.num_heads && a.num_kv_heads == b.num_kv_heads &&
                    a.ffn_size == b.ffn_size && a.vocab_size == b.vocab_size &&
                    a.tie_embeddings == b.tie_embeddings && a.rope_theta == b.rope_theta &&
                    a.rope_scaling == b.rope_scaling;
  if (same) return Status::Ok();
  return Status::InvalidArgument(
      fmt::format("--resume {}: the checkpoint's model (config.json) differs from the job's "
                  "model {}; resume with the job that wrote it",
                  dir, job.model_ref));
}

Status CheckResumable(const std::string& dir, uint64_t seed, int64_t step, const JobSpec& job,
                      int64_t total_steps) {
  if (seed != job.training.seed)
    return Status::InvalidArgument(
        fmt::format("--resume {}: the checkpoint was trained with seed {} but the job "
                    "says {}; the data order would change — use the same seed",
                    dir, seed, job.training.seed));
  if (step >= total_steps)
    return Status::InvalidArgument(
        fmt::format("--resume {}: the checkpoint is at step {} of a {}-step run; give "
                    "--steps N with N > {} to train further",
                    dir, step, total_steps, step));
  return Status::Ok();
}

void SetThroughput(const JobSpec& job, double timed_s, int64_t timed_tokens, TrainSummary* summary) {
  const int64_t seq = job.training.seq_len;
  summary->tokens_per_s = timed_s > 0 ? static_cast<double>(timed_tokens) / timed_s : 0.0;
  summary->model_tflops_per_s = summary->tokens_per_s * TrainFlopsPerToken(job.model, seq, false) / 1e12;
  summary->hardware_tflops_per_s = summary->tokens_per_s *
                                   TrainFlopsPerToken(job.model, seq, job.training.activation_checkpointing) /
                                   1e12;
}

namespace trainer_parts {

// The weights, moments and counters of the checkpoint `resume` names, checked against the job.
Status Resume(const JobSpec& job, const std::string& resume, int64_t total_steps, LlamaModelImpl& model,
              std::vector<ParamShard>& shards, TrainerState* state, LossScaler* scaler) {
  MOTLEY_ASSIGN_OR_RETURN(std::string dir, ResolveCheckpointDir(resume));
  MOTLEY_RETURN_IF_ERROR(CheckResumedModel(dir, job));
  MOTLEY_RETURN_IF_ERROR(LoadModelWeights(dir, model));
  MOTLEY_ASSIGN_OR_RETURN(TrainerState loaded, LoadTrainingState(dir, shards));
  MOTLEY_RETURN_IF_ERROR(CheckResumable(dir, loaded.seed, loaded.step, job, total_steps));
  state->step = loaded.step;
  state->updates = loaded.updates;
  state->tokens_seen = loaded.tokens_seen;
  state->lr_factor = loaded.lr_factor;  // rollbacks before the checkpoint carry on
  state->data_skip_steps = loaded.data_skip_steps;
  state->rollbacks = loaded.rollbacks;
  scaler->Restore(loaded.loss_scale, loaded.loss_scale_good_steps);
  return Status::Ok();
}

Result<double> AccumulateGradients(LlamaModelImpl& model, const TokenDataset& train, const TrainingConfig& tc,
                                   int64_t sample_step, int64_t micro, const torch::Device& device,
                                   double loss_scale, bool inject_nan, int64_t first_sequence) {
  const int64_t batch = tc.global_batch_sequences, seq = tc.seq_len;
  std::vector<int64_t> windows;
  double loss_sum = 0;
  for (int64_t first = 0; first < batch; first += micro) {
    const int64_t n = std::min(micro, batch - first);
    MOTLEY_RETURN_IF_ERROR(
        SampleTrainingWindows(train, tc.seed, sample_step, first_sequence + first, n, seq, &windows));
    torch::Tensor tokens = torch::from_blob(windows.data(), {n, seq + 1}, torch::kInt64).to(device);
    torch::Tensor logits = model.forward(tokens.narrow(1, 0, seq), tc.activation_checkpointing);
    // This microbatch's share of the step's mean loss.
    torch::Tensor loss = NextTokenLoss(logits, tokens.narrow(1, 1, seq)) * (static_cast<double>(n) / batch);
    if (inject_nan) loss = loss * std::numeric_limits<double>::quiet_NaN();
    loss_sum += loss.item<double>();
    (loss_scale > 0 ? loss * loss_scale : loss).backward();
  }
  return loss_sum;
}

nlohmann::json StepLine(const StepMetrics& m, bool loss_scaling) {
  nlohmann::json line = {{"step", m.step},
                         {"loss", m.loss},
                         {"lr", m.lr},
                         {"tokens_per_s", m.tokens_per_s},
                         {"grad_norm", m.grad_norm},
                         {"step_time_s", m.step_time_s}};
  if (loss_scaling) {
    line["loss_scale"] = m.loss_scale;
    line["skipped"] = m.skipped;
  }
  if (m.islands > 0) {
    line["islands"] = m.islands;
    if (m.outer_step) {
      line["outer_step"] = true;
      line["outer_compression_error"] = m.outer_compression_error;
    }
  }
  return line;
}

TrainStart StartOf(const JobSpec& job, const torch::Device& device, const TrainerState& state,
                   int64_t total_steps, int64_t tokens_per_step, const TrainingData& data,
                   const std::string& metrics_path) {
  TrainStart start;
  start.device = device.is_cpu() ? fmt::format("cpu ({} threads)", at::get_num_threads()) : device.str();
  start.precision = state.precision;
  start.parameters = TotalParams(job.model);
  start.first_step = state.step;
  start.total_steps = total_steps;
  start.tokens_per_step = tokens_per_step;
  start.train_data = data.train.name();
  start.validation_data = data.validation ? data.validation->name() : "";
  start.metrics_path = metrics_path;
  return start;
}

// A diverged step: stopped (an error saying what diverged and where the last good checkpoint is),
// or rolled back to the last good checkpoint ([divergence]).
Status RollBackOrStop(const JobSpec& job, const std::string& resume, int64_t step, double loss_sum,
                      double grad_norm, LlamaModelImpl& model, std::vector<ParamShard>& shards,
                      TrainerState* state, LossScaler* scaler, MetricsLog& metrics) {
  const std::string what = DivergedStep(step + 1, loss_sum, grad_norm, {}, "");
  const std::string good = LastGoodCheckpoint(job.checkpoint.dir, resume);
  const bool back = RollsBack(job.divergence, good, state->rollbacks);
  MOTLEY_RETURN_IF_ERROR(metrics.Write(DivergedEvent(step + 1, loss_sum, grad_norm, {}, "", back)));
  if (!back) return StopDiverged(what, good, job.divergence, state->rollbacks);
  MOTLEY_RETURN_IF_ERROR(LoadModelWeights(good, model));
  MOTLEY_ASSIGN_OR_RETURN(const TrainerState loaded, LoadTrainingState(good, shards));
  *state = RolledBack(job.divergence, *state, loaded, step + 1);
  scaler->Restore(loaded.loss_scale, loaded.loss_scale_good_steps);
  fmt::print(stderr, "motley train: {}\n", RolledBackMessage(what, good, *state, job.divergence));
  MOTLEY_RETURN_IF_ERROR(metrics.Write(RollbackEvent(step + 1, good, *state)));
  return Status::Ok();
}

std::vector<ParamShard> ShardsWithGradients(LlamaModelImpl& model) {
  std::vector<ParamShard> shards = WholeParameterShards(model);
  for (auto& s : shards) {
    s.param.mutable_grad() = torch::zeros_like(s.param);
    s.grad = s.param.grad();
  }
  return shards;
}

TrainerState FreshState(const JobSpec& job, int64_t total_steps) {
  TrainerState state;
  state.total_steps = total_steps;
  state.seed = job.training.seed;
  state.precision = std::string(PrecisionName(job.training.precision));
  state.job_file = job.file;
  return state;
}

Result<std::unique_ptr<RunDirLock>> OpenRunFolder(const JobSpec& job, const TrainOptions& options,
                                                  const std::string& metrics_path, MetricsLog* metrics) {
  MOTLEY_ASSIGN_OR_RETURN(std::unique_ptr<RunDirLock> dir_lock, RunDirLock::Acquire(job.checkpoint.dir));
  if (options.checkpoint_at_end)
    MOTLEY_RETURN_IF_ERROR(ClaimRunDir(job.checkpoint.dir, !options.resume.empty(), options.overwrite, true));
  MOTLEY_RETURN_IF_ERROR(
      metrics->Open(metrics_path, !options.resume.empty() || options.metrics_append, options.overwrite));
  return dir_lock;
}

Status Validate(LlamaModelImpl& model, const TokenDataset& validation, int64_t seq, int64_t sequences,
                const torch::Device& device, int64_t step, TrainSummary* summary, MetricsLog& metrics,
                TrainObserver* observer) {
  model.eval();
  MOTLEY_ASSIGN_OR_RETURN(const EvalResult eval, EvaluateLoss(model, validation, seq, sequences, device));
  const double loss = eval.loss;
  model.train();
  if (!summary->first_validation_loss) summary->first_validation_loss = loss;
  summary->last_validation_loss = loss;
  MOTLEY_RETURN_IF_ERROR(metrics.Write({{"step", step}, {"val_loss", loss}}));
  observer->OnValidation(step, loss);
  return Status::Ok();
}

}  // namespace trainer_parts

using namespace trainer_parts;  // NOLINT: this file's own parts

Result<TrainSummary> Train(const JobSpec& job, const TrainOptions& options, TrainObserver* observer) {
  TrainObserver quiet;
  if (observer == nullptr) observer = &quiet;
  if (job.islands.count > 1) return TrainIslands(job, options, observer);
  const TrainingConfig& tc = job.training;
  const int64_t total_steps = options.steps > 0 ? options.steps : tc.steps;
  MOTLEY_ASSIGN_OR_RETURN(torch::Device device, ChooseDevice(options.device));
  MOTLEY_RETURN_IF_ERROR(CheckPrecisionOn(tc.precision, device));
  // On CPU one torch thread beside OpenBLAS's was 2.5x faster than two (the default job, 2 cores).
  if (device.is_cpu()) at::set_num_threads(options.threads > 0 ? options.threads : 1);

  const std::string job_dir = job.file.empty() ? "" : fs::path(job.file).parent_path().string();
  MOTLEY_ASSIGN_OR_RETURN(TrainingData data,
                          OpenTrainingData(job.data, job_dir, job.model.vocab_size, tc.seq_len));

  LlamaModel model(job.model, tc.seed);
  model->set_precision(tc.precision);
  model->to(device);
  std::vector<ParamShard> shards = ShardsWithGradients(*model);
  TrainerState state = FreshState(job, total_steps);
  LossScaler scaler;
  // A Hugging Face folder to start from (converted to the run's master precision as it is read).
  if (!job.init_from.empty() && options.resume.empty())
    MOTLEY_RETURN_IF_ERROR(LoadModelWeights(job.init_from, *model));
  if (!options.resume.empty())
    MOTLEY_RETURN_IF_ERROR(Resume(job, options.resume, total_steps, *model, shards, &state, &scaler));

  const std::string metrics_path = options.metrics_path.empty()
                                       ? (fs::path(job.checkpoint.dir) / "metrics.jsonl").string()
                                       : options.metrics_path;
  MetricsLog metrics;
  MOTLEY_ASSIGN_OR_RETURN(const std::unique_ptr<RunDirLock> dir_lock,
                          OpenRunFolder(job, options, metrics_path, &metrics));

  const int64_t batch = tc.global_batch_sequences, seq = tc.seq_len;
  const int64_t micro =
      options.microbatch_sequences > 0 ? std::min(options.microbatch_sequences, batch) : batch;
  const int64_t tokens_per_step = batch * seq;
  observer->OnStart(StartOf(job, device, state, total_steps, tokens_per_step, data, metrics_path));

  TrainSummary summary;
  const int64_t val_sequences =
      data.validation && options.validate
          ? std::min(job.data.validation_sequences, NumEvaluationWindows(*data.validation, seq))
          : 0;
  auto validate = [&](int64_t step) {
    if (val_sequences <= 0) return Status::Ok();  // no validation data
    return Validate(*model, *data.validation, seq, val_sequences, device, step, &summary, metrics, observer);
  };
  auto checkpoint = [&]() -> Status {
    MOTLEY_ASSIGN_OR_RETURN(summary.checkpoint_dir, SaveRunCheckpoint(job.checkpoint.dir, job.checkpoint.keep,
                                                                      *model, shards, state));
    observer->OnCheckpoint(summary.checkpoint_dir);
    return Status::Ok();
  };

  const AdamW adamw(job.optimizer);
  const auto run_start = Clock::now();
  double timed_s = 0;
  int64_t timed_tokens = 0;
  bool nan_injected = false;
  if (state.step == 0) MOTLEY_RETURN_IF_ERROR(validate(0));
  while (state.step < total_steps) {
    const auto step_start = Clock::now();
    const int64_t step = state.step;  // 0-based index of this step: the sampler's and the schedule's key
    const double lr = LearningRate(job.optimizer, job.lr_schedule, step, total_steps) * state.lr_factor;
    // Fault injection (tests): this step's loss is NaN, once a process.
    const bool inject_nan =
        options.faults.diverge_rank == 0 && step + 1 == options.faults.diverge_at_step && !nan_injected;
    nan_injected = nan_injected || inject_nan;
    for (auto& s : shards) s.grad.zero_();
    MOTLEY_ASSIGN_OR_RETURN(const double loss_sum,
                            AccumulateGradients(*model, data.train, tc, step + state.data_skip_steps, micro,
                                                device, tc.loss_scaling ? scaler.scale() : 0, inject_nan));
    if (tc.loss_scaling &&
        step + 1 == options.faults.overflow_step) {  // fault injection (tests): an fp16 overflow
      torch::NoGradGuard no_grad;
      shards.front().grad.view(-1)[0] = std::numeric_limits<double>::infinity();
    }
    bool apply = true;
    if (tc.loss_scaling) apply = scaler.UnscaleAndUpdate(shards);
    StepMetrics m;
    if (apply) m.grad_norm = std::sqrt(GradNormSquared(shards));
    if (!tc.loss_scaling && (!std::isfinite(loss_sum) || !std::isfinite(m.grad_norm))) {
      // Diverged ([divergence]): not applied; stop, or go back to the last good checkpoint.
      MOTLEY_RETURN_IF_ERROR(RollBackOrStop(job, options.resume, step, loss_sum, m.grad_norm, *model, shards,
                                            &state, &scaler, metrics));
      continue;
    }
    if (apply) {
      ClipGradients(shards, m.grad_norm, job.optimizer.grad_clip_norm);
      adamw.Step(shards, lr, ++state.updates);
    }
    ++state.step;
    state.tokens_seen += tokens_per_step;
    m.step = state.step;
    m.total_steps = total_steps;
    m.loss = loss_sum;
    m.lr = lr;
    m.skipped = !apply;
    m.loss_scale = scaler.scale();
    state.loss_scale = scaler.scale();
    state.loss_scale_good_steps = scaler.good_steps();
    m.step_time_s = std::chrono::duration<double>(Clock::now() - step_start).count();
    m.tokens_per_s = static_cast<double>(tokens_per_step) / m.step_time_s;
    if (summary.steps_run == 0) summary.first_loss = m.loss;
    summary.last_loss = m.loss;
    if (++summary.steps_run > 1) {  // the first step warms caches and allocators up
      timed_s += m.step_time_s;
      timed_tokens += tokens_per_step;
    }
    MOTLEY_RETURN_IF_ERROR(metrics.Write(StepLine(m, tc.loss_scaling)));
    observer->OnStep(m);
    if (ValidationDue(job, state.step, total_steps)) MOTLEY_RETURN_IF_ERROR(validate(state.step));
    if (CheckpointDue(job, state.step, total_steps)) MOTLEY_RETURN_IF_ERROR(checkpoint());
  }
  if (options.checkpoint_at_end && summary.steps_run > 0) MOTLEY_RETURN_IF_ERROR(checkpoint());
  summary.wall_s = std::chrono::duration<double>(Clock::now() - run_start).count();
  SetThroughput(job, timed_s, timed_tokens, &summary);
  return summary;
}

}  // namespace motley
