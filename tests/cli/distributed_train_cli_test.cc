// The correctness contract across processes (docs/design.md): every lossless plan — data parallelism
// at every ZeRO stage with uneven batches, pipelines (GPipe, 1F1B, Zorse's interleaved ministages)
// with asymmetric groups, uneven microbatch counts, custom routing, 1..L ministages, tensor-parallel
// teams, offload, state shares apart from batch shares (Cephalo), with and without clipping — run
// by `motley launch` as 2-6 ranks, ends 5 steps with the parameters and AdamW moments of a
// single-process run: in fp64 within 1e-10, in fp32 within a noise floor measured in the same run.
// Tensor-parallel teams' own cases: tensor_parallel_train_cli_test.cc.
#include <algorithm>
#include <array>
#include <cmath>
#include <cstdint>
#include <cstdlib>
#include <cstring>
#include <fstream>
#include <iostream>
#include <limits>
#include <map>
#include <optional>
#include <set>
#include <sstream>
#include <vector>

#include <gtest/gtest.h>
#include <nlohmann/json.hpp>

#include "cli/cli_helpers.h"
#include "cli/distributed_equivalence.h"
#include "cli/plan_cases.h"
#include "cli/training_fixtures.h"
#include "core/file_io.h"
#include "core/units.h"

namespace {

using namespace motley_test;

class DistributedEquivalence : public DistributedEquivalenceBase {};

TEST_F(DistributedEquivalence, TheComparisonTellsDifferentTrainingApart) {
  // Clipping changes the updates: the measure must see it.
  const double d = MaxRelativeDifference(dir_->Join(Reference(1, true) + "/step-000005/model.safetensors"),
                                         dir_->Join(Reference(0, true) + "/step-000005/model.safetensors"));
  EXPECT_GT(d, 1e-3);
  EXPECT_TRUE(AllF64(dir_->Join(Reference(0, true) + "/step-000005/model.safetensors")));
}

// The controls: the fp64 comparison sees a microbatch dropped and a one-in-a-million change to one
// rank's gradients (its loss, and so its gradients, scaled by 1 + 1e-6) — far below fp32's noise
// floor (~1e-5), far above fp64's (~1e-15).
TEST_F(DistributedEquivalence, TheFp64ComparisonSeesAOneInAMillionChange) {
  const PlanCase& c = Case("dp2-zero2-uneven");
  const std::string ref = Reference(c.clip, c.checkpointing);
  auto exact = Train(c, "control-none", ref);
  auto scaled = Train(c, "control-scaled", ref, "--perturb-rank 1 --perturb-loss 1.000001");
  auto dropped = Train(c, "control-dropped", ref, "--perturb-rank 0 --perturb-loss 0 --perturb-microbatch 0");
  ASSERT_TRUE(exact && scaled && dropped);
  EXPECT_LT(exact->params, kFp64Tolerance);
  EXPECT_GT(scaled->params, 100 * kFp64Tolerance) << "a 1e-6 change to one rank's gradients went unseen";
  EXPECT_LT(scaled->params, 1e-4) << "the control changed more than it should";
  EXPECT_GT(dropped->params, 1e-3) << "a dropped microbatch went unseen";
}

TEST_F(DistributedEquivalence, EveryPlanMatchesOneProcessAfterFiveSteps) {
  for (const PlanCase& c : kPlans) {
    SCOPED_TRACE(c.name);
    auto d = Train(c, c.name, Reference(c.clip, c.checkpointing));
    if (!d) continue;
    EXPECT_LT(d->params, kFp64Tolerance);
    EXPECT_LT(d->moments, kFp64Tolerance);
    // And the per-rank report: every rank computed and sent something.
    EXPECT_CONTAINS(d->output, "per rank, mean of a step");
    EXPECT_CONTAINS(d->output, "rank " + std::to_string(c.ranks - 1));
  }
}

// Resume under any plan (#25): a checkpoint written at step 2 by one plan resumes under every
// other — another world size, family (data parallelism, Poplar's uneven batches, Zorse's routed
// interleaved pipeline, a tensor-parallel team beside a tp1 group, Cephalo's uneven state shares),
// ZeRO stage and offload — and
// after step 5 the parameters and moments are those of one process (fp64). Parameters, AdamW
// moments, the step, the LR schedule and the data position carry over.
TEST_F(DistributedEquivalence, ACheckpointOfAnyPlanResumesUnderAnyOther) {
  const char* names[] = {"dp3-zero0-last-batch", "poplar-dp5-zero2-accumulation-last-batch",
                         "interleaved-zero3-routing-6-ranks", "pipeline-tp2-then-tp1-offload",
                         "cephalo-dp3-zero3-state-shares"};
  const std::string reference = Reference(1, true);
  // Each plan trains 5 steps, checkpointing every 2 (its step 5 is the contract's own check).
  for (const char* a : names) {
    const PlanCase& c = Case(a);
    ASSERT_EQ(c.clip, 1);
    ASSERT_TRUE(c.checkpointing);
    auto d = Train(c, std::string("from-") + a, reference, "", "interval_steps = 2\nkeep = 5\n");
    ASSERT_TRUE(d);
    EXPECT_LT(d->params, kFp64Tolerance);
  }
  for (const char* a : names)
    for (const char* b : names) {
      if (std::string(a) == b) continue;
      SCOPED_TRACE(std::string(a) + " -> " + b);
      const PlanCase& c = Case(b);
      const std::string name = std::string("resume-") + a + "-as-" + b;
      const std::string plan = dir_->Write(name + ".plan.toml", PlanHeader() + c.body);
      dir_->Write(name + ".toml", Job(dir_->Join(name), c.clip, c.checkpointing));
      CliRun r = Motley("launch --nproc " + std::to_string(c.ranks) + " -- " + MOTLEY_BIN + " train " + name +
                            ".toml --plan " + plan + " --resume " +
                            dir_->Join(std::string("from-") + a + "/step-000002"),
                        false, dir_->path().string());
      ASSERT_EQ(r.exit_code, 0) << r.output;
      EXPECT_CONTAINS(r.output, "steps 3..5 of 5");
      const std::string got = dir_->Join(name + "/step-000005/"),
                        ref = dir_->Join(reference + "/step-000005/");
      const double params = MaxRelativeDifference(got + "model.safetensors", ref + "model.safetensors");
      const double moments =
          MaxRelativeDifference(got + "optimizer.safetensors", ref + "optimizer.safetensors");
      std::cout << name << ": relative difference of the parameters " << params << ", of the moments "
                << moments << "\n";
      EXPECT_GE(params, 0);
      EXPECT_LT(params, kFp64Tolerance);
      EXPECT_GE(moments, 0);
      EXPECT_LT(moments, kFp64Tolerance);
    }
}

// The asynchronous copy path a GPU takes (tickets, waits, gathers deferred until their shard
// arrives, host buffers reused) run on CPU: copies on worker threads, each a little late
// (copy_engine.h). Every plan with offload must still match one process.
TEST_F(DistributedEquivalence, OffloadWithAsynchronousCopiesMatchesOneProcess) {
  int offload_plans = 0;
  for (const PlanCase& c : kPlans) {
    if (std::string(c.body).find("offload_") == std::string::npos) continue;
    SCOPED_TRACE(c.name);
    ++offload_plans;
    auto d =
        Train(c, std::string("async-") + c.name, Reference(c.clip, c.checkpointing), "--cpu-copy-threads");
    if (!d) continue;
    EXPECT_LT(d->params, kFp64Tolerance);
    EXPECT_LT(d->moments, kFp64Tolerance);
  }
  EXPECT_GE(offload_plans, 4);
}

// fp32: no fixed tolerance sits above reassociation noise on every CPU (Adam amplifies it to ~1e-5
// after 5 steps, and the BLAS kernels decide its size), so the floor is measured here — one process
// with microbatches of 4 against the whole batch — and a few plans must stay within 10x of it.
TEST_F(DistributedEquivalence, Fp32PlansStayWithinTheMeasuredNoiseFloor) {
  dir_->Write("ref32.toml", Job(dir_->Join("ref32"), 0, true, "fp32"));
  dir_->Write("ref32-mb4.toml", Job(dir_->Join("ref32-mb4"), 0, true, "fp32"));
  ASSERT_EQ(Motley("train ref32.toml --single-process", false, dir_->path().string()).exit_code, 0);
  ASSERT_EQ(
      Motley("train ref32-mb4.toml --single-process --microbatch 4", false, dir_->path().string()).exit_code,
      0);
  const std::string ref = dir_->Join("ref32/step-000005/"), mb4 = dir_->Join("ref32-mb4/step-000005/");
  const double floor_params = MaxRelativeDifference(mb4 + "model.safetensors", ref + "model.safetensors");
  const double floor_moments =
      MaxRelativeDifference(mb4 + "optimizer.safetensors", ref + "optimizer.safetensors");
  ASSERT_GT(floor_params, 0) << "two microbatchings agree exactly: no floor to measure";
  ASSERT_GT(floor_moments, 0);
  ASSERT_LT(floor_params, 1e-3) << "the single process does not reproduce itself";
  std::cout << "fp32 noise floor after 5 steps: parameters " << floor_params << ", moments " << floor_moments
            << "\n";
  for (const char* name : {"dp3-zero3-uneven", "interleaved-offload-uneven"}) {
    SCOPED_TRACE(name);
    auto d = Train(Case(name), std::string("fp32-") + name, "ref32", "", "", "fp32");
    if (!d) continue;
    EXPECT_LT(d->params, 10 * floor_params);
    EXPECT_LT(d->moments, 10 * floor_moments);
  }
  // Precision changes on resume too (#25): two fp64 steps of one plan, then three fp32 steps of
  // another, stay within the same floor of fp32 training, and the run checkpoints in fp32.
  auto fp64 = Train(Case("dp3-zero3-uneven"), "fp64-then-fp32", Reference(0, true), "",
                    "interval_steps = 2\nkeep = 5\n");
  ASSERT_TRUE(fp64);
  const PlanCase& next = Case("interleaved-offload-uneven");
  const std::string plan =
      dir_->Write("fp32-resumed.plan.toml", PlanHeader("fp32") + "gradient_clipping = false\n" + next.body);
  dir_->Write("fp32-resumed.toml", Job(dir_->Join("fp32-resumed"), 0, true, "fp32"));
  CliRun r = Motley("launch --nproc " + std::to_string(next.ranks) + " -- " + MOTLEY_BIN +
                        " train fp32-resumed.toml --plan " + plan + " --resume " +
                        dir_->Join("fp64-then-fp32/step-000002"),
                    false, dir_->path().string());
  ASSERT_EQ(r.exit_code, 0) << r.output;
  const std::string resumed = dir_->Join("fp32-resumed/step-000005/");
  EXPECT_FALSE(AllF64(resumed + "model.safetensors"));
  EXPECT_LT(MaxRelativeDifference(resumed + "model.safetensors", ref + "model.safetensors"),
            10 * floor_params);
  EXPECT_LT(MaxRelativeDifference(resumed + "optimizer.safetensors", ref + "optimizer.safetensors"),
            10 * floor_moments);
}

// Starting from a Hugging Face folder (#47): a fine-tune under a ZeRO-3, a pipeline and a
// tensor-parallel plan — each rank reading only the tensors its part holds — ends 5 steps with
// the parameters and moments of one process started from the same folder (fp64). The folder is a
// trained model exported as Hugging Face tools write it (config.json and model.safetensors only).
TEST_F(DistributedEquivalence, AFineTuneFromAHuggingFaceFolderMatchesOneProcessUnderEveryFamily) {
  CliRun r = Motley("checkpoint export " + Reference(0, true) + "/step-000005 hf-start", false,
                    dir_->path().string());
  ASSERT_EQ(r.exit_code, 0) << r.output;
  fs::remove(dir_->path() / "hf-start" / "trainer_state.json");
  fs::remove(dir_->path() / "hf-start" / "optimizer.safetensors");
  const std::string hf = dir_->Join("hf-start");
  for (double clip : {0.0, 1.0}) {
    const std::string name = std::string("ft-ref-clip") + (clip > 0 ? "1" : "0");
    dir_->Write(name + ".toml", Job(dir_->Join(name), clip, true));
    r = Motley("train " + name + ".toml --single-process --init-from " + hf + " --metrics " + name + ".jsonl",
               false, dir_->path().string());
    ASSERT_EQ(r.exit_code, 0) << r.output;
  }
  // The fine-tune started from the folder, not from the seed: it differs from the run the folder
  // came from at the same step count.
  EXPECT_GT(MaxRelativeDifference(dir_->Join("ft-ref-clip0/step-000005/model.safetensors"),
                                  dir_->Join(Reference(0, true) + "/step-000005/model.safetensors")),
            1e-3);
  for (const char* plan : {"dp3-zero3-uneven", "pipeline2-gpipe", "tp2-zero0"}) {
    const PlanCase& c = Case(plan);
    auto d = Train(c, std::string("ft-") + plan, std::string("ft-ref-clip") + (c.clip > 0 ? "1" : "0"),
                   "--init-from " + hf);
    ASSERT_TRUE(d) << plan;
    EXPECT_LT(d->params, kFp64Tolerance) << plan;
    EXPECT_LT(d->moments, kFp64Tolerance) << plan;
    // Each rank says what it read and the host memory loading took (the memory ledger's peak from
    // before the model was made): a pipeline's stages each read their own layers, a tensor-parallel
    // rank its slices of them, a ZeRO-3 rank its shards (straight into its device buffers), and a
    // rank's loading holds its part and nothing more (the file's values are read into the
    // parameters).
    std::map<int, std::array<double, 3>> loaded;  // rank: part, whole, peak
    std::istringstream lines(d->output);
    for (std::string line; std::getline(lines, line);) {
      const size_t at = line.find(": loaded its part of ");
      if (at == std::string::npos) continue;
      const int rank = std::stoi(line.substr(line.rfind("rank ", at) + 5));
      const size_t semi = line.find("; host", at);
      const size_t comma = line.rfind(", ", semi);
      const size_t of = line.find(" of ", comma);
      auto bytes = [](const std::string& text) { return motley::ParseBytes(text).value(); };
      loaded[rank] = {bytes(line.substr(comma + 2, of - comma - 2)),
                      bytes(line.substr(of + 4, semi - of - 4)), bytes(line.substr(line.rfind(" at ") + 4))};
    }
    ASSERT_EQ(static_cast<int>(loaded.size()), c.ranks) << plan << ": one line a rank\n" << d->output;
    for (const auto& [rank, b] : loaded) {
      const auto [part, whole, peak] = b;
      SCOPED_TRACE(std::string(plan) + " rank " + std::to_string(rank) + ": part " + std::to_string(part) +
                   " of " + std::to_string(whole) + ", peak " + std::to_string(peak));
      EXPECT_LT(part, 0.75 * whole)
          << "a stage reads its own layers, a tensor-parallel rank its slices, a ZeRO-3 "
             "rank its shards";
      if (std::string(plan) == "dp3-zero3-uneven") {
        EXPECT_LT(peak, 0.05 * part) << "the shards are read into the device's buffers, not the host's";
      } else {
        EXPECT_GE(peak, 0.99 * part);
        EXPECT_LT(peak, 1.05 * part) << "loading holds the part, not the model";
      }
    }
  }
}

// fp16's dynamic loss scaling across processes (#47), checked in fp64 where it is exact (scaling by
// a power of two): rank 2 of a 4-rank pipeline overflows in step 3, and every rank skips that step
// — the run ends equal to one process that skipped it, the scale halved. A checkpoint after step 4
// resumes under another plan with the scale and its history.
TEST_F(DistributedEquivalence, LossScalingSkipsAnOverflowOnEveryRankAndResumesUnderAnyPlan) {
  auto job = [&](const std::string& name, const std::string& checkpoint) {
    std::string j = Job(dir_->Join(name), 1.0, true);
    j.replace(j.find("seed = 7\n"), 9, "seed = 7\nloss_scaling = true\n");
    return dir_->Write(name + ".toml", j + checkpoint);
  };
  job("ls-ref", "");
  CliRun r = Motley("train ls-ref.toml --single-process --overflow-step 3 --metrics ls-ref.jsonl", false,
                    dir_->path().string());
  ASSERT_EQ(r.exit_code, 0) << r.output;
  const PlanCase& pipeline = Case("pipeline2x2-1f1b-round-robin");
  ASSERT_EQ(pipeline.ranks, 4);
  const std::string plan =
      dir_->Write("ls-pipeline.plan.toml", PlanHeader() + "loss_scaling = true\n" + pipeline.body);
  job("ls-pipeline", "interval_steps = 2\nkeep = 5\n");
  r = Motley("launch --nproc 4 -- " + std::string(MOTLEY_BIN) + " train ls-pipeline.toml --plan " + plan +
                 " --overflow-rank 2 --overflow-step 3 --metrics ls-pipeline.jsonl",
             false, dir_->path().string());
  ASSERT_EQ(r.exit_code, 0) << r.output;
  // Step 3 skipped and the scale halved, as one process does.
  for (const char* run : {"ls-ref", "ls-pipeline"}) {
    std::ifstream in(dir_->Join(std::string(run) + ".jsonl"));
    std::map<int, nlohmann::json> steps;
    for (std::string line; std::getline(in, line);) {
      nlohmann::json m = nlohmann::json::parse(line);
      if (m.contains("loss")) steps[m["step"].get<int>()] = m;
    }
    ASSERT_EQ(steps.size(), 5u) << run;
    for (int step = 1; step <= 5; ++step) {
      EXPECT_EQ(steps[step]["skipped"].get<bool>(), step == 3) << run << " step " << step;
      EXPECT_EQ(steps[step]["loss_scale"].get<double>(), step < 3 ? 65536.0 : 32768.0)
          << run << " step " << step;
    }
  }
  const std::string ref = dir_->Join("ls-ref/step-000005/"), got = dir_->Join("ls-pipeline/step-000005/");
  EXPECT_LT(MaxRelativeDifference(got + "model.safetensors", ref + "model.safetensors"), kFp64Tolerance);
  EXPECT_LT(MaxRelativeDifference(got + "optimizer.safetensors", ref + "optimizer.safetensors"),
            kFp64Tolerance);
  // The skip mattered: the run that applied step 3 ends elsewhere.
  EXPECT_GT(MaxRelativeDifference(got + "model.safetensors",
                                  dir_->Join(Reference(1, true) + "/step-000005/model.safetensors")),
            1e-6);
  // The checkpoint after step 4 holds the scale and its history; resumed under a 3-rank ZeRO-0 plan.
  const nlohmann::json state =
      nlohmann::json::parse(std::ifstream(dir_->Join("ls-pipeline/step-000004/trainer_state.json")));
  EXPECT_EQ(state["loss_scale"].get<double>(), 32768.0) << state.dump();
  EXPECT_EQ(state["loss_scale_good_steps"].get<int64_t>(), 1) << state.dump();
  const PlanCase& dp = Case("dp3-zero0-last-batch");
  const std::string dp_plan =
      dir_->Write("ls-dp.plan.toml", PlanHeader() + "loss_scaling = true\n" + dp.body);
  job("ls-resumed", "");
  r = Motley("launch --nproc 3 -- " + std::string(MOTLEY_BIN) + " train ls-resumed.toml --plan " + dp_plan +
                 " --resume " + dir_->Join("ls-pipeline/step-000004") + " --metrics ls-resumed.jsonl",
             false, dir_->path().string());
  ASSERT_EQ(r.exit_code, 0) << r.output;
  const std::string resumed = dir_->Join("ls-resumed/step-000005/");
  EXPECT_LT(MaxRelativeDifference(resumed + "model.safetensors", ref + "model.safetensors"), kFp64Tolerance);
  EXPECT_LT(MaxRelativeDifference(resumed + "optimizer.safetensors", ref + "optimizer.safetensors"),
            kFp64Tolerance);
  std::ifstream in(dir_->Join("ls-resumed.jsonl"));
  for (std::string line; std::getline(in, line);) {
    nlohmann::json m = nlohmann::json::parse(line);
    if (m.contains("loss")) {
      EXPECT_EQ(m["loss_scale"].get<double>(), 32768.0) << line;
    }
  }
  // A plan without loss scaling for a job with it is refused, naming the key.
  dir_->Write("ls-noscale.plan.toml", PlanHeader() + pipeline.body);
  r = Motley(
      "launch --nproc 4 -- " + std::string(MOTLEY_BIN) + " train ls-ref.toml --plan ls-noscale.plan.toml",
      false, dir_->path().string());
  EXPECT_NE(r.exit_code, 0);
  EXPECT_CONTAINS(r.output, "ls-noscale.plan.toml: the plan has no loss scaling but the job");
  EXPECT_CONTAINS(r.output, "set loss_scaling = true in the plan");
}

TEST_F(DistributedEquivalence, AMismatchedPlanIsOneClearError) {
  // The plan's batch differs from the job's.
  const std::string plan = dir_->Write("bad.plan.toml", PlanHeader() +
                                                            "[[groups]]\nministages = [[0, 4]]\n"
                                                            "devices = [0, 1]\nmicrobatch_size = [4, 4]\n"
                                                            "num_microbatches = [1, 1]\n");
  CliRun r = Motley("launch --nproc 2 -- " + std::string(MOTLEY_BIN) + " train " + Reference(1, true) +
                        ".toml --plan " + plan,
                    false, dir_->path().string());
  EXPECT_NE(r.exit_code, 0);
  EXPECT_CONTAINS(r.output, "bad.plan.toml: the plan's microbatches add up to 8 sequences");
  // A plan in another precision than the job's.
  dir_->Write("fp32.plan.toml", PlanHeader("fp32") + kPlans[0].body);
  r = Motley("launch --nproc 2 -- " + std::string(MOTLEY_BIN) + " train " + Reference(1, true) +
                 ".toml --plan fp32.plan.toml",
             false, dir_->path().string());
  EXPECT_NE(r.exit_code, 0);
  EXPECT_CONTAINS(r.output, "fp32.plan.toml: precision = \"fp32\" but the job");
  // A plan without gradient clipping for a job with it.
  dir_->Write("noclip.plan.toml", PlanHeader() + "gradient_clipping = false\n" + kPlans[0].body);
  r = Motley("launch --nproc 2 -- " + std::string(MOTLEY_BIN) + " train " + Reference(1, true) +
                 ".toml --plan noclip.plan.toml",
             false, dir_->path().string());
  EXPECT_NE(r.exit_code, 0);
  EXPECT_CONTAINS(r.output, "noclip.plan.toml: gradient_clipping = false but the job");
  EXPECT_CONTAINS(r.output, "set gradient_clipping = true in the plan");
  // Started with fewer processes than the plan has devices.
  dir_->Write("ok.plan.toml", PlanHeader() + kPlans[0].body);
  r = Motley("launch --nproc 3 -- " + std::string(MOTLEY_BIN) + " train " + Reference(1, true) +
                 ".toml --plan ok.plan.toml",
             false, dir_->path().string());
  EXPECT_NE(r.exit_code, 0);
  EXPECT_CONTAINS(r.output, "the plan has 2 devices but 3 processes were started");
}

// A cluster of two devices on one node; `emulation` is the [[nodes.emulation]] tables.
std::string TwoDeviceCluster(const std::string& emulation) {
  return std::string("name = \"cpu2\"\n") + kCpuType + R"([[nodes]]
name = "a"
device = "cpu"
count = 2
interconnect = "pcie"
intra_bandwidth = "10GB/s"
)" + emulation;
}

constexpr char kEvenDp2[] = R"(model = "model.toml"
cluster = "cluster.toml"
seq_len = 16
precision = "fp32"
zero_stage = 2
[[groups]]
ministages = [[0, 4]]
devices = [0, 1]
microbatch_size = [3, 3]
num_microbatches = [2, 2]
)";

constexpr char kPipeline2[] = R"(model = "model.toml"
cluster = "cluster.toml"
seq_len = 16
precision = "fp32"
schedule = "interleaved"
zero_stage = 2
[[groups]]
ministages = [[0, 1], [2, 3]]
devices = [0]
microbatch_size = [3]
num_microbatches = [4]
[[groups]]
ministages = [[1, 2], [3, 4]]
devices = [1]
microbatch_size = [3]
num_microbatches = [4]
)";

TEST(DistributedTrain, AnEmulatedDeviceRunsOutOfMemoryWithTheGpuError) {
  TempDir dir;
  dir.Write("model.toml", kModel);
  dir.Write("plan.toml", kEvenDp2);
  dir.Write("job.toml", Job(dir.Join("run"), 1, true, "fp32"));
  // Device 1 has 256 KiB: the step fails with the out-of-memory error, naming the rank and device.
  dir.Write("cluster.toml",
            TwoDeviceCluster("[[nodes.emulation]]\nspeed_factor = 1.0\n"
                             "[[nodes.emulation]]\nspeed_factor = 1.0\nmemory = \"256KiB\"\n"));
  CliRun r = Motley("launch --nproc 2 -- " + std::string(MOTLEY_BIN) + " train job.toml --plan plan.toml",
                    false, dir.path().string());
  EXPECT_NE(r.exit_code, 0);
  EXPECT_CONTAINS(r.output, "out of memory on rank 1 (device 1 of cpu2, emulated): tried to allocate");
  EXPECT_CONTAINS(r.output, "of the emulated capacity of 256 KiB in use");
}

TEST(DistributedTrain, Bf16ComputeRunsAcrossAPipeline) {
  // bf16 activations cross the pipeline; fp32 master weights, gradients and collectives.
  TempDir dir;
  dir.Write("model.toml", kModel);
  std::string plan = kPipeline2;
  plan.replace(plan.find("\"fp32\""), 6, "\"bf16\"");
  dir.Write("plan.toml", plan);
  dir.Write("cluster.toml", TwoDeviceCluster(""));
  std::string job = Job(dir.Join("run"), 1, true, "fp32");
  job.replace(job.find("\"fp32\""), 6, "\"bf16\"");
  dir.Write("job.toml", job);
  CliRun r = Motley("launch --nproc 2 -- " + std::string(MOTLEY_BIN) + " train job.toml --plan plan.toml",
                    false, dir.path().string());
  ASSERT_EQ(r.exit_code, 0) << r.output;
  EXPECT_CONTAINS(r.output, "in bf16");
  EXPECT_CONTAINS(r.output, "[rank 0] done: 5 steps");
}

// One program: a hand-written pipeline plan without a routing gets the same one in `schedule`,
// `simulate` (with or without a profile) and `train --plan`, so all three lower the same schedule.
TEST(DistributedTrain, TrainAndSimulateLowerTheSameScheduleForAPlanWithoutRouting) {
  TempDir dir;
  dir.Write("model.toml", kModel);
  // Device 1 is 1.5x slower: Zorse's routing interleaves group 0's microbatches (not the block order).
  dir.Write("cluster.toml", std::string("name = \"cpu3\"\n") + kCpuType + R"([[nodes]]
name = "a"
device = "cpu"
count = 3
interconnect = "pcie"
intra_bandwidth = "10GB/s"
[[nodes.emulation]]
speed_factor = 1.0
[[nodes.emulation]]
speed_factor = 1.5
[[nodes.emulation]]
speed_factor = 1.0
)");
  dir.Write("plan.toml", PlanHeader("fp32") + R"(schedule = "gpipe"
zero_stage = 2
[[groups]]
ministages = [[0, 2]]
devices = [0, 1]
microbatch_size = [2, 2]
num_microbatches = [3, 3]
[[groups]]
ministages = [[2, 4]]
devices = [2]
microbatch_size = [2]
num_microbatches = [6]
)");
  dir.Write("profile.json",
            R"({"format": "motley-profile-1", "entries": [{"device_type": "cpu", "model": "eq4",
      "hidden_size": 32, "seq_len": 16, "precision": "fp32",
      "points": [{"microbatch": 1, "forward_ms": 1.0, "backward_ms": 3.0},
                 {"microbatch": 8, "forward_ms": 6.0, "backward_ms": 18.0}]}]})");
  dir.Write("job.toml", Job(dir.Join("run"), 1, true, "fp32"));
  auto simulated = [&](const std::string& flags) {
    CliRun r = Motley("simulate --plan plan.toml --json " + flags, true, dir.path().string());
    EXPECT_EQ(r.exit_code, 0) << r.output;
    return r.exit_code == 0 ? nlohmann::json::parse(r.output)["schedule_hash"].get<std::string>() : "";
  };
  const std::string hash = simulated("");
  ASSERT_EQ(hash.size(), 16u);
  EXPECT_EQ(simulated("--profile profile.json"), hash) << "the profile changed the routing";
  CliRun schedule = Motley("schedule --plan plan.toml", true, dir.path().string());
  EXPECT_CONTAINS(schedule.output, "schedule " + hash);
  CliRun train = Motley("launch --nproc 3 -- " + std::string(MOTLEY_BIN) + " train job.toml --plan plan.toml",
                        false, dir.path().string());
  ASSERT_EQ(train.exit_code, 0) << train.output;
  EXPECT_CONTAINS(train.output, "schedule: " + hash);
  // The routing given is not the block order a plan without one would have had: the hash differs.
  std::string routed = motley::ReadFileToString(dir.Join("plan.toml")).value();
  routed.replace(routed.find("num_microbatches = [3, 3]"), 25,
                 "num_microbatches = [3, 3]\nrouting = [0, 0, 0, 1, 1, 1]");
  dir.Write("block.plan.toml", routed);
  CliRun block = Motley("simulate --plan block.plan.toml --json", true, dir.path().string());
  ASSERT_EQ(block.exit_code, 0) << block.output;
  EXPECT_NE(nlohmann::json::parse(block.output)["schedule_hash"].get<std::string>(), hash);
}

TEST(DistributedTrain, TheTraceOfTheRealRunUsesTheSimulatorsFormat) {
  TempDir dir;
  dir.Write("model.toml", kModel);
  dir.Write("plan.toml", kPipeline2);
  dir.Write("cluster.toml", TwoDeviceCluster(""));
  dir.Write("job.toml", Job(dir.Join("run"), 1, true, "fp32"));
  CliRun r = Motley("launch --nproc 2 -- " + std::string(MOTLEY_BIN) +
                        " train job.toml --plan plan.toml --trace trace.json --trace-step 3",
                    false, dir.path().string());
  ASSERT_EQ(r.exit_code, 0) << r.output;
  EXPECT_CONTAINS(r.output, "trace: trace.json");
  std::ifstream in(dir.Join("trace.json"));
  const nlohmann::json trace = nlohmann::json::parse(in);
  std::map<int, std::set<std::string>> kinds;  // per rank
  for (const auto& e : trace["traceEvents"]) {
    if (e["ph"] != "X") continue;
    EXPECT_GE(e["dur"].get<double>(), 0);
    kinds[e["pid"].get<int>()].insert(e["cat"].get<std::string>());
  }
  ASSERT_EQ(kinds.size(), 2u);
  for (auto& [rank, k] : kinds) {
    EXPECT_TRUE(k.count("forward") && k.count("backward") && k.count("optimizer_step")) << "rank " << rank;
    EXPECT_TRUE(k.count("send") && k.count("recv")) << "rank " << rank;
  }
}

TEST(DistributedTrain, AKilledRankMidStepStopsEveryRankWithItsName) {
  TempDir dir;
  dir.Write("model.toml", kModel);
  dir.Write("cluster.toml", kCluster);
  const std::string plan =
      dir.Write("plan.toml", std::string("model = \"model.toml\"\ncluster = \"cluster.toml\"\n"
                                         "seq_len = 16\nprecision = \"fp32\"\n") +
                                 PlanNamed("pipeline3-1f1b-asymmetric").body);
  std::string job = Job(dir.Join("run"), 1, true, "fp32");
  job.replace(job.find("steps = 5"), 9, "steps = 500");
  dir.Write("job.toml", job);
  CliRun r = Motley("launch --nproc 3 -- " + std::string(MOTLEY_BIN) +
                        " train job.toml --plan plan.toml --die-rank 1 --die-at-step 3",
                    false, dir.path().string());
  EXPECT_EQ(r.exit_code, 1) << r.output;
  EXPECT_CONTAINS(r.output, "motley launch: failed: rank 1 was killed by signal 9");
  for (int k : {0, 2})
    EXPECT_TRUE(RankSaid(r.output, k, "1 stopped responding")) << "rank " << k << " did not name rank 1:\n"
                                                               << r.output;
}

TEST(DistributedTrain, TrainOnAClusterMeasuresPlansLaunchesAndComparesWithThePrediction) {
  TempDir dir;
  dir.Write("model.toml", kModel);
  // Two fast devices and one 3x slower with a quarter of the memory.
  std::string cluster = kCluster;
  cluster.replace(cluster.find("cpu6"), 4, "cpu3");
  cluster.replace(cluster.find("count = 6"), 9, "count = 2");
  dir.Write("cluster.toml",
            cluster +
                "nic_bandwidth = \"1Gbps\"\n[nodes.emulation]\nspeed_factor = 2.0\n"
                "[[nodes]]\nname = \"b\"\ndevice = \"cpu\"\ncount = 1\ninterconnect = \"pcie\"\n"
                "intra_bandwidth = \"10GB/s\"\nnic_bandwidth = \"1Gbps\"\n"
                "[nodes.emulation]\nspeed_factor = 6.0\nmemory = \"512MiB\"\n");
  std::string job = Job(dir.Join("run"), 1, true, "fp32");
  job.replace(job.find("steps = 5"), 9, "steps = 6");
  dir.Write("job.toml", job + "[plan]\nstrategy = \"poplar\"\n");
  const std::string cmd = "cd '" + dir.path().string() + "' && MOTLEY_CACHE_DIR='" + dir.Join("cache") +
                          "' " + MOTLEY_BIN + " train job.toml 2>&1";
  CliRun r = RunCommandLine(cmd);
  ASSERT_EQ(r.exit_code, 0) << r.output;
  EXPECT_CONTAINS(r.output, "3 devices in cpu3: measure, plan, then launch one rank per device");
  EXPECT_CONTAINS(r.output, "profile: cpu: largest microbatch of one layer that fits in 512 MiB");
  EXPECT_CONTAINS(r.output, "plan: poplar");
  EXPECT_CONTAINS(r.output, "why: ZeRO-");  // the stage and the allocation's reasoning
  EXPECT_CONTAINS(r.output, "(device:microbatches x sequences)");
  EXPECT_CONTAINS(r.output, "predicted step");
  EXPECT_CONTAINS(r.output, "the even split:");
  EXPECT_CONTAINS(r.output, "[rank 0] done: 6 steps");
  EXPECT_CONTAINS(r.output, "(predicted ");
  EXPECT_TRUE(fs::exists(dir.Join("run/plan.toml")));
  EXPECT_TRUE(fs::exists(dir.Join("run/profile.json")));
  EXPECT_TRUE(fs::exists(dir.Join("run/step-000006/shards.json")));  // every rank wrote its part
  // Again: the profile comes from the cache. With a measured baseline (the even split), the
  // profile is calibrated on that run (online profiling) before the plan is chosen again.
  const std::string first_profile = motley::ReadFileToString(dir.Join("run/profile.json")).value();
  r = RunCommandLine(cmd.substr(0, cmd.size() - 5) + " --baseline-steps 4 --overwrite 2>&1");
  ASSERT_EQ(r.exit_code, 0) << r.output;
  EXPECT_CONTAINS(r.output, "profile: cpu: measured before");
  EXPECT_CONTAINS(r.output, "the even split first, for 4 steps");
  EXPECT_CONTAINS(r.output, "profile calibrated on the even split's run (compute cpu x");
  EXPECT_CONTAINS(r.output, "measured: poplar");
  EXPECT_NE(motley::ReadFileToString(dir.Join("run/profile.json")).value(), first_profile)
      << "the ranks read the calibrated profile";
}

}  // namespace
