// Sharded checkpoints (#25): every rank writes the state it owns at once, nothing is gathered;
// another plan reads them back (resharding); `motley checkpoint export` consolidates; a rank killed
// while writing leaves the previous checkpoint whole.
#include <cstdint>
#include <filesystem>
#include <iostream>
#include <sstream>
#include <string>

#include <gtest/gtest.h>
#include <nlohmann/json.hpp>

#include "cli/cli_helpers.h"
#include "cli/plan_cases.h"
#include "cli/training_fixtures.h"
#include "core/file_io.h"

namespace {

using namespace motley_test;
namespace fs = std::filesystem;

// The metrics' checkpoint events, by step.
std::map<int64_t, nlohmann::json> CheckpointEvents(const std::string& path) {
  std::map<int64_t, nlohmann::json> out;
  std::istringstream in(motley::ReadFileToString(path).value());
  for (std::string line; std::getline(in, line);) {
    if (line.empty()) continue;
    const auto j = nlohmann::json::parse(line);
    if (j.value("event", "") == "checkpoint") out[j["step"].get<int64_t>()] = j;
  }
  return out;
}

// A model whose training state (fp64 parameters, gradients and AdamW moments: 32 bytes a
// parameter, 26 MiB) is larger than any one device's memory (24 MiB): ZeRO-3 over three devices
// trains it, and so does a three-stage pipeline. Its checkpoint (parameters and moments) is
// written with no rank holding more than its own part, and read back under the other plan.
TEST(ShardedCheckpoint, AModelLargerThanAnyRankIsWrittenWithoutGatheringAndReadUnderAnotherPlan) {
  TempDir dir;
  constexpr int64_t kParams =
      4 * (128 * 128 * 2 + 2 * 64 * 128 + 3 * 128 * 384 + 2 * 128) + 2 * 256 * 128 + 128;
  constexpr int64_t kStateBytes = 24 * kParams;  // what a checkpoint holds
  constexpr int64_t kDeviceBytes = 24 << 20;
  static_assert(32 * kParams > kDeviceBytes);
  dir.Write("model.toml", R"(name = "wide4"
hidden_size = 128
num_layers = 4
num_heads = 4
num_kv_heads = 2
ffn_size = 384
vocab_size = 256
max_seq_len = 64
)");
  dir.Write("cluster.toml",
            std::string("name = \"three\"\n") + kCpuType +
                "[[nodes]]\nname = \"a\"\ndevice = \"cpu\"\ncount = 3\ninterconnect = \"pcie\"\n"
                "intra_bandwidth = \"10GB/s\"\n[nodes.emulation]\nmemory = \"24MiB\"\n");
  const std::string zero3 = dir.Write("zero3.toml", PlanHeader() + R"(zero_stage = 3
[[groups]]
ministages = [[0, 1], [1, 2], [2, 3], [3, 4]]
devices = [0, 1, 2]
microbatch_size = [2, 2, 2]
num_microbatches = [2, 2, 2]
)");
  const std::string pipeline =
      dir.Write("pipeline.toml", PlanHeader() + PlanNamed("pipeline3-1f1b-asymmetric").body);
  auto job = [&](const std::string& name, const std::string& format) {
    std::string j = Job(dir.Join(name), 1, true);
    j.replace(j.find("steps = 5"), 9, "steps = 4");
    return dir.Write(name + ".toml", j + "interval_steps = 2\nkeep = 5\nformat = \"" + format + "\"\n");
  };
  auto train = [&](const std::string& job_file, const std::string& plan, const std::string& more = "") {
    return Motley(
        "launch --nproc 3 -- " + std::string(MOTLEY_BIN) + " train " + job_file + " --plan " + plan + more,
        false, dir.path().string());
  };
  CliRun sharded = train(job("sharded", "sharded"), zero3);
  ASSERT_EQ(sharded.exit_code, 0) << sharded.output;
  const fs::path step4 = dir.Join("sharded/step-000004");
  EXPECT_TRUE(fs::exists(step4 / "shards.json"));
  EXPECT_FALSE(fs::exists(step4 / "model.safetensors")) << "nothing is gathered into one file";
  int64_t written = 0;
  for (int r = 0; r < 3; ++r) {
    const fs::path file = step4 / ("rank-0000" + std::to_string(r) + ".safetensors");
    ASSERT_TRUE(fs::exists(file)) << file;
    const auto bytes = static_cast<int64_t>(fs::file_size(file));
    EXPECT_LT(bytes, kStateBytes / 2) << "rank " << r << " wrote more than its third";
    written += bytes;
  }
  EXPECT_GT(written, kStateBytes);  // every element once, with the files' headers
  EXPECT_LT(written, kStateBytes + kStateBytes / 10);
  // The host memory a checkpoint takes on a rank: with sharding, next to nothing beyond what the
  // rank holds anyway; gathered (the consolidated form), rank 0 holds the whole state.
  CliRun gathered = train(job("gathered", "consolidated"), zero3);
  ASSERT_EQ(gathered.exit_code, 0) << gathered.output;
  const auto sharded_events = CheckpointEvents(dir.Join("sharded/metrics.jsonl"));
  const auto gathered_events = CheckpointEvents(dir.Join("gathered/metrics.jsonl"));
  ASSERT_TRUE(sharded_events.count(4) && gathered_events.count(4));
  const int64_t sharded_host = sharded_events.at(4)["host_bytes"],
                gathered_host = gathered_events.at(4)["host_bytes"];
  std::cout << "host memory a checkpoint took on a rank: sharded " << sharded_host << " bytes, gathered "
            << gathered_host << " bytes (the state is " << kStateBytes << ")\n";
  EXPECT_EQ(sharded_events.at(4)["form"], "sharded");
  EXPECT_LT(sharded_host, kStateBytes / 3);
  EXPECT_GE(gathered_host, kStateBytes);
  // The same state either way.
  EXPECT_EQ(MaxRelativeDifference(step4.string() + "/model.safetensors",
                                  dir.Join("gathered/step-000004/model.safetensors")),
            0);
  EXPECT_EQ(MaxRelativeDifference(step4.string() + "/optimizer.safetensors",
                                  dir.Join("gathered/step-000004/optimizer.safetensors")),
            0);

  // Step 2's shards read by a pipeline (each stage reads only its layers' pieces): its steps 3-4
  // are those of the ZeRO-3 run.
  CliRun resumed = train(job("resumed", "sharded"), pipeline, " --resume " + dir.Join("sharded/step-000002"));
  ASSERT_EQ(resumed.exit_code, 0) << resumed.output;
  EXPECT_CONTAINS(resumed.output, "steps 3..4 of 4");
  const double d = MaxRelativeDifference(dir.Join("resumed/step-000004/model.safetensors"),
                                         step4.string() + "/model.safetensors");
  EXPECT_GE(d, 0);
  EXPECT_LT(d, kFp64Tolerance);

  // What the checkpoint holds, every checksum verified.
  CliRun info = Motley("checkpoint info " + dir.Join("sharded"));
  ASSERT_EQ(info.exit_code, 0) << info.output;
  EXPECT_CONTAINS(info.output, "step 4 of 4, sharded: 3 rank file(s) and an index");
  EXPECT_CONTAINS(info.output, "every checksum verified");
  EXPECT_CONTAINS(info.output,
                  "every weight loads (names, shapes, finite values)");  // #48: it loads what it verifies
}

// kill -9 of a rank after it wrote its part of step 4's checkpoint, before the checkpoint was whole:
// the run fails, step 2's checkpoint is still the newest and loads, and resuming from the run
// folder ends where an uninterrupted run ends.
TEST(ShardedCheckpoint, ARankKilledWhileWritingLeavesThePreviousCheckpointLoadable) {
  TempDir dir;
  dir.Write("model.toml", kModel);
  dir.Write("cluster.toml", kCluster);
  const PlanCase& c = PlanNamed("cephalo-dp3-zero3-state-shares");
  const std::string plan = dir.Write("plan.toml", PlanHeader() + c.body);
  dir.Write("job.toml", Job(dir.Join("run"), c.clip, c.checkpointing) + "interval_steps = 2\nkeep = 5\n");
  dir.Write("ref.toml", Job(dir.Join("ref"), c.clip, c.checkpointing));
  const std::string launch =
      "launch --nproc 3 -- " + std::string(MOTLEY_BIN) + " train job.toml --plan " + plan;
  CliRun killed =
      Motley(launch + " --die-rank 1 --die-at-step 4 --die-in-checkpoint", false, dir.path().string());
  ASSERT_NE(killed.exit_code, 0) << killed.output;
  EXPECT_CONTAINS(killed.output, "rank 1");
  EXPECT_EQ(motley::ReadFileToString(dir.Join("run/latest")).value(), "step-000002\n");
  EXPECT_FALSE(fs::exists(dir.Join("run/step-000004")));
  EXPECT_TRUE(fs::exists(dir.Join("run/step-000004.tmp/rank-00001.safetensors")))
      << "the kill came after its write";
  CliRun info = Motley("checkpoint info " + dir.Join("run"));
  ASSERT_EQ(info.exit_code, 0) << info.output;
  EXPECT_CONTAINS(info.output, "step 2 of 5");

  CliRun resumed = Motley(launch + " --resume run", false, dir.path().string());
  ASSERT_EQ(resumed.exit_code, 0) << resumed.output;
  EXPECT_CONTAINS(resumed.output, "steps 3..5 of 5");
  EXPECT_FALSE(fs::exists(dir.Join("run/step-000004.tmp"))) << "what the interrupted save left is gone";
  ASSERT_EQ(Motley("train ref.toml --single-process", false, dir.path().string()).exit_code, 0);
  const double d = MaxRelativeDifference(dir.Join("run/step-000005/model.safetensors"),
                                         dir.Join("ref/step-000005/model.safetensors"));
  EXPECT_GE(d, 0);
  EXPECT_LT(d, kFp64Tolerance);
}

// A sharded checkpoint that lost a file, or whose index was edited: one clear error each, naming
// the file and what to do.
TEST(ShardedCheckpoint, ADamagedShardedCheckpointGetsOneClearError) {
  TempDir dir;
  dir.Write("model.toml", kModel);
  dir.Write("cluster.toml", kCluster);
  const PlanCase& c = PlanNamed("dp3-zero0-last-batch");
  const std::string plan = dir.Write("plan.toml", PlanHeader() + c.body);
  dir.Write("job.toml", Job(dir.Join("run"), c.clip, c.checkpointing));
  const std::string launch =
      "launch --nproc 3 -- " + std::string(MOTLEY_BIN) + " train job.toml --plan " + plan;
  ASSERT_EQ(Motley(launch, false, dir.path().string()).exit_code, 0);
  // ZeRO-0: the replicas hold the same state; the first one writes it.
  EXPECT_TRUE(fs::exists(dir.Join("run/step-000005/rank-00000.safetensors")));
  EXPECT_FALSE(fs::exists(dir.Join("run/step-000005/rank-00001.safetensors")));
  fs::copy(dir.Join("run"), dir.Join("copy"), fs::copy_options::recursive);
  fs::remove(dir.Join("run/step-000005/rank-00000.safetensors"));
  CliRun lost = Motley(launch + " --resume run", false, dir.path().string());
  EXPECT_EQ(lost.exit_code, 1) << lost.output;
  EXPECT_CONTAINS(lost.output, "rank-00000.safetensors: missing from the checkpoint");
  std::string index = motley::ReadFileToString(dir.Join("copy/step-000005/shards.json")).value();
  index.replace(index.find("\"count\""), 7, "\"kount\"");
  dir.Write("copy/step-000005/shards.json", index);
  CliRun edited = Motley("checkpoint info " + dir.Join("copy"));
  EXPECT_EQ(edited.exit_code, 1) << edited.output;
  EXPECT_CONTAINS(edited.output, "shards.json: ");
  EXPECT_CONTAINS(edited.output, "use another checkpoint");
}

}  // namespace
