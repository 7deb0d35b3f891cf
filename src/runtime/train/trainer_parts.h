// The parts of the single-process trainer (trainer.cc) that its loop over islands
// (islands_trainer.cc) shares with it.
#pragma once

#include <chrono>
#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include <torch/torch.h>
#include <nlohmann/json.hpp>

#include "core/job.h"
#include "core/status.h"
#include "data/training_data.h"
#include "runtime/model/llama_model.h"
#include "runtime/optim/adamw.h"
#include "runtime/train/checkpoint.h"
#include "runtime/train/loss_scaler.h"
#include "runtime/train/metrics_log.h"

namespace motley {
// trainer.h's (which includes nothing of this file's: trainer.cc includes it).
struct StepMetrics;
struct TrainOptions;
struct TrainStart;
struct TrainSummary;
class TrainObserver;
}  // namespace motley

namespace motley::trainer_parts {

using Clock = std::chrono::steady_clock;

/// --device: "cpu", "cuda" or "auto" (CUDA when present).
Result<torch::Device> ChooseDevice(const std::string& name);
/// fp16 needs CUDA.
Status CheckPrecisionOn(Precision p, const torch::Device& device);

/// One step's forward and backward over `tc.global_batch_sequences` sequences — the global batch's
/// from sequence `first_sequence` on — in microbatches of `micro`, the gradients summed into the
/// parameters' (`loss_scale` > 0: scaled); their mean loss.
Result<double> AccumulateGradients(LlamaModelImpl& model, const TokenDataset& train, const TrainingConfig& tc,
                                   int64_t sample_step, int64_t micro, const torch::Device& device,
                                   double loss_scale, bool inject_nan, int64_t first_sequence = 0);

/// A step's line in the metrics file.
nlohmann::json StepLine(const StepMetrics& m, bool loss_scaling);

TrainStart StartOf(const JobSpec& job, const torch::Device& device, const TrainerState& state,
                   int64_t total_steps, int64_t tokens_per_step, const TrainingData& data,
                   const std::string& metrics_path);

/// Every parameter as a whole shard, its gradient allocated once (accumulated into in place,
/// zeroed each step).
std::vector<ParamShard> ShardsWithGradients(LlamaModelImpl& model);

TrainerState FreshState(const JobSpec& job, int64_t total_steps);

/// The weights, moments and counters of the checkpoint `resume` names, checked against the job.
Status Resume(const JobSpec& job, const std::string& resume, int64_t total_steps, LlamaModelImpl& model,
              std::vector<ParamShard>& shards, TrainerState* state, LossScaler* scaler);

/// The run folder locked (and claimed, when the run writes a checkpoint) and the metrics opened.
Result<std::unique_ptr<RunDirLock>> OpenRunFolder(const JobSpec& job, const TrainOptions& options,
                                                  const std::string& metrics_path, MetricsLog* metrics);

/// The validation loss at `step` (over `sequences` windows), recorded and reported.
Status Validate(LlamaModelImpl& model, const TokenDataset& validation, int64_t seq, int64_t sequences,
                const torch::Device& device, int64_t step, TrainSummary* summary, MetricsLog& metrics,
                TrainObserver* observer);

/// Trains a job with [islands] in this process, the islands one after another: each on its share of
/// the global batch with its own model replica and AdamW state, and every `inner_steps` (and at the
/// end) an outer step that moves every replica to the new anchor (runtime/islands/outer_optimizer.h).
Result<TrainSummary> TrainIslands(const JobSpec& job, const TrainOptions& options, TrainObserver* observer);

}  // namespace motley::trainer_parts
