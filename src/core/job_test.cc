#include "core/job.h"

#include <filesystem>
#include <fstream>

#include <gtest/gtest.h>

#include "core/builtin_files.h"
#include "core/job_parse.h"

namespace motley {
namespace {

const char* kMinimal = R"(
model = "llama-1m"
cluster = "local-emulated"
[training]
seq_len = 128
global_batch_tokens = 4096
precision = "fp32"
)";

std::string Error(const std::string& text) {
  Result<JobSpec> j = ParseJobToml(text, "job.toml");
  EXPECT_FALSE(j.ok());
  return j.ok() ? "" : j.status().message();
}

TEST(Job, DefaultJobParsesWithItsModelAndCluster) {
  const BuiltinFile* f = FindBuiltinFile("jobs", "default");
  ASSERT_NE(f, nullptr);
  Result<JobSpec> j = ParseJobToml(f->text, std::string(f->path));
  ASSERT_TRUE(j.ok()) << j.status().message();
  EXPECT_EQ(j->model.name, "llama-1m");
  EXPECT_EQ(j->cluster.num_devices(), 4);
  EXPECT_EQ(j->training.global_batch_tokens(), 32 * 128);
  EXPECT_EQ(j->training.precision, Precision::kFp32);
  EXPECT_EQ(j->lr_schedule.warmup_steps, 30);
  EXPECT_EQ(j->plan.strategy, "auto");
}

TEST(Job, DefaultsLiveInTheConfigStructs) {
  Result<JobSpec> j = ParseJobToml(kMinimal, "job.toml");
  ASSERT_TRUE(j.ok()) << j.status().message();
  EXPECT_EQ(j->training.global_batch_sequences, 32);
  EXPECT_EQ(j->training.steps, TrainingConfig{}.steps);
  EXPECT_DOUBLE_EQ(j->optimizer.lr, OptimizerConfig{}.lr);
  EXPECT_EQ(j->lr_schedule.decay, "cosine");
  EXPECT_EQ(j->data.train, "builtin");
  // The default warm-up is capped at a tenth of a short run.
  Result<JobSpec> short_run = ParseJobToml(std::string(kMinimal) + "steps = 50\n", "job.toml");
  ASSERT_TRUE(short_run.ok()) << short_run.status().message();
  EXPECT_EQ(short_run->lr_schedule.warmup_steps, 5);
}

TEST(Job, PathsAreRelativeToTheJobFile) {
  auto dir = std::filesystem::temp_directory_path() / ("motley_job_test_" + std::to_string(::getpid()));
  std::filesystem::create_directories(dir / "jobs");
  std::ofstream(dir / "small.toml") << "base = \"llama-tiny\"\nnum_layers = 3\n";
  std::ofstream(dir / "two.toml") << "[[nodes]]\nname = \"n\"\ndevice = \"t4\"\ncount = 2\n";
  std::ofstream(dir / "jobs" / "j.toml")
      << "model = \"../small.toml\"\ncluster = \"../two.toml\"\n"
         "[training]\nseq_len = 32\nglobal_batch_sequences = 4\nprecision = \"fp16\"\n";
  Result<JobSpec> j = LoadJobFile((dir / "jobs" / "j.toml").string());
  ASSERT_TRUE(j.ok()) << j.status().message();
  EXPECT_EQ(j->model.num_layers, 3);
  EXPECT_EQ(j->cluster.num_devices(), 2);
  std::filesystem::remove_all(dir);
}

TEST(JobErrors, GlobalBatchMustBeWholeSequences) {
  std::string e = Error(
      "model = \"llama-1m\"\ncluster = \"local-emulated\"\n[training]\nseq_len = 128\n"
      "global_batch_tokens = 1000\n");
  EXPECT_NE(e.find("job.toml:5:23: error: training.global_batch_tokens: global_batch_tokens (1000) is not a "
                   "multiple of seq_len (128): 1000 / 128 = 7.81 sequences; use 896 or 1024"),
            std::string::npos)
      << e;
  EXPECT_NE(Error("model = \"llama-1m\"\ncluster = \"local-emulated\"\n[training]\nseq_len = 128\n")
                .find("missing the global batch"),
            std::string::npos);
  EXPECT_NE(Error(std::string(kMinimal) + "global_batch_sequences = 3\n").find("not both"),
            std::string::npos);
}

// Found by the fuzzer: a section given as a value (lr_schedule = 6656) read the missing table
// (undefined behaviour); it is one error naming the key.
TEST(JobErrors, ASectionGivenAsAValueIsOneError) {
  const std::string e = Error(
      "model = \"llama-1m\"\ncluster = \"local-emulated\"\nlr_schedule = 6656\n[training]\n"
      "seq_len = 128\nglobal_batch_tokens = 4096\n");
  EXPECT_NE(e.find("job.toml:3:15: error: lr_schedule: expected a table, got an integer"), std::string::npos)
      << e;
}

TEST(Job, EmulatedStragglersSlowEveryComputeOrOnlyTheMatmuls) {
  Result<JobSpec> j =
      ParseJobToml(std::string(kMinimal) +
                       "[[emulation.stragglers]]\nrank = 1\nslowdown = 4\n"
                       "[[emulation.stragglers]]\nrank = 2\nslowdown = 2\nslows = \"matmul\"\n",
                   "job.toml");
  ASSERT_TRUE(j.ok()) << j.status().message();
  ASSERT_EQ(j->stragglers.size(), 2u);
  EXPECT_EQ(j->stragglers[0].slows, "compute");
  EXPECT_EQ(j->stragglers[1].slows, "matmul");
  const std::string e =
      Error(std::string(kMinimal) + "[[emulation.stragglers]]\nrank = 1\nslowdown = 4\nslows = \"gemm\"\n");
  EXPECT_NE(e.find("job.toml:11"), std::string::npos) << e;
  EXPECT_NE(e.find("slows"), std::string::npos) << e;
  EXPECT_NE(e.find("matmul"), std::string::npos) << e;
  // Two entries for one rank in the same steps would multiply (#48): an error naming the steps;
  // windows that do not overlap are two slowdowns in turn.
  const std::string twice =
      Error(std::string(kMinimal) + "[[emulation.stragglers]]\nrank = 1\nslowdown = 4\n" +
            "[[emulation.stragglers]]\nrank = 1\nslowdown = 2\nfrom_step = 5\nto_step = 9\n");
  EXPECT_NE(twice.find("rank 1 is already slowed in steps 5..9 by stragglers entry 1"), std::string::npos)
      << twice;
  Result<JobSpec> turns =
      ParseJobToml(std::string(kMinimal) +
                       "[[emulation.stragglers]]\nrank = 1\nslowdown = 4\nto_step = 4\n"
                       "[[emulation.stragglers]]\nrank = 1\nslowdown = 2\nfrom_step = 5\n",
                   "job.toml");
  ASSERT_TRUE(turns.ok()) << turns.status().message();
  EXPECT_EQ(turns->stragglers.size(), 2u);
}

TEST(JobErrors, CrossComponentChecksNameEveryFactor) {
  std::string seq = Error(
      "model = \"llama-1m\"\ncluster = \"local-emulated\"\n[training]\nseq_len = 512\n"
      "global_batch_sequences = 4\n");
  EXPECT_NE(seq.find("seq_len (512) exceeds the model's max_seq_len (256) for 'llama-1m'"), std::string::npos)
      << seq;
  std::string bf16 = Error(
      "model = \"llama-7b\"\ncluster = \"zorse-b\"\n[training]\nseq_len = 1024\n"
      "global_batch_sequences = 4\nprecision = \"bf16\"\n");
  EXPECT_NE(bf16.find("v100-16gb, t4 cannot compute in bf16; use precision = \"fp16\""), std::string::npos)
      << bf16;
  std::string warm = Error(std::string(kMinimal) + "steps = 10\n[lr_schedule]\nwarmup_steps = 20\n");
  EXPECT_NE(warm.find("warmup_steps (20) is longer than the run (training.steps = 10)"), std::string::npos)
      << warm;
}

TEST(JobErrors, UnknownStrategyModelAndClusterSuggest) {
  std::string strategy = Error(std::string(kMinimal) + "[plan]\nstrategy = \"zorce\"\n");
  EXPECT_NE(strategy.find("plan.strategy: \"zorce\" is not one of auto, zorse"), std::string::npos)
      << strategy;
  EXPECT_NE(strategy.find("did you mean 'zorse'?"), std::string::npos) << strategy;
  std::string model = Error(
      "model = \"llama-7c\"\ncluster = \"local-emulated\"\n[training]\nseq_len = 8\n"
      "global_batch_sequences = 1\n");
  EXPECT_NE(model.find("job.toml:1:9: error: model: unknown model 'llama-7c'; did you mean 'llama-7b'?"),
            std::string::npos)
      << model;
  std::string cluster = Error(
      "model = \"llama-1m\"\ncluster = \"local-emulatd\"\n[training]\nseq_len = 8\n"
      "global_batch_sequences = 1\n");
  EXPECT_NE(cluster.find("did you mean 'local-emulated'?"), std::string::npos) << cluster;
}

TEST(JobErrors, UnknownKeysInEverySection) {
  std::string e = Error(std::string(kMinimal) +
                        "stesp = 10\n[optimizer]\nlearning_rate = 0.1\n[checkpoint]\nevery = 5\n");
  EXPECT_NE(e.find("unknown key 'stesp' in [training]; did you mean 'steps'?"), std::string::npos) << e;
  EXPECT_NE(e.find("unknown key 'learning_rate' in [optimizer]."), std::string::npos) << e;
  EXPECT_NE(e.find("Valid keys here: beta1, beta2, eps, grad_clip_norm, lr, weight_decay"), std::string::npos)
      << e;
  EXPECT_NE(e.find("unknown key 'every' in [checkpoint]"), std::string::npos) << e;
}

TEST(JobErrors, ErrorsInANamedClusterFileKeepThatFilesName) {
  auto dir = std::filesystem::temp_directory_path() / ("motley_job_err_" + std::to_string(::getpid()));
  std::filesystem::create_directories(dir);
  std::ofstream(dir / "bad.toml") << "[[nodes]]\nname = \"n\"\ndevice = \"t4\"\ncount = -1\n";
  std::ofstream(dir / "j.toml") << "model = \"llama-1m\"\ncluster = \"bad.toml\"\n[training]\nseq_len = 8\n"
                                   "global_batch_sequences = 1\nprecision = \"fp32\"\n";
  Result<JobSpec> j = LoadJobFile((dir / "j.toml").string());
  ASSERT_FALSE(j.ok());
  EXPECT_NE(j.status().message().find("bad.toml:4:9: error: nodes[0].count: -1 is out of range"),
            std::string::npos)
      << j.status().message();
  std::filesystem::remove_all(dir);
}

}  // namespace
}  // namespace motley

namespace motley {
namespace {

TEST(Job, IslandsTakeTheOuterOptimizersSettings) {
  Result<JobSpec> j = ParseJobToml(std::string(kMinimal) + R"(
[islands]
count = 4
inner_steps = 25
outer_lr = 0.5
outer_momentum = 0.8
nesterov = false
compression = "int8"
)",
                                   "job.toml");
  ASSERT_TRUE(j.ok()) << j.status().message();
  EXPECT_EQ(j->islands.count, 4);
  EXPECT_EQ(j->islands.inner_steps, 25);
  EXPECT_EQ(j->islands.outer.lr, 0.5);
  EXPECT_EQ(j->islands.outer.momentum, 0.8);
  EXPECT_FALSE(j->islands.outer.nesterov);
  EXPECT_EQ(j->islands.outer.compression, "int8");
  // None given: no islands, DiLoCo's outer settings.
  Result<JobSpec> plain = ParseJobToml(kMinimal, "job.toml");
  ASSERT_TRUE(plain.ok());
  EXPECT_EQ(plain->islands.count, 1);
  EXPECT_EQ(plain->islands.outer.lr, 0.7);
  EXPECT_EQ(plain->islands.outer.momentum, 0.9);
  // Each island its own inner steps: island 0's (the run's clock) is inner_steps; the slower ones'
  // spread evenly over each round.
  Result<JobSpec> each = ParseJobToml(
      std::string(kMinimal) + "[islands]\ncount = 2\ninner_steps_per_island = [4, 3]\n", "job.toml");
  ASSERT_TRUE(each.ok()) << each.status().message();
  EXPECT_EQ(each->islands.inner_steps, 4);
  EXPECT_EQ(each->islands.InnerSteps(1), 3);
  std::vector<int64_t> own;
  for (int64_t clock = 0; clock <= 9; ++clock) own.push_back(each->islands.OwnSteps(1, clock));
  EXPECT_EQ(own, (std::vector<int64_t>{0, 0, 1, 2, 3, 3, 4, 5, 6, 6}));
  EXPECT_EQ(each->islands.OwnSteps(0, 9), 9);
}

TEST(JobErrors, IslandsMustShareTheBatchAndMeetAtValidationAndCheckpoints) {
  // 32 sequences (4,096 tokens of 128) over 3 islands.
  std::string e = Error(std::string(kMinimal) + "[islands]\ncount = 3\n");
  EXPECT_NE(e.find("islands.count"), std::string::npos) << e;
  EXPECT_NE(e.find("3 islands cannot share a global batch of 32 sequences"), std::string::npos) << e;
  e = Error(std::string(kMinimal) +
            "[data]\nvalidation_interval_steps = 30\n[checkpoint]\ninterval_steps = 40\n[islands]\ncount = "
            "2\ninner_steps = 20\n");
  EXPECT_NE(e.find("data.validation_interval_steps (30) is not a multiple of inner_steps (20)"),
            std::string::npos)
      << e;
  EXPECT_EQ(e.find("checkpoint.interval_steps"), std::string::npos) << e;  // 40 is a multiple of 20
  // Fragments: a divisor of inner_steps, each landing before the next is sent, at most the model's parts.
  e = Error(std::string(kMinimal) + "[islands]\ncount = 2\ninner_steps = 10\nfragments = 3\n");
  EXPECT_NE(e.find("islands.fragments"), std::string::npos) << e;
  EXPECT_NE(e.find("3 does not divide inner_steps (10)"), std::string::npos) << e;
  e = Error(std::string(kMinimal) +
            "[islands]\ncount = 2\ninner_steps = 10\nfragments = 5\noverlap_steps = 2\n");
  EXPECT_NE(e.find("islands.overlap_steps"), std::string::npos) << e;
  EXPECT_NE(e.find("less than inner_steps / fragments (2)"), std::string::npos) << e;
  Result<JobSpec> streamed = ParseJobToml(
      std::string(kMinimal) + "[islands]\ncount = 2\ninner_steps = 10\nfragments = 5\noverlap_steps = 1\n",
      "job.toml");
  ASSERT_TRUE(streamed.ok()) << streamed.status().message();
  EXPECT_EQ(streamed->islands.fragments, 5);
  e = Error(std::string(kMinimal) + "[islands]\ncount = 2\ncompression = \"fp8\"\nouter_lr = 0\n");
  EXPECT_NE(e.find("compression"), std::string::npos) << e;
  EXPECT_NE(e.find("outer_lr"), std::string::npos) << e;
  e = Error(std::string(kMinimal) + "[islands]\ncount = 2\ninner_steps_per_island = [10, 20]\n");
  EXPECT_NE(e.find("list the island that takes the most inner steps first"), std::string::npos) << e;
  e = Error(std::string(kMinimal) + "[islands]\ncount = 2\ninner_steps_per_island = [10, 5, 5]\n");
  EXPECT_NE(e.find("has 3 entries but count = 2"), std::string::npos) << e;
  e = Error(std::string(kMinimal) + "[islands]\ncount = 2\ninner_steps_per_island = [10, 0]\n");
  EXPECT_NE(e.find("integers between 1 and"), std::string::npos) << e;
  e = Error(std::string(kMinimal) + "[islands]\ncount = 2\ninner_step = 20\n");
  EXPECT_NE(e.find("inner_steps"), std::string::npos) << e;  // did you mean
}

}  // namespace
}  // namespace motley
