// Escalation at run time (issue #23, part 3): `motley train JOB --plan P`, with P overflowing one
// device, launches the ranks; the rank that runs out of memory says so, `motley train` plans more
// frugally with that device's memory capped, says what changed and why, and runs the failed step
// again from the same state — the run continues exactly as an uninterrupted one (fp64).
#include <filesystem>
#include <map>
#include <sstream>
#include <string>
#include <vector>

#include <gtest/gtest.h>
#include <nlohmann/json.hpp>

#include "cli/cli_helpers.h"
#include "core/file_io.h"

namespace {

using namespace motley_test;

std::string Source(const std::string& path) {
  return motley::ReadFileToString(std::string(MOTLEY_SOURCE_DIR) + "/" + path).value();
}

void Replace(std::string* text, const std::string& from, const std::string& to) {
  const size_t at = text->find(from);
  ASSERT_NE(at, std::string::npos) << from;
  text->replace(at, from.size(), to);
}

// Each step's loss, the last record of the step (a replayed step's line follows the failed one's);
// and the escalation events (not the checkpoints', each launch's start, nor a rebalance that the
// host's load may bring about).
struct Metrics {
  std::map<int64_t, double> loss;
  std::vector<nlohmann::json> events;
};
Metrics ReadMetrics(const std::string& path) {
  Metrics m;
  std::istringstream in(motley::ReadFileToString(path).value());
  for (std::string line; std::getline(in, line);) {
    if (line.empty()) continue;
    const auto j = nlohmann::json::parse(line);
    if (j.contains("event") && j["event"] == "escalation") m.events.push_back(j);
    if (j.contains("loss")) m.loss[j["step"].get<int64_t>()] = j["loss"].get<double>();
  }
  return m;
}

TEST(Escalation, AStepOutOfMemoryIsRunAgainUnderAMoreFrugalPlanFromTheSameState) {
  TempDir dir;
  // The local emulated cluster with 96 MiB a device; the default job in fp64 for 48 sequences a step.
  std::string cluster = Source("examples/clusters/local-emulated.toml");
  Replace(&cluster, "memory = \"1GiB\"", "memory = \"96MiB\"");
  Replace(&cluster, "memory = \"512MiB\"", "memory = \"96MiB\"");
  dir.Write("c.toml", cluster);
  std::string job = Source("examples/jobs/default.toml");
  Replace(&job, "cluster = \"local-emulated\"", "cluster = \"c.toml\"");
  Replace(&job, "global_batch_sequences = 32", "global_batch_sequences = 48");
  Replace(&job, "precision = \"fp32\"", "precision = \"fp64\"");
  Replace(&job, "dir = \"checkpoints/default\"", "dir = \"run\"");
  dir.Write("job.toml", job);
  Replace(&job, "dir = \"run\"", "dir = \"reference\"");
  dir.Write("reference.toml", job);
  // The even split fits; the same batch with device 0 taking 36 sequences at once does not.
  std::string even = Source("examples/plans/local-even-dp.toml");
  Replace(&even, "cluster = \"local-emulated\"", "cluster = \"c.toml\"");
  Replace(&even, "precision = \"fp32\"", "precision = \"fp64\"");
  Replace(&even, "microbatch_size = [2, 2, 2, 2]", "microbatch_size = [3, 3, 3, 3]");
  dir.Write("even.toml", even);
  std::string big = even;
  Replace(&big, "microbatch_size = [3, 3, 3, 3]", "microbatch_size = [36, 1, 1, 1]");
  Replace(&big, "num_microbatches = [4, 4, 4, 4]", "num_microbatches = [1, 4, 4, 4]");
  dir.Write("big.toml", big);

  const std::string motley = "cd '" + dir.path().string() + "' && MOTLEY_CACHE_DIR='" + dir.Join("cache") +
                             "' " + MOTLEY_BIN + " train ";
  // Two steps under the even split (a checkpoint at the end), then on to step 4 under the plan that
  // overflows device 0: its step 3 runs out of memory, is planned again, and runs from step 2's state.
  CliRun first = RunCommandLine(motley + "job.toml --plan even.toml --steps 2 --no-validation 2>&1");
  ASSERT_EQ(first.exit_code, 0) << first.output;
  // Refused as it is: the simulator predicts the overflow.
  CliRun refused =
      RunCommandLine(motley + "job.toml --plan big.toml --steps 4 --no-validation --resume run 2>&1");
  EXPECT_EQ(refused.exit_code, 1) << refused.output;
  EXPECT_CONTAINS(refused.output, "big.toml: the simulator predicts this plan runs out of memory (");
  EXPECT_CONTAINS(refused.output, "pass --even-if-predicted-oom to try it anyway");
  EXPECT_EQ(refused.output.find("] training"), std::string::npos) << "it started: " << refused.output;
  CliRun r = RunCommandLine(motley +
                            "job.toml --plan big.toml --steps 4 --no-validation --resume run "
                            "--even-if-predicted-oom 2>&1");
  ASSERT_EQ(r.exit_code, 0) << r.output;
  EXPECT_CONTAINS(r.output, "predicted not to fit");
  EXPECT_CONTAINS(r.output, "rank 0 failed first: out of memory on rank 0");
  EXPECT_CONTAINS(r.output, "out of memory — rank 0 (device 0, emu-cpu) ran out of memory in step 3");
  EXPECT_CONTAINS(r.output, "the plan, more frugal");
  EXPECT_CONTAINS(r.output, "device 0: ");  // what changed on it
  EXPECT_CONTAINS(r.output, "retrying from run again");
  EXPECT_CONTAINS(r.output, "done: 2 steps");
  // The failed plan is kept beside the new one; the given file is untouched.
  EXPECT_TRUE(std::filesystem::exists(dir.Join("run/plan-out-of-memory-1.toml")));
  EXPECT_EQ(motley::ReadFileToString(dir.Join("big.toml")).value(), big);

  // The same run without the detour: 4 steps under the even split.
  CliRun reference =
      RunCommandLine(motley + "reference.toml --plan even.toml --steps 4 --no-validation 2>&1");
  ASSERT_EQ(reference.exit_code, 0) << reference.output;
  const Metrics got = ReadMetrics(dir.Join("run/metrics.jsonl"));
  const Metrics want = ReadMetrics(dir.Join("reference/metrics.jsonl"));
  ASSERT_EQ(got.events.size(), 1u) << r.output << "\n"
                                   << motley::ReadFileToString(dir.Join("run/metrics.jsonl")).value();
  EXPECT_EQ(got.events[0]["event"], "escalation");
  EXPECT_EQ(got.events[0]["step"], 3);
  ASSERT_EQ(want.loss.size(), 4u);
  ASSERT_EQ(got.loss.size(), 4u) << "a step skipped or added";
  for (int64_t step = 1; step <= 4; ++step)
    EXPECT_NEAR(got.loss.at(step), want.loss.at(step), 1e-10) << "step " << step;
}

}  // namespace
