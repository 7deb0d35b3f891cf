// Elastic training across processes (#25): stragglers named in every kind of plan, a pipeline
// resumed exactly, and a lost node planned around by the supervising `motley train`.
#include <algorithm>
#include <chrono>
#include <cstdlib>
#include <fstream>
#include <iostream>
#include <regex>
#include <sstream>
#include <string>

#include <gtest/gtest.h>
#include <nlohmann/json.hpp>

#include "cli/cli_helpers.h"
#include "cli/plan_cases.h"
#include "cli/training_fixtures.h"
#include "core/file_io.h"
#include "plan/plan_io.h"

namespace {

using namespace motley_test;

// Stragglers in every kind of plan (#25): a rank slowed 4x from step 5 — in data parallelism, in a
// pipeline — is named with its slowdown in the log and the metrics, and recovers when it speeds
// up again; the others are not named.
TEST(DistributedTrain, AStragglerIsNamedInDataParallelismAndInAPipeline) {
  struct Case {
    const char* plan;
    int slowed;
  };
  for (const Case& c : {Case{"dp3-zero0-last-batch", 1}, Case{"pipeline3-1f1b-asymmetric", 2}}) {
    SCOPED_TRACE(c.plan);
    TempDir dir;
    dir.Write("model.toml", kModel);
    // Emulated devices 8x slower than this machine: a step's compute is the emulated time, not
    // what a busy host's scheduling makes of a tiny model's few milliseconds.
    dir.Write("cluster.toml", kCluster + "[nodes.emulation]\nspeed_factor = 8.0\n");
    const PlanCase& p = PlanNamed(c.plan);
    const std::string plan = dir.Write("plan.toml", PlanHeader("fp32") + p.body);
    std::string job = Job(dir.Join("run"), p.clip, p.checkpointing, "fp32");
    job.replace(job.find("steps = 5"), 9, "steps = 16");
    // A 4x straggler against a threshold of 2x.
    job += "[straggler_detection]\nthreshold = 1.0\n[[emulation.stragglers]]\nrank = " +
           std::to_string(c.slowed) + "\nslowdown = 4\nfrom_step = 5\nto_step = 10\n";
    dir.Write("job.toml", job);
    CliRun r = Motley("launch --nproc " + std::to_string(p.ranks) + " -- " + std::string(MOTLEY_BIN) +
                          " train job.toml --plan plan.toml --metrics m.jsonl",
                      false, dir.path().string());
    ASSERT_EQ(r.exit_code, 0) << r.output;
    EXPECT_CONTAINS(r.output,
                    "straggler: rank " + std::to_string(c.slowed) + " (device " + std::to_string(c.slowed));
    EXPECT_CONTAINS(r.output, "rank " + std::to_string(c.slowed) + " (device " + std::to_string(c.slowed) +
                                  ", cpu) has recovered");
    for (int k = 0; k < p.ranks; ++k) {
      if (k != c.slowed) {
        EXPECT_EQ(r.output.find("straggler: rank " + std::to_string(k)), std::string::npos) << r.output;
      }
    }
    // The metrics: the straggler listed with its slowdown while it straggles.
    std::ifstream metrics(dir.Join("m.jsonl"));
    double worst = 0;
    int steps_listed = 0;
    for (std::string line; std::getline(metrics, line);) {
      const nlohmann::json j = nlohmann::json::parse(line);
      if (!j.contains("stragglers")) continue;
      for (const auto& s : j["stragglers"]) {
        EXPECT_EQ(s["rank"].get<int>(), c.slowed);
        worst = std::max(worst, s["slowdown"].get<double>());
        ++steps_listed;
      }
    }
    EXPECT_GT(worst, 2.0);
    EXPECT_GE(steps_listed, 3);
  }
}

// Live rebalancing (#25): rank 1 slowed 3x from step 5 — in a 3-way data-parallel plan, and in a
// 3-stage pipeline. The ranks name it, plan again for the devices as measured (fewer sequences on
// device 1, or fewer layers on its stage; every rank on its device), and switch at the step
// boundary — the state moved between them, no restart. The run still matches one process (fp64),
// and equals a run resumed at the switch under the new plan.
TEST(DistributedTrain, AStragglerIsRebalancedLiveAndTheRunStaysExact) {
  TempDir dir;
  dir.Write("model.toml", kModel);
  dir.Write("cluster.toml", kCluster + "[nodes.emulation]\nspeed_factor = 8.0\n");
  auto job = [&](const std::string& name, bool rebalance) {
    std::string j = Job(dir.Join(name), 1, true);
    j.replace(j.find("steps = 5"), 9, "steps = 14");
    j += "interval_steps = 1\nkeep = 20\n[straggler_detection]\nbaseline_steps = 2\npersist_steps = "
         "2\nrebalance = " +
         std::string(rebalance ? "true" : "false") +
         "\n[[emulation.stragglers]]\nrank = 1\nslowdown = 3\nfrom_step = 5\n";
    return dir.Write(name + ".toml", j);
  };
  std::string ref = Job(dir.Join("ref"), 1, true);
  ref.replace(ref.find("steps = 5"), 9, "steps = 14");
  dir.Write("ref.toml", ref);
  ASSERT_EQ(Motley("train ref.toml --single-process", false, dir.path().string()).exit_code, 0);
  const std::string launch = "launch --nproc 3 -- " + std::string(MOTLEY_BIN) + " train ";
  // The data-parallel plan gives device 1 the most sequences (5 of 12, a last microbatch of 2), so
  // any slowdown the ranks measure above 1.5x must take some away, however busy the machine makes
  // the measurement: at 1.5x its fair share is 3 of 12. (A plan that starts it at 3 could keep 3
  // when a busy host measures its 3x as 1.6x — CI saw that.)
  const std::string dp_body = R"(schedule = "gpipe"
zero_stage = 0
[[groups]]
ministages = [[0, 4]]
devices = [0, 1, 2]
microbatch_size = [3, 3, 2]
num_microbatches = [1, 2, 2]
last_microbatch_size = [0, 2, 0]
)";
  const PlanCase& pipeline = PlanNamed("pipeline3-1f1b-asymmetric");
  ASSERT_EQ(pipeline.clip, 1);
  ASSERT_TRUE(pipeline.checkpointing);
  const std::pair<const char*, std::string> cases[] = {{"dp3-device1-heaviest", dp_body},
                                                       {pipeline.name, pipeline.body}};
  for (const auto& [name, body] : cases) {
    SCOPED_TRACE(name);
    const std::string run = std::string("run-") + name,
                      plan = dir.Write(run + ".plan.toml", PlanHeader() + body);
    CliRun r = Motley(launch + job(run, true) + " --plan " + plan, false, dir.path().string());
    ASSERT_EQ(r.exit_code, 0) << r.output;
    EXPECT_CONTAINS(r.output, "straggler: rank 1 (device 1");
    // The straggler measured slower, if not by its whole 3x: on a busy machine (tests beside it) the
    // ranks share the cores and the others may show slowed too — 1.7x was seen.
    const std::smatch measured = [&] {
      std::smatch m;
      std::regex_search(r.output, m,
                        std::regex(R"(rebalance: devices as measured \([^)]*device 1 ([0-9.]+)x)"));
      return m;
    }();
    ASSERT_FALSE(measured.empty()) << r.output;
    EXPECT_GT(std::stod(measured[1].str()), 1.5) << r.output;
    // The first switch the metrics record: after which step, and the plan it switched to.
    int64_t at = -1;
    std::string next;
    std::istringstream metrics(motley::ReadFileToString(dir.Join(run + "/metrics.jsonl")).value());
    for (std::string line; std::getline(metrics, line);) {
      const nlohmann::json j = nlohmann::json::parse(line);
      if (j.value("event", "") != "rebalance" || !j.value("switched", false) || at >= 0) continue;
      at = j["step"].get<int64_t>();
      next = j["plan"].get<std::string>();
      EXPECT_GT(j["slowdowns"]["1"].get<double>(), 1.5) << line;
      EXPECT_LT(j["predicted_step_s"].get<double>(), j["current_step_s"].get<double>()) << line;
    }
    ASSERT_GE(at, 5) << r.output;
    ASSERT_LT(at, 14) << r.output;
    const std::string replanned = motley::ReadFileToString(next).value();
    const motley::Plan before = motley::ParsePlanToml(PlanHeader() + body, plan).value();
    const motley::Plan after = motley::ParsePlanToml(replanned, next).value();
    ASSERT_EQ(after.groups.size(), before.groups.size()) << replanned;
    for (size_t g = 0; g < after.groups.size(); ++g)
      for (size_t i = 0; i < after.groups[g].devices.size(); ++i)
        EXPECT_EQ(after.groups[g].devices[i].device, before.groups[g].devices[i].device)
            << "every rank on its device";
    if (after.groups.size() == 1) {  // fewer sequences on device 1
      EXPECT_CONTAINS(r.output, "switching to poplar");
      EXPECT_LT(after.groups[0].devices[1].sequences(), before.groups[0].devices[1].sequences()) << replanned;
    } else {  // fewer layers on its stage
      EXPECT_CONTAINS(r.output, "switching to the same 3 groups");
      EXPECT_LT(after.groups[1].num_layers(), before.groups[1].num_layers()) << replanned;
    }
    // The new plan from the switch on, resumed from the checkpoint of that step; and one process.
    const std::string by_hand = std::string("by-hand-") + name;
    CliRun again = Motley(
        launch + job(by_hand, false) + " --plan " + next + " --resume " +
            dir.Join(run + "/step-" + std::string(6 - std::to_string(at).size(), '0') + std::to_string(at)),
        false, dir.path().string());
    ASSERT_EQ(again.exit_code, 0) << again.output;
    // The same checkpoint resumed with the plan the run was launched with: the checkpoint records
    // the plan it was on, the run takes that up and says so (#48: it went back to the old plan).
    const std::string resumed = std::string("resumed-") + name;
    CliRun taken_up = Motley(
        launch + job(resumed, false) + " --plan " + plan + " --resume " +
            dir.Join(run + "/step-" + std::string(6 - std::to_string(at).size(), '0') + std::to_string(at)),
        false, dir.path().string());
    ASSERT_EQ(taken_up.exit_code, 0) << taken_up.output;
    EXPECT_CONTAINS(taken_up.output, "resuming on the plan the run was last on");
    const std::string final_step = "/step-000014/model.safetensors";
    EXPECT_LT(MaxRelativeDifference(dir.Join(resumed) + final_step, dir.Join(by_hand) + final_step),
              kFp64Tolerance);
    const double vs_one = MaxRelativeDifference(dir.Join(run) + final_step, dir.Join("ref") + final_step);
    const double vs_by_hand =
        MaxRelativeDifference(dir.Join(run) + final_step, dir.Join(by_hand) + final_step);
    std::cout << name << ": switched after step " << at << "; against one process " << vs_one
              << ", against the new plan from there " << vs_by_hand << "\n";
    EXPECT_GE(vs_one, 0);
    EXPECT_LT(vs_one, kFp64Tolerance);
    EXPECT_GE(vs_by_hand, 0);
    EXPECT_LT(vs_by_hand, kFp64Tolerance);
  }
}

TEST(DistributedTrain, ResumingAPipelineContinuesExactlyAsTheUninterruptedRun) {
  TempDir dir;
  dir.Write("model.toml", kModel);
  dir.Write("cluster.toml", kCluster);
  // Interleaved ministages with offload (moments on the host), checkpoints every 3 steps.
  const std::string plan =
      dir.Write("plan.toml", std::string("model = \"model.toml\"\ncluster = \"cluster.toml\"\n"
                                         "seq_len = 16\nprecision = \"fp32\"\n") +
                                 PlanNamed("interleaved-offload-uneven").body);
  std::string job = Job(dir.Join("run"), 1, true, "fp32");
  job.replace(job.find("steps = 5"), 9, "steps = 6");
  job += "interval_steps = 3\nkeep = 5\n";
  dir.Write("job.toml", job);
  const std::string launch =
      "launch --nproc 3 -- " + std::string(MOTLEY_BIN) + " train job.toml --plan plan.toml ";
  CliRun r = Motley(launch + "--metrics full.jsonl", false, dir.path().string());
  ASSERT_EQ(r.exit_code, 0) << r.output;
  fs::rename(dir.Join("run/step-000006"), dir.Join("uninterrupted"));
  r = Motley(launch + "--resume run/step-000003 --metrics resumed.jsonl", false, dir.path().string());
  ASSERT_EQ(r.exit_code, 0) << r.output;
  EXPECT_CONTAINS(r.output, "steps 4..6 of 6");
  EXPECT_EQ(MaxRelativeDifference(dir.Join("run/step-000006/model.safetensors"),
                                  dir.Join("uninterrupted/model.safetensors")),
            0);
  EXPECT_EQ(MaxRelativeDifference(dir.Join("run/step-000006/optimizer.safetensors"),
                                  dir.Join("uninterrupted/optimizer.safetensors")),
            0);
}

// A lost node (#25): three one-device nodes, checkpoints every 5 steps, rank 2 killed in step 15.
// With --max-restarts the run plans again on the two devices left, resumes from step 10 and
// finishes; its parameters are those of a run that switched to that plan at step 10 (fp64).
TEST(DistributedTrain, ALostNodeIsPlannedAroundAndTheRunFinishesOnTheSurvivors) {
  TempDir dir;
  dir.Write("model.toml", kModel);
  std::string cluster = std::string("name = \"three-nodes\"\n") + kCpuType;
  for (const char* node : {"a", "b", "c"})
    cluster += std::string("[[nodes]]\nname = \"") + node +
               "\"\ndevice = \"cpu\"\ncount = 1\ninterconnect = \"pcie\"\nintra_bandwidth = \"10GB/s\"\n"
               "nic_bandwidth = \"10Gbps\"\n[nodes.emulation]\nspeed_factor = 2.0\n";
  dir.Write("cluster.toml", cluster);
  std::string job = Job(dir.Join("run"), 1, true);
  job.replace(job.find("steps = 5"), 9, "steps = 20");
  job += "interval_steps = 5\nkeep = 10\n[plan]\nstrategy = \"poplar\"\n";
  dir.Write("job.toml", job);
  const std::string plan = dir.Write("plan.toml", PlanHeader() + PlanNamed("dp3-zero0-last-batch").body);
  const std::string cmd =
      "cd '" + dir.path().string() + "' && MOTLEY_CACHE_DIR='" + dir.Join("cache") + "' " + MOTLEY_BIN +
      " train job.toml --plan plan.toml --max-restarts 1 --die-rank 2 --die-at-step 15 2>&1";
  const auto started = std::chrono::steady_clock::now();
  CliRun r = RunCommandLine(cmd);
  const double run_s = std::chrono::duration<double>(std::chrono::steady_clock::now() - started).count();
  ASSERT_EQ(r.exit_code, 0) << r.output;
  EXPECT_CONTAINS(r.output, "rank 2 (device 2, node c) failed: its node is lost — restart 1 of 1");
  EXPECT_CONTAINS(r.output, "on the 2 devices left");
  EXPECT_CONTAINS(r.output, "resuming from the checkpoint of step 10");
  EXPECT_CONTAINS(r.output, "steps 11..20 of 20");
  EXPECT_CONTAINS(r.output, "[rank 0] done: 10 steps");
  const std::string replanned = motley::ReadFileToString(dir.Join("run/plan.toml")).value();
  EXPECT_EQ(replanned.find("devices = [0, 1, 2]"), std::string::npos) << replanned;
  // The metrics say so.
  EXPECT_CONTAINS(motley::ReadFileToString(dir.Join("run/metrics.jsonl")).value(), "\"event\":\"restart\"");
  // And say how long the restart took and how often the run checkpointed: what a plan on spot
  // devices takes an interruption to cost when asked to measure it from this run (#51).
  dir.Write("spot.toml", R"(name = "spot"
[[offers]]
name = "a100"
device = "a100-40gb"
count = 8
interconnect = "nvswitch"
nic_bandwidth = "400Gbps"
region = "east"
nodes = 1
price = "1.84 USD/h"
spot_price = "0.90 USD/h"
spot_interruptions_per_hour = 0.01
source = "test figures"
)");
  const std::string plan_args =
      "plan --offers spot.toml --model llama-1m --seq-len 128 --global-batch-tokens 65536 --objective cost "
      "--restart-time run --checkpoint-interval run/metrics.jsonl --json";
  CliRun priced = Motley(plan_args, true, dir.path().string());
  ASSERT_EQ(priced.exit_code, 0) << Motley(plan_args, false, dir.path().string()).output;
  const nlohmann::json j = nlohmann::json::parse(priced.output);
  ASSERT_TRUE(j.contains("interruptions")) << priced.output;
  const nlohmann::json& measured = j["interruptions"];
  std::cout << "measured from the run (" << run_s << " s): " << measured.dump() << "\n";
  EXPECT_CONTAINS(measured["measured"].get<std::string>(), "measured over 1 restart of run/metrics.jsonl");
  EXPECT_CONTAINS(measured["measured"].get<std::string>(), "checkpoint interval");
  // Both are real durations of this run: positive, and shorter than the run took.
  EXPECT_GT(measured["restart_s"].get<double>(), 0);
  EXPECT_LT(measured["restart_s"].get<double>(), run_s);
  EXPECT_GT(measured["checkpoint_interval_s"].get<double>(), 0);
  EXPECT_LT(measured["checkpoint_interval_s"].get<double>(), run_s);
  EXPECT_NE(measured["restart_s"].get<double>(), 600);  // not the default
  // The same plan from the same checkpoint, by hand: the same parameters.
  std::string by_hand = Job(dir.Join("by-hand"), 1, true);
  by_hand.replace(by_hand.find("steps = 5"), 9, "steps = 20");
  dir.Write("by-hand.toml", by_hand);
  int ranks = 0;
  for (size_t at = replanned.find("[[groups]]"); at != std::string::npos;
       at = replanned.find("[[groups]]", at + 1)) {
    const size_t devices = replanned.find("devices = [", at);
    const size_t end = replanned.find(']', devices);
    ranks += 1 + static_cast<int>(std::count(replanned.begin() + static_cast<std::ptrdiff_t>(devices),
                                             replanned.begin() + static_cast<std::ptrdiff_t>(end), ','));
  }
  ASSERT_EQ(ranks, 2);
  CliRun again = Motley("launch --nproc 2 -- " + std::string(MOTLEY_BIN) +
                            " train by-hand.toml --plan run/plan.toml --resume run/step-000010",
                        false, dir.path().string());
  ASSERT_EQ(again.exit_code, 0) << again.output;
  EXPECT_LT(MaxRelativeDifference(dir.Join("run/step-000020/model.safetensors"),
                                  dir.Join("by-hand/step-000020/model.safetensors")),
            kFp64Tolerance);
  EXPECT_GE(MaxRelativeDifference(dir.Join("run/step-000020/model.safetensors"),
                                  dir.Join("by-hand/step-000020/model.safetensors")),
            0);
}

}  // namespace
