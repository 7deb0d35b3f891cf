// On GPU builds (scripts/build-gpu.sh): the correctness contract in fp64 on one GPU with offload and
// on two GPUs over NCCL; skipped where motley sees fewer GPUs.
#include <cstdlib>
#include <string>

#include <gtest/gtest.h>

#include "cli/cli_helpers.h"
#include "cli/training_fixtures.h"

using namespace motley_test;

namespace {

// GPU builds only (scripts/build-gpu.sh on a machine with a GPU): skipped where libtorch has no CUDA.
int CudaDevicesMotleySees() {
  const CliRun r = Motley("--version", true);
  const size_t at = r.output.find("CUDA, ");
  if (r.exit_code != 0 || at == std::string::npos) return 0;
  return std::atoi(r.output.c_str() + at + 6);
}
bool MotleySeesACudaDevice() { return CudaDevicesMotleySees() > 0; }

// A cluster of `count` GPUs of the kind this machine has (a rank refuses a GPU other than the plan's):
// the first GPU's name and memory from motley's version line, the other figures an H100's.
std::string ClusterOfThisGpu(int count) {
  const std::string line = Motley("--version", true).output;
  const size_t at = line.find("device(s): ");
  const size_t comma = line.rfind(", ");
  const size_t end = line.find("GiB", comma);
  if (at == std::string::npos || comma < at || end == std::string::npos) return "";
  const std::string name = line.substr(at + 11, comma - at - 11);
  const std::string gib = line.substr(comma + 2, end - comma - 2);
  return "name = \"gpus\"\n[device_types.gpu-under-test]\nbase = \"h100-sxm\"\ndisplay_name = \"" + name +
         "\"\nmemory = \"" + gib +
         "GiB\"\n[[nodes]]\nname = \"a\"\ndevice = \"gpu-under-test\"\ncount = " + std::to_string(count) +
         "\ninterconnect = \"nvlink\"\n";
}

}  // namespace

TEST(DistributedTrainGpu, OffloadOnTheGpuTrainsTheSameModelAsWithoutIt) {
  if (!MotleySeesACudaDevice()) GTEST_SKIP() << "no CUDA device visible to this build of motley";
  TempDir dir;
  dir.Write("model.toml", kModel);
  const std::string cluster = ClusterOfThisGpu(1);
  ASSERT_FALSE(cluster.empty()) << "motley --version names no GPU: " << Motley("--version", true).output;
  dir.Write("cluster.toml", cluster);
  // Four ministages on one GPU: with offload the shard, moments and boundaries go to pinned host
  // memory on side streams and come back; without it they stay. fp64, no clipping (interleaved updates).
  const std::string head = PlanHeader() +
                           "schedule = \"interleaved\"\nzero_stage = 2\nactivation_checkpointing = "
                           "true\ngradient_clipping = false\n";
  const std::string group =
      "[[groups]]\nministages = [[0, 1], [1, 2], [2, 3], [3, 4]]\ndevices = [0]\nmicrobatch_size = [4]\n"
      "num_microbatches = [3]\n";
  dir.Write("on.plan.toml", head + "offload_params = true\noffload_activations = true\n" + group);
  dir.Write("off.plan.toml", head + "offload_params = false\noffload_activations = false\n" + group);
  for (const char* name : {"ref", "on", "off"})
    dir.Write(std::string(name) + ".toml", Job(dir.Join(name), 0, true));
  CliRun ref = Motley("train ref.toml --single-process --device cuda", false, dir.path().string());
  ASSERT_EQ(ref.exit_code, 0) << ref.output;
  for (const char* name : {"on", "off"}) {
    SCOPED_TRACE(name);
    CliRun r = Motley(std::string("train ") + name + ".toml --device cuda --plan " + name + ".plan.toml",
                      false, dir.path().string());
    ASSERT_EQ(r.exit_code, 0) << r.output;
    EXPECT_CONTAINS(r.output, "CUDA");
    const std::string got = dir.Join(std::string(name) + "/step-000005/");
    EXPECT_LT(MaxRelativeDifference(got + "model.safetensors", dir.Join("ref/step-000005/model.safetensors")),
              kFp64Tolerance);
    EXPECT_LT(MaxRelativeDifference(got + "optimizer.safetensors",
                                    dir.Join("ref/step-000005/optimizer.safetensors")),
              kFp64Tolerance);
  }
  // Offload moves bytes, not values: on and off run the same kernels on the same values (a GPU's
  // atomics may still reorder a few sums, at fp64's ~1e-16).
  const double between = MaxRelativeDifference(dir.Join("on/step-000005/model.safetensors"),
                                               dir.Join("off/step-000005/model.safetensors"));
  EXPECT_GE(between, 0);
  EXPECT_LT(between, kFp64Tolerance);
}

TEST(DistributedTrainGpu, PipelinesAndZeroGroupsOverNcclTrainTheSameModel) {
  // One rank per GPU over NCCL: activations and gradients both ways between pipeline stages (each
  // direction of a pair on its own NCCL group, matched in order), ZeRO-2 collectives with
  // offload, a 1F1B schedule whose steady state sends both ways at once.
  if (CudaDevicesMotleySees() < 2) GTEST_SKIP() << "needs two CUDA devices visible to this build of motley";
  TempDir dir;
  dir.Write("model.toml", kModel);
  dir.Write("cluster.toml", ClusterOfThisGpu(2));
  const std::string head = PlanHeader() + "gradient_clipping = false\n";  // the jobs clip nothing
  dir.Write("pipeline.plan.toml", head + R"(schedule = "1f1b"
zero_stage = 0
[[groups]]
ministages = [[0, 2]]
devices = [0]
microbatch_size = [2]
num_microbatches = [6]
[[groups]]
ministages = [[2, 4]]
devices = [1]
microbatch_size = [2]
num_microbatches = [6]
)");
  dir.Write("zero.plan.toml", head + R"(schedule = "interleaved"
zero_stage = 2
offload_params = true
offload_activations = true
[[groups]]
ministages = [[0, 1], [1, 2], [2, 3], [3, 4]]
devices = [0, 1]
microbatch_size = [4, 2]
num_microbatches = [2, 2]
)");
  for (const char* name : {"ref", "pipeline", "zero"})
    dir.Write(std::string(name) + ".toml", Job(dir.Join(name), 0, true));
  CliRun ref = Motley("train ref.toml --single-process --device cuda", false, dir.path().string());
  ASSERT_EQ(ref.exit_code, 0) << ref.output;
  for (const char* name : {"pipeline", "zero"}) {
    SCOPED_TRACE(name);
    CliRun r = Motley(std::string("launch --nproc 2 -- ") + MOTLEY_BIN + " train " + name +
                          ".toml --device cuda --plan " + name + ".plan.toml",
                      false, dir.path().string());
    ASSERT_EQ(r.exit_code, 0) << r.output;
    const std::string got = dir.Join(std::string(name) + "/step-000005/");
    EXPECT_LT(MaxRelativeDifference(got + "model.safetensors", dir.Join("ref/step-000005/model.safetensors")),
              kFp64Tolerance);
    EXPECT_LT(MaxRelativeDifference(got + "optimizer.safetensors",
                                    dir.Join("ref/step-000005/optimizer.safetensors")),
              kFp64Tolerance);
  }
}
