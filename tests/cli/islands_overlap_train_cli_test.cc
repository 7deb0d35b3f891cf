// Islands whose outer rounds overlap their inner steps ([islands] overlap_steps, #52 item 1): the
// islands' ranks send their pseudo-gradients at a round's end, train on, and land the outer step
// overlap_steps later keeping what they learnt meanwhile — across processes (the exchange on a thread
// of its own) as the same islands in one process (fp64, 1e-10), whatever the islands' plans, and the
// round they run is the one `motley simulate --overlap-steps` times. Streaming fragments ([islands]
// fragments) too: each fragment's round at its own step, across processes as in one process.
#include <filesystem>
#include <fstream>
#include <string>
#include <tuple>
#include <vector>

#include <fmt/format.h>
#include <gtest/gtest.h>
#include <nlohmann/json.hpp>

#include "cli/cli_helpers.h"
#include "cli/training_fixtures.h"

namespace {

using namespace motley_test;

// The fixtures' fp64 job (5 steps, 12 sequences a step) as 2 islands meeting every 2 steps, each round
// landing `overlap` steps after it is sent.
std::string OverlapJob(const std::string& dir, int overlap) {
  return Job(dir, 1.0, true) + "interval_steps = 0\n[islands]\ncount = 2\ninner_steps = 2\noverlap_steps = " +
         std::to_string(overlap) + "\n";
}

std::string DataParallelPlan(const std::string& devices, int zero) {
  return PlanHeader() + "schedule = \"gpipe\"\nzero_stage = " + std::to_string(zero) +
         "\n[[groups]]\nministages = [[0, 2], [2, 4]]\ndevices = " + devices +
         "\nmicrobatch_size = [2, 1]\nnum_microbatches = [2, 2]\n";
}

std::string PipelinePlan(int first_device) {
  std::string plan = PlanHeader() + "schedule = \"1f1b\"\nzero_stage = 2\n";
  for (int stage = 0; stage < 2; ++stage)
    plan += fmt::format(
        "[[groups]]\nministages = [[{}, {}]]\ndevices = [{}]\nmicrobatch_size = [3]\nnum_microbatches = "
        "[2]\n",
        2 * stage, 2 * stage + 2, first_device + stage);
  return plan;
}

std::string TensorParallelPlan(const std::string& devices) {
  return PlanHeader() +
         "schedule = \"gpipe\"\nzero_stage = 1\n[[groups]]\nministages = [[0, 4]]\ntp_degree = 2\n"
         "devices = " +
         devices + "\nmicrobatch_size = [3, 3]\nnum_microbatches = [2, 2]\n";
}

// Two islands of two ranks each (devices 0, 1 and 2, 3): of like shapes rank to rank (ZeRO-2, ZeRO-0's
// even parts, a pipeline, a tensor-parallel team), and of unlike shapes by whole fragments.
struct IslandPlans {
  std::string name, island0, island1;
};
std::vector<IslandPlans> EveryShape() {
  return {{"zero2", DataParallelPlan("[0, 1]", 2), DataParallelPlan("[2, 3]", 2)},
          {"zero0", DataParallelPlan("[0, 1]", 0), DataParallelPlan("[2, 3]", 0)},
          {"pipeline", PipelinePlan(0), PipelinePlan(2)},
          {"tp", TensorParallelPlan("[0, 1]"), TensorParallelPlan("[2, 3]")},
          {"unlike", DataParallelPlan("[0, 1]", 2), PipelinePlan(2)}};
}

// `c`'s plans written into `dir`, as `motley train` and `motley simulate` take them.
std::string PlanFlags(TempDir& dir, const IslandPlans& c) {
  return " --island-plan " + dir.Write(c.name + "-0.plan.toml", c.island0) + " --island-plan " +
         dir.Write(c.name + "-1.plan.toml", c.island1);
}

// Island plans `c` launched as 4 ranks on `job` (written as c.name.toml, its metrics to c.name.jsonl):
// the run, and its model at step 5 against one process's ("ref"), fp64, 1e-10.
CliRun LaunchAgainstOneProcess(TempDir& dir, const IslandPlans& c, const std::string& job) {
  dir.Write(c.name + ".toml", job);
  CliRun r = Motley(fmt::format("launch --nproc 4 -- {} train {}.toml --metrics {}.jsonl{}", MOTLEY_BIN,
                                c.name, c.name, PlanFlags(dir, c)),
                    false, dir.path().string());
  EXPECT_EQ(r.exit_code, 0) << r.output;
  if (r.exit_code != 0) return r;
  const double d = MaxRelativeDifference(dir.Join(c.name + "/step-000005/model.safetensors"),
                                         dir.Join("ref/step-000005/model.safetensors"));
  std::cout << c.name << ": relative difference of the parameters " << d << "\n";
  EXPECT_GE(d, 0);
  EXPECT_LT(d, 1e-10);
  return r;
}

// The outer rounds in a run's metrics, in order.
std::vector<nlohmann::json> OuterRoundEvents(const std::string& path) {
  std::ifstream metrics(path);
  std::vector<nlohmann::json> out;
  for (std::string line; std::getline(metrics, line);)
    if (nlohmann::json j = nlohmann::json::parse(line); j.value("event", "") == "outer_round")
      out.push_back(std::move(j));
  return out;
}

TEST(IslandsOverlap, OverlappedRoundsTrainTheModelOfTheSameIslandsInOneProcess) {
  TempDir dir;
  dir.Write("cluster.toml", kCluster);
  dir.Write("model.toml", kModel);
  dir.Write("ref.toml", OverlapJob(dir.Join("ref"), 1));
  dir.Write("waiting.toml", OverlapJob(dir.Join("waiting"), 0));
  for (const std::string name : {"ref", "waiting"}) {
    CliRun r = Motley("train " + name + ".toml --single-process", false, dir.path().string());
    ASSERT_EQ(r.exit_code, 0) << r.output;
  }
  const auto model = [&](const std::string& run) { return dir.Join(run + "/step-000005/model.safetensors"); };
  // The overlap changes the training (the rounds land a step late), so the comparisons below can fail.
  EXPECT_GT(MaxRelativeDifference(model("ref"), model("waiting")), 1e-6);
  for (const IslandPlans& c : EveryShape()) {
    SCOPED_TRACE(c.name);
    const CliRun r = LaunchAgainstOneProcess(dir, c, OverlapJob(dir.Join(c.name), 1));
    if (r.exit_code != 0) continue;
    // The rounds of steps 2 and 4 landed a step later, their exchange timed; the last one at once.
    std::vector<std::pair<int64_t, int64_t>> rounds;  // sent at, landed at (-1: at once)
    for (const nlohmann::json& j : OuterRoundEvents(dir.Join(c.name + ".jsonl"))) {
      rounds.emplace_back(j["step"].get<int64_t>(), j.value("landed_at_step", int64_t{-1}));
      EXPECT_GT(j["bytes_sent"].get<double>(), 0);
      if (j.contains("landed_at_step")) {
        EXPECT_GT(j["exchange_s"].get<double>(), 0);
      }
    }
    EXPECT_EQ(rounds, (std::vector<std::pair<int64_t, int64_t>>{{2, 3}, {4, 5}, {5, -1}}));
    // The round the ranks ran is the one the simulator times with the same overlap.
    CliRun sim = Motley("simulate --json --inner-steps 2 --overlap-steps 1" + PlanFlags(dir, c), false,
                        dir.path().string());
    ASSERT_EQ(sim.exit_code, 0) << sim.output;
    const nlohmann::json j = nlohmann::json::parse(sim.output);
    EXPECT_CONTAINS(r.output, "outer round: " + j["round_schedule_hash"].get<std::string>());
    EXPECT_EQ(j["overlap_steps"].get<int64_t>(), 1);
    EXPECT_LE(j["round_exposed_s"].get<double>(), j["round_s"].get<double>() + 1e-12);
  }
}

// A rank that dies while a round is in flight (sent at step 2, landing at 3) stops every rank with an
// error naming it — the others' exchange on its thread does not keep them waiting.
TEST(IslandsOverlap, ARankLostWhileARoundIsInFlightStopsEveryRankNamingIt) {
  TempDir dir;
  dir.Write("cluster.toml", kCluster);
  dir.Write("model.toml", kModel);
  dir.Write("lost.toml", OverlapJob(dir.Join("lost"), 1));
  const std::string plans = " --island-plan " + dir.Write("p0.toml", DataParallelPlan("[0, 1]", 2)) +
                            " --island-plan " + dir.Write("p1.toml", DataParallelPlan("[2, 3]", 2));
  CliRun r = Motley("train lost.toml --die-rank 3 --die-at-step 3" + plans, false, dir.path().string());
  EXPECT_NE(r.exit_code, 0) << r.output;
  EXPECT_CONTAINS(r.output, "rank 3");
}

TEST(IslandsOverlap, AnOverlapOfARoundOrMoreIsOneClearError) {
  TempDir dir;
  dir.Write("cluster.toml", kCluster);
  dir.Write("model.toml", kModel);
  dir.Write("bad.toml", OverlapJob(dir.Join("bad"), 2));
  CliRun r = Motley("train bad.toml --single-process", false, dir.path().string());
  EXPECT_NE(r.exit_code, 0);
  EXPECT_CONTAINS(r.output, "bad.toml");
  EXPECT_CONTAINS(r.output, "overlap_steps");
  EXPECT_CONTAINS(r.output, "must be less than inner_steps (2)");
  CliRun sim = Motley("simulate --inner-steps 2 --overlap-steps 2 --island-plan a.toml --island-plan b.toml",
                      false, dir.path().string());
  EXPECT_NE(sim.exit_code, 0);
  EXPECT_CONTAINS(sim.output, "--overlap-steps 2");
  CliRun fragments = Motley(
      "simulate --inner-steps 4 --fragments 2 --overlap-steps 2 --island-plan a.toml "
      "--island-plan b.toml",
      false, dir.path().string());
  EXPECT_NE(fragments.exit_code, 0);
  EXPECT_CONTAINS(fragments.output, "--fragments 2");
}

// The fixtures' fp64 job as 2 islands meeting every 4 steps in 2 streaming fragments (the embedding and
// layer 1, 3; layers 0, 2 with the norm and head), each fragment's round landing a step after it is sent.
std::string FragmentsJob(const std::string& dir, int64_t checkpoint_interval) {
  return Job(dir, 1.0, true) + "interval_steps = " + std::to_string(checkpoint_interval) +
         "\n[islands]\ncount = 2\ninner_steps = 4\noverlap_steps = 1\nfragments = 2\n";
}

// Streaming fragments across processes (#52 item 1): each fragment's round is lowered on its own and the
// ranks run it at its step of the round — fragment 0 at step 2, landing at 3; fragment 1 at 4, landing
// at 5; every fragment at once at the run's end — training the model of the same islands in one
// process (fp64, 1e-10), whatever the islands' plans; the simulator times the rounds they run.
TEST(IslandsOverlap, StreamedFragmentsAcrossProcessesTrainTheModelOfTheSameIslandsInOneProcess) {
  TempDir dir;
  dir.Write("cluster.toml", kCluster);
  dir.Write("model.toml", kModel);
  dir.Write("ref.toml", FragmentsJob(dir.Join("ref"), 0));
  dir.Write("whole.toml",
            Job(dir.Join("whole"), 1.0, true) +
                "interval_steps = 0\n[islands]\ncount = 2\ninner_steps = 4\noverlap_steps = 1\n");
  for (const std::string name : {"ref", "whole"}) {
    CliRun r = Motley("train " + name + ".toml --single-process", false, dir.path().string());
    ASSERT_EQ(r.exit_code, 0) << r.output;
  }
  const auto model = [&](const std::string& run) { return dir.Join(run + "/step-000005/model.safetensors"); };
  // Fragments change the training (each meets at its own step), so the comparisons below can fail.
  EXPECT_GT(MaxRelativeDifference(model("ref"), model("whole")), 1e-6);
  for (const IslandPlans& c : EveryShape()) {
    SCOPED_TRACE(c.name);
    const CliRun r = LaunchAgainstOneProcess(dir, c, FragmentsJob(dir.Join(c.name), 0));
    if (r.exit_code != 0) continue;
    // The outer momentum, every fragment's, as one process holds it.
    const double m = MaxMomentumDifference(dir.Join(c.name + "/step-000005/islands.safetensors"),
                                           dir.Join("ref/step-000005/islands.safetensors"));
    EXPECT_GE(m, 0);
    EXPECT_LT(m, 1e-10);
    std::vector<std::tuple<int64_t, int64_t, int64_t>> rounds;  // step, fragment, landed at (-1: at once)
    for (const nlohmann::json& j : OuterRoundEvents(dir.Join(c.name + ".jsonl"))) {
      rounds.emplace_back(j["step"].get<int64_t>(), j["fragment"].get<int64_t>(),
                          j.value("landed_at_step", int64_t{-1}));
      EXPECT_GT(j["bytes_sent"].get<double>(), 0);
    }
    EXPECT_EQ(rounds, (std::vector<std::tuple<int64_t, int64_t, int64_t>>{
                          {2, 0, 3}, {4, 1, 5}, {5, 0, -1}, {5, 1, -1}}));
    CliRun sim = Motley("simulate --json --inner-steps 4 --overlap-steps 1 --fragments 2" + PlanFlags(dir, c),
                        false, dir.path().string());
    ASSERT_EQ(sim.exit_code, 0) << sim.output;
    const nlohmann::json j = nlohmann::json::parse(sim.output);
    EXPECT_CONTAINS(r.output, "outer round: " + j["round_schedule_hash"].get<std::string>());
    EXPECT_EQ(j["fragments"].get<int64_t>(), 2);
  }
}

// A checkpoint of streamed fragments (every fragment meets at once there) holds each fragment's outer
// momentum; resumed across processes, in either checkpoint form, the run goes on as the run not stopped
// (fp64, 1e-12), and as one process resumed from it goes on (1e-10).
TEST(IslandsOverlap, ACheckpointOfStreamedFragmentsResumesAsTheRunNotStopped) {
  TempDir dir;
  dir.Write("cluster.toml", kCluster);
  dir.Write("model.toml", kModel);
  const std::string plans = " --island-plan " + dir.Write("p0.toml", DataParallelPlan("[0, 1]", 0)) +
                            " --island-plan " + dir.Write("p1.toml", DataParallelPlan("[2, 3]", 0));
  for (const std::string form : {"consolidated", "sharded"}) {
    SCOPED_TRACE(form);
    const auto job = [&](const std::string& name) {
      std::string text = FragmentsJob(dir.Join(name), 8);
      text.insert(text.find("[islands]"), "format = \"" + form + "\"\n");
      dir.Write(name + ".toml", text);
    };
    const std::string whole = "whole-" + form, again = "again-" + form, one = "one-" + form;
    for (const std::string& name : {whole, again, one}) job(name);
    // 12 steps: fragment 0 at 2, 6 and 10, fragment 1 at 4; both at 8 (a checkpoint) and at 12.
    CliRun r = Motley("train " + whole + ".toml --steps 12" + plans, false, dir.path().string());
    ASSERT_EQ(r.exit_code, 0) << r.output;
    const std::string step8 = dir.Join(whole + "/step-000008");
    r = Motley("train " + again + ".toml --steps 12 --resume " + step8 + plans, false, dir.path().string());
    ASSERT_EQ(r.exit_code, 0) << r.output;
    r = Motley("train " + one + ".toml --steps 12 --single-process --resume " + step8 + plans, false,
               dir.path().string());
    ASSERT_EQ(r.exit_code, 0) << r.output;
    const std::string end = "/step-000012/model.safetensors";
    const double d = MaxRelativeDifference(dir.Join(whole + end), dir.Join(again + end));
    const double in_one = MaxRelativeDifference(dir.Join(whole + end), dir.Join(one + end));
    std::cout << form << ": resumed against not stopped " << d << ", resumed in one process " << in_one
              << "\n";
    EXPECT_GE(d, 0);
    EXPECT_LT(d, 1e-12);
    EXPECT_GE(in_one, 0);
    EXPECT_LT(in_one, 1e-10);
  }
}

}  // namespace
