#include <cstdint>
#include <filesystem>
#include <functional>

#include <gtest/gtest.h>

#include "core/model.h"
#include "runtime/train/checkpoint.h"
#include "runtime/train/islands_outer_loop.h"
#include "runtime/train/lr_schedule.h"
#include "runtime/train/safetensors.h"
#include "runtime/train/trainer.h"
#include "runtime/train/trainer_parts.h"

namespace motley {
namespace {

namespace fs = std::filesystem;

class Recorder : public TrainObserver {
 public:
  void OnStep(const StepMetrics& m) override { losses[m.step] = m.loss; }
  void OnValidation(int64_t step, double loss) override { validation[step] = loss; }
  std::map<int64_t, double> losses, validation;
};

JobSpec SmallJob(const fs::path& dir) {
  JobSpec job;
  job.model = *FindModelPreset("llama-1m");
  job.model.num_layers = 2;
  job.model_ref = "llama-1m (2 layers)";
  job.training.steps = 6;
  job.training.seq_len = 32;
  job.training.global_batch_sequences = 4;
  job.training.precision = Precision::kFp32;
  job.data.validation_interval_steps = 3;
  job.data.validation_sequences = 4;
  job.lr_schedule.warmup_steps = 2;
  job.checkpoint.dir = (dir / "run").string();
  job.checkpoint.interval_steps = 3;
  job.checkpoint.keep = 5;
  return job;
}

TEST(Trainer, ResumingReproducesTheUninterruptedRunBitForBit) {
  const fs::path dir = fs::temp_directory_path() / ("motley_resume_" + std::to_string(::getpid()));
  fs::remove_all(dir);
  JobSpec job = SmallJob(dir);
  Recorder full;
  TrainOptions options;
  options.device = "cpu";
  options.microbatch_sequences = 2;  // accumulation too
  TrainSummary s = Train(job, options, &full).value();
  ASSERT_EQ(full.losses.size(), 6u);
  EXPECT_LT(s.last_loss, s.first_loss);

  // Resume the same job from step 3 into another run directory.
  JobSpec resumed_job = job;
  resumed_job.checkpoint.dir = (dir / "resumed").string();
  options.resume = (dir / "run" / "step-000003").string();
  Recorder resumed;
  ASSERT_TRUE(Train(resumed_job, options, &resumed).ok());
  ASSERT_EQ(resumed.losses.size(), 3u);
  for (int64_t step = 4; step <= 6; ++step) EXPECT_EQ(resumed.losses.at(step), full.losses.at(step)) << step;
  EXPECT_EQ(resumed.validation.at(6), full.validation.at(6));
  // The final weights too.
  LlamaModel a(job.model, 0), b(job.model, 0);
  ASSERT_TRUE(LoadModelWeights(ResolveCheckpointDir((dir / "run").string()).value(), *a).ok());
  ASSERT_TRUE(LoadModelWeights(ResolveCheckpointDir((dir / "resumed").string()).value(), *b).ok());
  for (const auto& p : a->named_parameters())
    EXPECT_TRUE(torch::equal(p.value(), b->named_parameters()[p.key()]));

  // Resuming past the end, or with another seed, is refused with the fix.
  options.resume = (dir / "run").string();
  Result<TrainSummary> done = Train(job, options, nullptr);
  ASSERT_FALSE(done.ok());
  EXPECT_NE(done.status().message().find("give --steps N with N > 6"), std::string::npos)
      << done.status().message();
  job.training.seed = 77;
  options.steps = 8;
  Result<TrainSummary> seed = Train(job, options, nullptr);
  ASSERT_FALSE(seed.ok());
  EXPECT_NE(seed.status().message().find("seed 1234 but the job says 77"), std::string::npos);
  fs::remove_all(dir);
}

TEST(Trainer, MicrobatchesGiveTheWholeBatchGradient) {
  // In fp64, where reassociation stays at ~1e-16 (in fp32 it would be ~1e-6 and CPU-dependent).
  const fs::path dir = fs::temp_directory_path() / ("motley_micro_" + std::to_string(::getpid()));
  fs::remove_all(dir);
  JobSpec job = SmallJob(dir);
  job.training.precision = Precision::kFp64;
  job.training.steps = 2;
  job.checkpoint.interval_steps = 0;
  TrainOptions options;
  options.device = "cpu";
  options.checkpoint_at_end = false;
  Recorder whole, split;
  ASSERT_TRUE(Train(job, options, &whole).ok());
  options.microbatch_sequences = 1;
  options.metrics_append = true;  // the same folder's metrics file: the second run adds to it
  ASSERT_TRUE(Train(job, options, &split).ok());
  for (int64_t step = 1; step <= 2; ++step)
    EXPECT_NEAR(whole.losses[step], split.losses[step], 1e-12 * whole.losses[step]);
  fs::remove_all(dir);
}

TEST(Trainer, Bf16ComputeTracksFp32WithFp32Masters) {
  const fs::path dir = fs::temp_directory_path() / ("motley_bf16_" + std::to_string(::getpid()));
  fs::remove_all(dir);
  JobSpec job = SmallJob(dir);
  job.training.steps = 4;
  job.checkpoint.interval_steps = 0;
  TrainOptions options;
  options.device = "cpu";
  Recorder fp32, bf16;
  ASSERT_TRUE(Train(job, options, &fp32).ok());
  job.training.precision = Precision::kBf16;
  job.checkpoint.dir = (dir / "bf16").string();
  ASSERT_TRUE(Train(job, options, &bf16).ok());
  for (int64_t step = 1; step <= 4; ++step)
    EXPECT_NEAR(bf16.losses[step], fp32.losses[step], 0.02 * fp32.losses[step]);
  // The checkpoint holds fp32 master weights that moved away from fp32 training's only by rounding.
  LlamaModel m(job.model, 0);
  ASSERT_TRUE(LoadModelWeights(ResolveCheckpointDir(job.checkpoint.dir).value(), *m).ok());
  EXPECT_EQ(m->parameters()[0].scalar_type(), torch::kFloat32);
  // fp64: parameters, moments and the checkpoint in fp64; the losses those of fp32 up to fp32's rounding.
  Recorder fp64;
  job.training.precision = Precision::kFp64;
  job.checkpoint.dir = (dir / "fp64").string();
  ASSERT_TRUE(Train(job, options, &fp64).ok());
  for (int64_t step = 1; step <= 4; ++step)
    EXPECT_NEAR(fp64.losses[step], fp32.losses[step], 1e-4 * fp32.losses[step]);
  const std::string fp64_dir = ResolveCheckpointDir(job.checkpoint.dir).value();
  Result<SafetensorsFile> weights = SafetensorsFile::Open(fp64_dir + "/model.safetensors");
  Result<SafetensorsFile> moments = SafetensorsFile::Open(fp64_dir + "/optimizer.safetensors");
  ASSERT_TRUE(weights.ok() && moments.ok());
  ASSERT_FALSE(weights->entries().empty());
  ASSERT_FALSE(moments->entries().empty());
  for (const auto& [name, e] : weights->entries()) EXPECT_EQ(e.dtype, "F64") << name;
  for (const auto& [name, e] : moments->entries()) EXPECT_EQ(e.dtype, "F64") << name;
  // fp16 on CPU: a clear refusal.
  job.training.precision = Precision::kFp16;
  Result<TrainSummary> fp16 = Train(job, options, nullptr);
  ASSERT_FALSE(fp16.ok());
  EXPECT_NE(fp16.status().message().find("needs a CUDA device"), std::string::npos);
  fs::remove_all(dir);
}

// Islands ([islands]) trained in one process.
JobSpec IslandsJob(const fs::path& dir, int64_t islands, int64_t inner_steps) {
  JobSpec job = SmallJob(dir);
  job.training.steps = 4;
  job.training.precision = Precision::kFp64;
  job.data.validation_interval_steps = 2;
  job.checkpoint.interval_steps = 0;
  job.islands.count = islands;
  job.islands.inner_steps = inner_steps;
  return job;
}

TEST(Islands, OneIslandIsTheSynchronousRunBitForBit) {
  const fs::path dir = fs::temp_directory_path() / ("motley_one_island_" + std::to_string(::getpid()));
  fs::remove_all(dir);
  TrainOptions options;
  options.device = "cpu";
  options.checkpoint_at_end = false;
  options.overwrite = true;  // both runs in one folder
  JobSpec plain = IslandsJob(dir, 1, 1), one = plain;
  plain.islands = {};
  Recorder a, b;
  ASSERT_TRUE(Train(plain, options, &a).ok());
  ASSERT_TRUE(Train(one, options, &b).ok());
  EXPECT_EQ(a.losses, b.losses);
  EXPECT_EQ(a.validation, b.validation);
  fs::remove_all(dir);
}

// Islands' replicas written out with the trainer's parts: `n` models from the job's seed, in fp64.
void MakeReplicas(const JobSpec& job, int n, std::vector<LlamaModel>* models,
                  std::vector<std::vector<ParamShard>>* shards) {
  for (int i = 0; i < n; ++i) {
    models->emplace_back(job.model, job.training.seed);
    models->back()->set_precision(Precision::kFp64);
    shards->push_back(trainer_parts::ShardsWithGradients(*models->back()));
  }
}

// The run's last checkpoint holds `model`'s parameters (1e-10).
void ExpectTheRunSaved(const JobSpec& job, LlamaModelImpl& model) {
  LlamaModel saved(job.model, 1);
  saved->set_precision(Precision::kFp64);
  ASSERT_TRUE(LoadModelWeights(ResolveCheckpointDir(job.checkpoint.dir).value(), *saved).ok());
  const auto want = model.named_parameters(), got = saved->named_parameters();
  for (const auto& p : want) {
    const torch::Tensor other = got[p.key()];
    EXPECT_LT((p.value() - other).abs().max().item<double>(), 1e-10) << p.key();
  }
}

// One island's inner step written out with the trainer's parts: its gradients on its 2 sequences from
// sequence `first` of data step `step`'s batch, clipped, and AdamW's `count`-th step at `lr`. Its loss.
double InnerStep(LlamaModelImpl& model, std::vector<ParamShard>& shards, const TrainingData& data,
                 const JobSpec& job, int64_t step, int64_t first, double lr, int64_t count) {
  TrainingConfig half = job.training;
  half.global_batch_sequences = 2;
  for (auto& s : shards) s.grad.zero_();
  const double loss =
      trainer_parts::AccumulateGradients(model, data.train, half, step, 2, torch::kCPU, 0, false, first)
          .value();
  ClipGradients(shards, std::sqrt(GradNormSquared(shards)), job.optimizer.grad_clip_norm);
  AdamW(job.optimizer).Step(shards, lr, count);
  return loss;
}

// Two islands' replicas written out with the trainer's parts (fp64) for the run's 4 steps, each on its
// half of the batch, their mean loss against the run's at each step; after step s (1-based) the
// parameters `meets(s, name)` names are averaged (outer lr 1 without momentum). Returns the replicas.
std::vector<LlamaModel> TwoIslandsAveraging(const JobSpec& job, const Recorder& run,
                                            const std::function<bool(int64_t, const std::string&)>& meets) {
  TrainingData data = OpenTrainingData(job.data, "", job.model.vocab_size, job.training.seq_len).value();
  std::vector<LlamaModel> models;
  std::vector<std::vector<ParamShard>> shards;
  MakeReplicas(job, 2, &models, &shards);
  for (int64_t step = 0; step < 4; ++step) {
    const double lr = LearningRate(job.optimizer, job.lr_schedule, step, 4);
    double loss = 0;
    for (int i = 0; i < 2; ++i)
      loss += InnerStep(*models[i], shards[i], data, job, step, 2 * i, lr, step + 1) / 2;
    EXPECT_NEAR(run.losses.at(step + 1), loss, 1e-12) << step;
    torch::NoGradGuard no_grad;
    for (size_t k = 0; k < shards[0].size(); ++k) {
      if (!meets(step + 1, shards[0][k].name)) continue;
      const torch::Tensor mean = (shards[0][k].param + shards[1][k].param) / 2;
      shards[0][k].param.copy_(mean);
      shards[1][k].param.copy_(mean);
    }
  }
  return models;
}

// DiLoCo at H = 1, outer lr 1 and no momentum: each step, each island takes its half of the batch
// with its own AdamW state, and the replicas' parameters are averaged — written out here with the
// trainer's parts (fp64).
TEST(Islands, TwoIslandsAtOneInnerStepEqualReplicasAveragedAfterEachStep) {
  const fs::path dir = fs::temp_directory_path() / ("motley_two_islands_" + std::to_string(::getpid()));
  fs::remove_all(dir);
  JobSpec job = IslandsJob(dir, 2, 1);
  job.islands.outer.lr = 1;
  job.islands.outer.momentum = 0;
  TrainOptions options;
  options.device = "cpu";
  Recorder run;
  ASSERT_TRUE(Train(job, options, &run).ok());
  ASSERT_EQ(run.losses.size(), 4u);

  std::vector<LlamaModel> models =
      TwoIslandsAveraging(job, run, [](int64_t, const std::string&) { return true; });
  ExpectTheRunSaved(job, *models[0]);
  // The islands are not the synchronous run: averaging two AdamW replicas is another algorithm.
  Recorder sync;
  JobSpec plain = job;
  plain.islands = {};
  plain.checkpoint.dir = (dir / "sync").string();
  ASSERT_TRUE(Train(plain, options, &sync).ok());
  EXPECT_NE(sync.losses.at(4), run.losses.at(4));
  fs::remove_all(dir);
}

// Streaming DiLoCo's fragments ([islands] fragments = 2, H = 2, outer lr 1, no momentum): the
// model's parts fall into fragment (part mod 2) — the embedding and layer 1 in fragment 0, layer 0 and
// the final norm and head in fragment 1 — and fragment 0's values are averaged at the first step of
// each round, fragment 1's at its end; at the run's end every fragment at once. Written out here with
// the trainer's parts (fp64).
TEST(Islands, FragmentsOfTheModelMeetAtStaggeredStepsOfEachRound) {
  const fs::path dir = fs::temp_directory_path() / ("motley_fragments_" + std::to_string(::getpid()));
  fs::remove_all(dir);
  JobSpec job = IslandsJob(dir, 2, 2);
  job.data.validation_interval_steps = 0;
  job.islands.fragments = 2;
  job.islands.outer.lr = 1;
  job.islands.outer.momentum = 0;
  TrainOptions options;
  options.device = "cpu";
  Recorder run;
  ASSERT_TRUE(Train(job, options, &run).ok());
  ASSERT_EQ(run.losses.size(), 4u);

  using trainer_parts::IslandFragmentOf;
  EXPECT_EQ(IslandFragmentOf("model.embed_tokens.weight", 2, 2), 0);
  EXPECT_EQ(IslandFragmentOf("model.layers.0.self_attn.q_proj.weight", 2, 2), 1);
  EXPECT_EQ(IslandFragmentOf("model.layers.1.mlp.up_proj.weight", 2, 2), 0);
  EXPECT_EQ(IslandFragmentOf("model.norm.weight", 2, 2), 1);
  EXPECT_EQ(IslandFragmentOf("lm_head.weight", 2, 2), 1);
  // After step s the fragment whose round ends there: 0 at odd steps, 1 at even; every one at the end.
  std::vector<LlamaModel> models = TwoIslandsAveraging(job, run, [](int64_t step, const std::string& name) {
    return step == 4 || IslandFragmentOf(name, 2, 2) == (step % 2 == 1 ? 0 : 1);
  });
  ExpectTheRunSaved(job, *models[0]);
  // Not the whole model meeting at each round's end: the losses part.
  Recorder whole;
  job.islands.fragments = 1;
  job.checkpoint.dir = (dir / "whole").string();
  ASSERT_TRUE(Train(job, options, &whole).ok());
  EXPECT_GT(std::abs(whole.losses.at(4) - run.losses.at(4)), 1e-9);
  fs::remove_all(dir);
}

// A slower island takes fewer inner steps a round (inner_steps_per_island = [2, 1]): island 1 steps at
// every second step of the clock, on its own steps' batches, with the learning-rate schedule over its own
// 2 steps and AdamW counting its own; at each outer step (outer lr 1, no momentum) the anchor is the
// islands' parameters weighted by the tokens each trained on since — 2/3 and 1/3 — written out here with
// the trainer's parts (fp64).
TEST(Islands, ASlowerIslandTakesFewerInnerStepsAndWeighsByItsTokens) {
  const fs::path dir = fs::temp_directory_path() / ("motley_islands_each_" + std::to_string(::getpid()));
  fs::remove_all(dir);
  JobSpec job = IslandsJob(dir, 2, 2);
  job.islands.inner_steps_each = {2, 1};
  job.islands.outer.lr = 1;
  job.islands.outer.momentum = 0;
  TrainOptions options;
  options.device = "cpu";
  Recorder run;
  ASSERT_TRUE(Train(job, options, &run).ok());
  ASSERT_EQ(run.losses.size(), 4u);

  TrainingData data = OpenTrainingData(job.data, "", job.model.vocab_size, job.training.seq_len).value();
  std::vector<LlamaModel> models;
  std::vector<std::vector<ParamShard>> shards;
  MakeReplicas(job, 2, &models, &shards);
  const int64_t total[2] = {4, 2};
  int64_t own[2] = {0, 0};
  for (int64_t clock = 0; clock < 4; ++clock) {
    double loss = 0;
    int islands = 0;
    for (int i = 0; i < 2; ++i) {
      if (i == 1 && clock % 2 == 0) continue;  // island 1's step ends every second step of the clock
      loss += InnerStep(*models[i], shards[i], data, job, own[i], 2 * i,
                        LearningRate(job.optimizer, job.lr_schedule, own[i], total[i]), own[i] + 1);
      ++islands;
      ++own[i];
    }
    EXPECT_NEAR(run.losses.at(clock + 1), loss / islands, 1e-12) << clock;
    if (clock % 2 == 0) continue;
    torch::NoGradGuard no_grad;
    for (size_t k = 0; k < shards[0].size(); ++k) {
      const torch::Tensor anchor = shards[0][k].param * (2.0 / 3) + shards[1][k].param * (1.0 / 3);
      shards[0][k].param.copy_(anchor);
      shards[1][k].param.copy_(anchor);
    }
  }
  ExpectTheRunSaved(job, *models[0]);
  fs::remove_all(dir);
}

// What crosses the link compressed: every outer step's line says how far its pseudo-gradient moved.
// A checkpoint of islands holds the outer momentum and every island's moments: resumed with the same
// islands, the run goes on as if uninterrupted (bit for bit); resumed as 4 islands, or as a synchronous
// run, it starts from the anchor: the first resumed step's loss — each island's on its share of the same
// batch, at the anchor — is the uninterrupted run's.
TEST(Islands, ACheckpointOfIslandsResumesUnderAnyLayout) {
  const fs::path dir = fs::temp_directory_path() / ("motley_islands_resume_" + std::to_string(::getpid()));
  fs::remove_all(dir);
  JobSpec job = IslandsJob(dir, 2, 2);
  job.training.steps = 6;
  job.checkpoint.interval_steps = 2;
  TrainOptions options;
  options.device = "cpu";
  Recorder full;
  ASSERT_TRUE(Train(job, options, &full).ok());
  ASSERT_EQ(full.losses.size(), 6u);
  const std::string at4 = (dir / "run" / "step-000004").string();
  ASSERT_TRUE(fs::exists(fs::path(at4) / "islands.safetensors"));
  const SafetensorsFile saved =
      SafetensorsFile::Open((fs::path(at4) / "islands.safetensors").string()).value();
  EXPECT_EQ(saved.metadata().at("islands"), "2");
  EXPECT_EQ(saved.metadata().at("outer_steps"), "2");
  EXPECT_TRUE(saved.contains("outer.model.norm.weight.momentum"));
  EXPECT_TRUE(saved.contains("island1.model.norm.weight.exp_avg"));

  options.resume = at4;
  for (int64_t islands : {2, 4, 1}) {
    SCOPED_TRACE(islands);
    JobSpec again = job;
    again.islands.count = islands;
    if (islands == 1) again.islands = {};
    again.checkpoint.dir = (dir / ("resumed" + std::to_string(islands))).string();
    Recorder resumed;
    ASSERT_TRUE(Train(again, options, &resumed).ok());
    ASSERT_EQ(resumed.losses.size(), 2u);
    if (islands == 2) {
      EXPECT_EQ(resumed.losses, (std::map<int64_t, double>{{5, full.losses[5]}, {6, full.losses[6]}}));
      EXPECT_EQ(resumed.validation.at(6), full.validation.at(6));
    } else {
      EXPECT_NEAR(resumed.losses.at(5), full.losses.at(5), 1e-12);
      EXPECT_NE(resumed.losses.at(6), full.losses.at(6));  // another layout trains on differently
    }
  }
  // Without the islands' own file, the checkpoint is refused by its checksums, not resumed wrong.
  fs::remove(fs::path(at4) / "islands.safetensors");
  JobSpec again = job;
  again.checkpoint.dir = (dir / "refused").string();
  Recorder refused;
  const Result<TrainSummary> r = Train(again, options, &refused);
  ASSERT_FALSE(r.ok());
  EXPECT_NE(r.status().message().find("islands.safetensors"), std::string::npos) << r.status().message();
  fs::remove_all(dir);
}

// With fragments (each with its own outer momentum) a checkpoint — where every fragment meets — resumes
// as the run not stopped, bit for bit.
TEST(Islands, ACheckpointOfFragmentedIslandsResumesAsTheRunNotStopped) {
  const fs::path dir = fs::temp_directory_path() / ("motley_fragments_resume_" + std::to_string(::getpid()));
  fs::remove_all(dir);
  JobSpec job = IslandsJob(dir, 2, 4);
  job.training.steps = 8;
  job.data.validation_interval_steps = 4;
  job.checkpoint.interval_steps = 4;
  job.islands.fragments = 2;
  job.islands.overlap_steps = 1;
  TrainOptions options;
  options.device = "cpu";
  Recorder full;
  ASSERT_TRUE(Train(job, options, &full).ok());
  options.resume = (dir / "run" / "step-000004").string();
  JobSpec again = job;
  again.checkpoint.dir = (dir / "resumed").string();
  Recorder resumed;
  ASSERT_TRUE(Train(again, options, &resumed).ok());
  ASSERT_EQ(resumed.losses.size(), 4u);
  for (int64_t step = 5; step <= 8; ++step) EXPECT_EQ(resumed.losses.at(step), full.losses.at(step)) << step;
  EXPECT_EQ(resumed.validation.at(8), full.validation.at(8));
  fs::remove_all(dir);
}

TEST(Islands, CompressedPseudoGradientsReportTheirErrorAtEachOuterStep) {
  const fs::path dir = fs::temp_directory_path() / ("motley_islands_int8_" + std::to_string(::getpid()));
  fs::remove_all(dir);
  class Outer : public TrainObserver {
   public:
    void OnStep(const StepMetrics& m) override {
      if (m.outer_step) errors[m.step] = m.outer_compression_error;
    }
    std::map<int64_t, double> errors;
  };
  for (const std::string compression : {"none", "fp16", "int8", "int4"}) {
    JobSpec job = IslandsJob(dir, 2, 2);
    job.training.precision = Precision::kFp32;
    job.islands.outer.compression = compression;
    TrainOptions options;
    options.device = "cpu";
    options.checkpoint_at_end = false;
    options.overwrite = true;  // every compression's run in one folder
    Outer outer;
    ASSERT_TRUE(Train(job, options, &outer).ok());
    ASSERT_EQ(outer.errors.size(), 2u) << compression;  // after steps 2 and 4
    for (const auto& [step, error] : outer.errors) {
      if (compression == "none") {
        EXPECT_EQ(error, 0) << step;
      } else {
        EXPECT_GT(error, compression == "fp16" ? 1e-6 : 1e-4) << compression << " " << step;
        EXPECT_LT(error, compression == "fp16"   ? 1e-3
                         : compression == "int8" ? 0.05
                                                 : 0.15)
            << compression << " " << step;
      }
    }
  }
  fs::remove_all(dir);
}

}  // namespace
}  // namespace motley
