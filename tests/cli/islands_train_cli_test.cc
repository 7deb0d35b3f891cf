// Islands across processes (#52): the islands' ranks, one island after another, each island running
// its own plan on its share of every step's batch — started by `motley train` itself or by `motley
// launch` — end with the model of the same islands trained in one process (fp64, 1e-10), whatever
// family the islands' plans are of.
#include <cmath>
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
namespace fs = std::filesystem;

// How often `what` occurs in `text`.
int Count(const std::string& text, const std::string& what) {
  int n = 0;
  for (size_t at = text.find(what); at != std::string::npos; at = text.find(what, at + what.size())) ++n;
  return n;
}

// The fixtures' fp64 job (5 steps, 12 sequences a step) as 2 islands meeting every 2 steps.
std::string IslandsJob(const std::string& dir) {
  return Job(dir, 1.0, true) + "interval_steps = 0\n[islands]\ncount = 2\ninner_steps = 2\n";
}

std::string DataParallelPlan(const std::string& devices, const std::string& microbatches, int zero = 2) {
  return PlanHeader() + "schedule = \"gpipe\"\nzero_stage = " + std::to_string(zero) +
         "\n[[groups]]\nministages = [[0, 2], [2, 4]]\ndevices = " + devices +
         "\nmicrobatch_size = " + microbatches + "\nnum_microbatches = [2, 2]\n";
}

std::string TensorParallelPlan(const std::string& devices) {
  return PlanHeader() +
         "schedule = \"gpipe\"\nzero_stage = 1\n[[groups]]\nministages = [[0, 4]]\ntp_degree = 2\n"
         "devices = " +
         devices + "\nmicrobatch_size = [3, 3]\nnum_microbatches = [2, 2]\n";
}

std::string PipelinePlan(int first_device, int microbatch, int microbatches) {
  std::string plan = PlanHeader() + "schedule = \"1f1b\"\nzero_stage = 2\n";
  for (int stage = 0; stage < 2; ++stage)
    plan += "[[groups]]\nministages = [[" + std::to_string(2 * stage) + ", " + std::to_string(2 * stage + 2) +
            "]]\ndevices = [" + std::to_string(first_device + stage) + "]\nmicrobatch_size = [" +
            std::to_string(microbatch) + "]\nnum_microbatches = [" + std::to_string(microbatches) + "]\n";
  return plan;
}

TEST(IslandsTrain, LaunchedIslandsTrainTheModelOfIslandsInOneProcess) {
  TempDir dir;
  dir.Write("cluster.toml", kCluster);
  dir.Write("model.toml", kModel);
  dir.Write("ref.toml", IslandsJob(dir.Join("ref")));
  CliRun ref = Motley("train ref.toml --single-process", false, dir.path().string());
  ASSERT_EQ(ref.exit_code, 0) << ref.output;
  struct Case {
    std::string name, island0, island1;
    bool launcher = true;  // started by motley launch, else by motley train itself
  };
  // Data parallelism (each island its own microbatches), a two-stage pipeline, a tensor-parallel team.
  for (const Case& c :
       {Case{"dp", DataParallelPlan("[0, 1]", "[2, 1]"), DataParallelPlan("[2, 3]", "[1, 2]"), false},
        // ZeRO-0's replicas split the model evenly for the round; ZeRO-3's shards need no gather after it.
        Case{"dp-zero0", DataParallelPlan("[0, 1]", "[2, 1]", 0), DataParallelPlan("[2, 3]", "[1, 2]", 0)},
        Case{"dp-zero3", DataParallelPlan("[0, 1]", "[2, 1]", 3), DataParallelPlan("[2, 3]", "[1, 2]", 3)},
        Case{"pipeline", PipelinePlan(0, 3, 2), PipelinePlan(2, 2, 3)},
        Case{"tp", TensorParallelPlan("[0, 1]"), TensorParallelPlan("[2, 3]")}}) {
    SCOPED_TRACE(c.name);
    dir.Write(c.name + ".toml", IslandsJob(dir.Join(c.name)));
    const std::string p0 = dir.Write(c.name + "-0.plan.toml", c.island0),
                      p1 = dir.Write(c.name + "-1.plan.toml", c.island1);
    const std::string train = "train " + c.name + ".toml --island-plan " + p0 + " --island-plan " + p1 +
                              " --metrics " + c.name + ".jsonl";
    CliRun r = Motley(c.launcher ? "launch --nproc 4 -- " + std::string(MOTLEY_BIN) + " " + train : train,
                      false, dir.path().string());
    ASSERT_EQ(r.exit_code, 0) << r.output;
    const double d = MaxRelativeDifference(dir.Join(c.name + "/step-000005/model.safetensors"),
                                           dir.Join("ref/step-000005/model.safetensors"));
    std::cout << c.name << ": relative difference of the parameters " << d << "\n";
    EXPECT_GE(d, 0);
    EXPECT_LT(d, 1e-10);
    // The checkpoint holds the outer momentum, gathered from the ranks' pieces, as one process holds it.
    const double m = MaxMomentumDifference(dir.Join(c.name + "/step-000005/islands.safetensors"),
                                           dir.Join("ref/step-000005/islands.safetensors"));
    EXPECT_GE(m, 0);
    EXPECT_LT(m, 1e-10);
    // Each outer round is in the metrics (after steps 2, 4 and the last, 5): what this rank sent.
    std::ifstream metrics(dir.Join(c.name + ".jsonl"));
    std::vector<int64_t> rounds;
    for (std::string line; std::getline(metrics, line);) {
      const nlohmann::json j = nlohmann::json::parse(line);
      if (j.value("event", "") != "outer_round") continue;
      rounds.push_back(j["step"].get<int64_t>());
      EXPECT_GT(j["bytes_sent"].get<double>(), 0);
      EXPECT_EQ(j["compression_error"].get<double>(), 0);
    }
    EXPECT_EQ(rounds, (std::vector<int64_t>{2, 4, 5}));
  }
  // Islands of unequal batches (8 and 4 sequences a step): each weighted by the tokens it trained on,
  // across processes as in one process (motley train --single-process with the same island plans).
  {
    const std::string p0 = dir.Write("uneven-0.plan.toml", DataParallelPlan("[0, 1]", "[2, 2]")),
                      p1 = dir.Write("uneven-1.plan.toml", DataParallelPlan("[2, 3]", "[1, 1]"));
    const std::string plans = " --island-plan " + p0 + " --island-plan " + p1;
    dir.Write("uneven.toml", IslandsJob(dir.Join("uneven")));
    dir.Write("uneven-ref.toml", IslandsJob(dir.Join("uneven-ref")));
    CliRun one = Motley("train uneven-ref.toml --single-process" + plans, false, dir.path().string());
    ASSERT_EQ(one.exit_code, 0) << one.output;
    CliRun ranks = Motley("train uneven.toml" + plans, false, dir.path().string());
    ASSERT_EQ(ranks.exit_code, 0) << ranks.output;
    // The outer round the ranks ran is the one `motley simulate` times.
    CliRun simulated = Motley("simulate --json" + plans, false, dir.path().string());
    ASSERT_EQ(simulated.exit_code, 0) << simulated.output;
    const std::string round = nlohmann::json::parse(simulated.output)["round_schedule_hash"];
    EXPECT_CONTAINS(ranks.output, "outer round: " + round);
    const double d = MaxRelativeDifference(dir.Join("uneven/step-000005/model.safetensors"),
                                           dir.Join("uneven-ref/step-000005/model.safetensors"));
    std::cout << "uneven: relative difference of the parameters " << d << "\n";
    EXPECT_GE(d, 0);
    EXPECT_LT(d, 1e-10);
  }
  // Islands of their own inner steps (inner_steps_per_island = [2, 1]: island 1 takes one step a round,
  // and none in the last, short one) across processes as in one process; each round in the metrics.
  {
    const std::string p0 = dir.Write("each-0.plan.toml", DataParallelPlan("[0, 1]", "[2, 1]")),
                      p1 = dir.Write("each-1.plan.toml", DataParallelPlan("[2, 3]", "[1, 2]"));
    const std::string plans = " --island-plan " + p0 + " --island-plan " + p1;
    const std::string each = "inner_steps_per_island = [2, 1]\n";
    dir.Write("each.toml", IslandsJob(dir.Join("each")) + each);
    dir.Write("each-ref.toml", IslandsJob(dir.Join("each-ref")) + each);
    CliRun one = Motley("train each-ref.toml --single-process" + plans, false, dir.path().string());
    ASSERT_EQ(one.exit_code, 0) << one.output;
    CliRun ranks = Motley("train each.toml --metrics each.jsonl" + plans, false, dir.path().string());
    ASSERT_EQ(ranks.exit_code, 0) << ranks.output;
    const double d = MaxRelativeDifference(dir.Join("each/step-000005/model.safetensors"),
                                           dir.Join("each-ref/step-000005/model.safetensors"));
    std::cout << "inner steps per island: relative difference of the parameters " << d << "\n";
    EXPECT_GE(d, 0);
    EXPECT_LT(d, 1e-10);
    // Not the run where island 1 keeps pace: its fewer steps changed the model.
    EXPECT_GT(MaxRelativeDifference(dir.Join("each/step-000005/model.safetensors"),
                                    dir.Join("dp/step-000005/model.safetensors")),
              1e-6);
    std::ifstream metrics(dir.Join("each.jsonl"));
    std::vector<int64_t> rounds;
    for (std::string line; std::getline(metrics, line);) {
      const nlohmann::json j = nlohmann::json::parse(line);
      if (j.value("event", "") == "outer_round") rounds.push_back(j["step"].get<int64_t>());
    }
    EXPECT_EQ(rounds, (std::vector<int64_t>{2, 4, 5}));
  }
}

// A plan on one device: both ministages, 6 sequences a step.
std::string OneDevicePlan(int device) {
  return PlanHeader() + "schedule = \"gpipe\"\nzero_stage = 0\n[[groups]]\nministages = [[0, 2], [2, 4]]\n" +
         "devices = [" + std::to_string(device) + "]\nmicrobatch_size = [3]\nnum_microbatches = [2]\n";
}

// Islands of unlike shapes — other rank counts, stages, ZeRO stages, tensor-parallel widths — exchange
// the model in whole fragments through a lead an island, and train the model of the same islands in one
// process (fp64, 1e-10), tied or not.
TEST(IslandsTrain, IslandsOfUnlikeShapesTrainTheModelOfIslandsInOneProcess) {
  TempDir dir;
  dir.Write("cluster.toml", kCluster);
  dir.Write("model.toml", kModel);
  dir.Write("ref.toml", IslandsJob(dir.Join("ref")));
  CliRun ref = Motley("train ref.toml --single-process", false, dir.path().string());
  ASSERT_EQ(ref.exit_code, 0) << ref.output;
  struct Case {
    std::string name, island0, island1;
    int ranks = 4;
    bool tied = false;
  };
  for (const Case& c :
       {Case{"dp-pipeline", DataParallelPlan("[0, 1]", "[2, 1]"), PipelinePlan(2, 3, 2)},
        Case{"tp-one", TensorParallelPlan("[0, 1]"), OneDevicePlan(2), 3},
        Case{"zero0-zero3", DataParallelPlan("[0, 1]", "[2, 1]", 0), DataParallelPlan("[2, 3]", "[1, 2]", 3)},
        Case{"pipeline-tp-tied", PipelinePlan(0, 3, 2), TensorParallelPlan("[2, 3]"), 4, true}}) {
    SCOPED_TRACE(c.name);
    // A tied model's run in a folder of its own, beside its own reference.
    const fs::path work = c.tied ? dir.path() / "tied" : dir.path();
    const auto write = [&](const std::string& name, const std::string& text) {
      std::ofstream(work / name) << text;
      return (work / name).string();
    };
    if (c.tied) {
      fs::create_directories(work);
      write("cluster.toml", kCluster);
      write("model.toml", std::string(kModel) + "tie_embeddings = true\n");
      write("ref.toml", IslandsJob((work / "ref").string()));
      CliRun r = Motley("train ref.toml --single-process", false, work.string());
      ASSERT_EQ(r.exit_code, 0) << r.output;
    }
    write(c.name + ".toml", IslandsJob((work / c.name).string()));
    const std::string p0 = write(c.name + "-0.plan.toml", c.island0),
                      p1 = write(c.name + "-1.plan.toml", c.island1);
    CliRun r = Motley(fmt::format("launch --nproc {} -- {} train {}.toml --island-plan {} --island-plan {}",
                                  c.ranks, MOTLEY_BIN, c.name, p0, p1),
                      false, work.string());
    ASSERT_EQ(r.exit_code, 0) << r.output;
    const double d = MaxRelativeDifference((work / c.name / "step-000005/model.safetensors").string(),
                                           (work / "ref/step-000005/model.safetensors").string());
    std::cout << c.name << ": relative difference of the parameters " << d << "\n";
    EXPECT_GE(d, 0);
    EXPECT_LT(d, 1e-10);
    // The round the ranks ran is the one `motley simulate` times: its fragments' exchanges.
    CliRun simulated =
        Motley("simulate --json --island-plan " + p0 + " --island-plan " + p1, false, work.string());
    ASSERT_EQ(simulated.exit_code, 0) << simulated.output;
    const nlohmann::json sim = nlohmann::json::parse(simulated.output);
    EXPECT_CONTAINS(r.output, "outer round: " + sim["round_schedule_hash"].get<std::string>());
    EXPECT_GT(sim["round_s"].get<double>(), 0) << sim.dump();
    const double m = MaxMomentumDifference((work / c.name / "step-000005/islands.safetensors").string(),
                                           (work / "ref/step-000005/islands.safetensors").string());
    EXPECT_GE(m, 0);
    EXPECT_LT(m, 1e-10);
  }
  // Compressed to int8, the fragments cross as an eighth of their fp64 bytes (and a scale a parameter),
  // the compression's error in the metrics.
  const auto sent = [&](const std::string& name, const std::string& compression) {
    dir.Write(name + ".toml", IslandsJob(dir.Join(name)) + "compression = \"" + compression + "\"\n");
    CliRun r = Motley(fmt::format("train {}.toml --metrics {}.jsonl --island-plan dp-pipeline-0.plan.toml "
                                  "--island-plan dp-pipeline-1.plan.toml",
                                  name, name),
                      false, dir.path().string());
    EXPECT_EQ(r.exit_code, 0) << r.output;
    std::ifstream metrics(dir.Join(name + ".jsonl"));
    std::pair<double, double> out{0, 0};  // bytes sent, the largest compression error
    for (std::string line; std::getline(metrics, line);) {
      const nlohmann::json j = nlohmann::json::parse(line);
      if (j.value("event", "") != "outer_round") continue;
      out.first += j["bytes_sent"].get<double>();
      out.second = std::max(out.second, j["compression_error"].get<double>());
    }
    return out;
  };
  const auto [full, no_error] = sent("whole-none", "none");
  const auto [int8, error] = sent("whole-int8", "int8");
  EXPECT_GT(full, 0);
  EXPECT_EQ(no_error, 0);
  EXPECT_NEAR(int8 / full, 1.0 / 8, 0.01) << int8 << " " << full;
  EXPECT_GT(error, 0);
  EXPECT_LT(error, 0.05);
  // int4: two values a byte and an fp32 scale a block of 128 (4.25 bits a value), its error larger.
  const auto [int4, int4_error] = sent("whole-int4", "int4");
  EXPECT_NEAR(int4 / full, 4.25 / 64, 0.01) << int4 << " " << full;
  EXPECT_GT(int4_error, error);
  EXPECT_LT(int4_error, 0.15);
}

// The islands' ranks checkpoint the outer state — island 0's ranks gather the outer momentum pieces into
// whole parameters, as one process's islands hold them — and resume from it under any layout: the same
// islands, or 4 islands of one device, across processes as in one process (fp64, 1e-10).
TEST(IslandsTrain, LaunchedIslandsCheckpointTheOuterStateAndResumeUnderAnyLayout) {
  TempDir dir;
  dir.Write("cluster.toml", kCluster);
  dir.Write("model.toml", kModel);
  auto job = [&](const std::string& name, int islands) {
    return dir.Write(name + ".toml", Job(dir.Join(name), 1.0, true) +
                                         "interval_steps = 2\n[islands]\ncount = " + std::to_string(islands) +
                                         "\ninner_steps = 2\n");
  };
  const std::string two = " --island-plan " + dir.Write("p0.toml", DataParallelPlan("[0, 1]", "[2, 1]")) +
                          " --island-plan " + dir.Write("p1.toml", DataParallelPlan("[2, 3]", "[1, 2]"));
  std::string four;
  for (int d = 0; d < 4; ++d)
    four += " --island-plan " +
            dir.Write("q" + std::to_string(d) + ".toml",
                      PlanHeader() +
                          "schedule = \"gpipe\"\nzero_stage = 2\n[[groups]]\nministages = [[0, 4]]\n"
                          "devices = [" +
                          std::to_string(d) + "]\nmicrobatch_size = [3]\nnum_microbatches = [1]\n");
  const std::string unlike = " --island-plan " + dir.Write("u0.toml", DataParallelPlan("[0, 1]", "[2, 1]")) +
                             " --island-plan " + dir.Write("u1.toml", PipelinePlan(2, 3, 2));
  job("ranks", 2);
  job("one", 2);
  CliRun ranks_run = Motley("train ranks.toml" + two, false, dir.path().string());
  ASSERT_EQ(ranks_run.exit_code, 0) << ranks_run.output;
  CliRun one = Motley("train one.toml --single-process" + two, false, dir.path().string());
  ASSERT_EQ(one.exit_code, 0) << one.output;
  // The outer momentum at step 4, as the ranks wrote it and as one process did.
  const std::string at4 = "/step-000004/islands.safetensors";
  const double m = MaxMomentumDifference(dir.Join("ranks" + at4), dir.Join("one" + at4));
  EXPECT_GE(m, 0);
  EXPECT_LT(m, 1e-10);
  // Resumed from the ranks' checkpoint: as 2 islands, as 2 of unlike shapes and as 4, across processes
  // as in one process.
  for (const auto& [name, islands, plans] : {std::tuple<std::string, int, std::string>{"again2", 2, two},
                                             {"unlike", 2, unlike},
                                             {"again4", 4, four}}) {
    SCOPED_TRACE(name);
    job(name, islands);
    job(name + "-one", islands);
    const std::string resume = " --resume " + dir.Join("ranks/step-000004");
    CliRun across = Motley("train " + name + ".toml" + resume + plans, false, dir.path().string());
    ASSERT_EQ(across.exit_code, 0) << across.output;
    CliRun in_one =
        Motley("train " + name + "-one.toml --single-process" + resume + plans, false, dir.path().string());
    ASSERT_EQ(in_one.exit_code, 0) << in_one.output;
    const double d = MaxRelativeDifference(dir.Join(name + "/step-000005/model.safetensors"),
                                           dir.Join(name + "-one/step-000005/model.safetensors"));
    std::cout << name << ": relative difference of the parameters " << d << "\n";
    EXPECT_GE(d, 0);
    EXPECT_LT(d, 1e-10);
  }
}

// Every island's inner state is checkpointed (its AdamW moments differ from the others'): the islands
// after the first write theirs beside the run's checkpoint, so a run resumed from a checkpoint goes on
// as the run not stopped — in either checkpoint form; sharded, nothing is gathered (every rank writes
// its own part, island by island, its pieces carrying the outer momentum). One process resumes either.
TEST(IslandsTrain, AResumedRunOfIslandsGoesOnAsTheRunNotStoppedInEitherForm) {
  TempDir dir;
  dir.Write("cluster.toml", kCluster);
  dir.Write("model.toml", kModel);
  const std::string two = " --island-plan " + dir.Write("p0.toml", DataParallelPlan("[0, 1]", "[2, 1]")) +
                          " --island-plan " + dir.Write("p1.toml", DataParallelPlan("[2, 3]", "[1, 2]"));
  for (const std::string form : {"consolidated", "sharded"}) {
    SCOPED_TRACE(form);
    auto job = [&](const std::string& name) {
      return dir.Write(name + ".toml", Job(dir.Join(name), 1.0, true) + "interval_steps = 2\nformat = \"" +
                                           form + "\"\n[islands]\ncount = 2\ninner_steps = 2\n");
    };
    const std::string whole = "whole-" + form, again = "again-" + form, one = "one-" + form;
    job(whole);
    job(again);
    job(one);
    CliRun r = Motley("train " + whole + ".toml" + two, false, dir.path().string());
    ASSERT_EQ(r.exit_code, 0) << r.output;
    EXPECT_TRUE(fs::exists(dir.Join(whole + "/islands/island-1/step-000004/trainer_state.json")));
    r = Motley("train " + again + ".toml --resume " + dir.Join(whole + "/step-000004") + two, false,
               dir.path().string());
    ASSERT_EQ(r.exit_code, 0) << r.output;
    const std::string step4 = dir.Join(whole + "/step-000004");
    if (form == "sharded") {
      // Nothing gathered: the islands file holds its metadata only (the model's momentum is ~80 kB).
      EXPECT_LT(fs::file_size(step4 + "/islands.safetensors"), 2048);
      int pieces = 0;
      for (const auto& [name, values] : ReadSafetensors(step4 + "/rank-00001.safetensors").tensors)
        pieces += name.ends_with("#outer_momentum");
      EXPECT_GT(pieces, 0);
    } else {
      // The islands' moments differ: resumed with island 0's, island 1 would go on otherwise.
      EXPECT_GT(
          MaxRelativeDifference(dir.Join(whole + "/step-000004/optimizer.safetensors"),
                                dir.Join(whole + "/islands/island-1/step-000004/optimizer.safetensors")),
          1e-6);
    }
    r = Motley("train " + one + ".toml --single-process --resume " + step4 + two, false, dir.path().string());
    ASSERT_EQ(r.exit_code, 0) << r.output;
    const std::string end = "/step-000005/model.safetensors";
    const double d = MaxRelativeDifference(dir.Join(whole + end), dir.Join(again + end));
    const double in_one = MaxRelativeDifference(dir.Join(whole + end), dir.Join(one + end));
    std::cout << form << ": resumed against not stopped, relative difference of the parameters " << d
              << " (resumed in one process: " << in_one << ")\n";
    EXPECT_GE(d, 0);
    EXPECT_LT(d, 1e-12);
    EXPECT_GE(in_one, 0);
    EXPECT_LT(in_one, 1e-10);
  }
}

// The elastic tests' islands in `dir`: the fixtures' cluster and model, 2 data-parallel islands of 2
// ranks; returns the run's arguments (8 steps, the island plans).
std::string ElasticIslands(const TempDir& dir) {
  dir.Write("cluster.toml", kCluster);
  dir.Write("model.toml", kModel);
  return " --steps 8 --island-plan " + dir.Write("p0.toml", DataParallelPlan("[0, 1]", "[2, 1]")) +
         " --island-plan " + dir.Write("p1.toml", DataParallelPlan("[2, 3]", "[1, 2]"));
}

// An elastic test's job `name` (checkpoints in its own folder): the islands meet every 2 steps, a
// checkpoint every round.
void WriteElasticJob(const TempDir& dir, const std::string& name) {
  dir.Write(name + ".toml",
            Job(dir.Join(name), 1.0, true) + "interval_steps = 2\n[islands]\ncount = 2\ninner_steps = 2\n");
}

// An elastic run's launches by hand (`launches`, each after the last, of job `name` — written already —
// with `islands`): the relative difference of their model at `at` (e.g. "/step-000008") to the
// elastic run's (job `elastic`); negative when a launch failed.
double ByHandAgainst(const TempDir& dir, const std::string& name, const std::vector<std::string>& launches,
                     const std::string& islands, const std::string& elastic, const std::string& at) {
  for (const std::string& launch : launches) {
    CliRun r =
        Motley("train " + name + ".toml --metrics-append" + launch + islands, false, dir.path().string());
    if (r.exit_code != 0) {
      ADD_FAILURE() << launch << "\n" << r.output;
      return -1;
    }
  }
  const std::string model = at + "/model.safetensors";
  const double d = MaxRelativeDifference(dir.Join(elastic + model), dir.Join(name + model));
  std::cout << elastic << " against by hand: relative difference of the parameters " << d << "\n";
  return d;
}

// The launches by hand of an elastic run that lost an island (job `name` — written already — with
// `islands`): every island to step `lost_at` (the last round the lost island took part in), island
// `left` alone from there to `rejoin`, every island from there; the relative difference of their model
// at `at` to the elastic run's (job `elastic`); negative when a launch failed.
double ByHandThroughALoss(const TempDir& dir, const std::string& name, const std::string& islands,
                          const std::string& elastic, int left, int64_t lost_at, int64_t rejoin,
                          const std::string& at = "/step-000008") {
  const auto checkpoint = [&](int64_t step) {
    return dir.Join(name + "/" + fmt::format("step-{:06d}", step));
  };
  return ByHandAgainst(
      dir, name,
      {fmt::format(" --stop-at-step {}", lost_at),
       fmt::format(" --islands-present {} --stop-at-step {} --resume {}", left, rejoin, checkpoint(lost_at)),
       " --resume " + checkpoint(rejoin)},
      islands, elastic, at);
}

// An elastic run's metrics: each island lost (live, or where the others resumed and when it was to join),
// left out at a meeting, joining again, and each outer round.
std::vector<std::string> ElasticEvents(const std::string& metrics_path) {
  std::ifstream metrics(metrics_path);
  std::vector<std::string> events;
  for (std::string line; std::getline(metrics, line);) {
    const nlohmann::json j = nlohmann::json::parse(line);
    const std::string e = j.value("event", "");
    if (e == "island_lost" && j.value("live", false))
      events.push_back(fmt::format("lost {} live", j["island"].get<int>()));
    if (e == "island_lost" && !j.value("live", false))
      events.push_back(fmt::format("lost {} at {} rejoin {}", j["island"].get<int>(),
                                   j["resume_step"].get<int64_t>(), j["rejoin_step"].get<int64_t>()));
    if (e == "islands_left_out")
      events.push_back(
          fmt::format("left out at {} rejoin {}", j["step"].get<int64_t>(), j["rejoin_step"].get<int64_t>()));
    if (e == "island_rejoined") events.push_back(fmt::format("rejoined at {}", j["step"].get<int64_t>()));
    if (e == "outer_round") events.push_back(fmt::format("round {}", j["step"].get<int64_t>()));
  }
  return events;
}

// The first island lost mid-run (#52 item 5): island 0's rank 1 dies in step 3 and its rank 0 falls with
// it — the rendezvous store with neither: the supervisor hosts it. Island 1 goes on in the same processes:
// at the next meeting its first rank takes the lead and leaves island 0 out, and island 1 writes the run's
// checkpoints and metrics from there (keeping its own inner state); it stops at the round's end its rejoin
// steps give with a checkpoint, and both islands resume from it: the lost island joins again from the
// latest outer state. The launches end where the same launches made by hand end (island 1 alone from the
// checkpoint of step 2, its own moments; fp64, 1e-10), and not where the run without the loss does.
TEST(IslandsTrain, ALostIslandIsLeftOutAndJoinsAgainFromTheLatestOuterState) {
  TempDir dir;
  const auto job = [&](const std::string& name) { WriteElasticJob(dir, name); };
  const std::string two = ElasticIslands(dir);
  job("elastic");
  CliRun elastic = Motley(
      "train elastic.toml --max-restarts 1 --island-rejoin-steps 4 --die-rank 1 --die-at-step 3 --metrics "
      "elastic.jsonl" +
          two,
      false, dir.path().string());
  ASSERT_EQ(elastic.exit_code, 0) << elastic.output;
  EXPECT_CONTAINS(elastic.output,
                  "rank 1 (island 0) failed: island 0 is lost — 1 of 1: island 1 goes on without stopping");
  EXPECT_CONTAINS(elastic.output, "ranks 0, 1 stop, the others go on");
  EXPECT_CONTAINS(elastic.output, "rank 1 is lost (its launcher saw rank 1 end: it was killed by signal 9");
  EXPECT_CONTAINS(elastic.output, "rank 0 is lost (its launcher saw rank 1 end");
  EXPECT_EQ(elastic.output.find("no heartbeat"), std::string::npos) << elastic.output;
  EXPECT_CONTAINS(elastic.output, "island 0 joins again at step 6, from the outer state of its checkpoint");
  EXPECT_EQ(Count(elastic.output, "motley launch: 4 ranks"), 2) << elastic.output;  // no restart of island 1
  job("by-hand");
  const double d = ByHandThroughALoss(dir, "by-hand", two, "elastic", 1, 2, 6);
  EXPECT_GE(d, 0);
  EXPECT_LT(d, 1e-10);
  const std::string end = "/step-000008/model.safetensors";
  job("whole");
  CliRun whole = Motley("train whole.toml" + two, false, dir.path().string());
  ASSERT_EQ(whole.exit_code, 0) << whole.output;
  EXPECT_GT(MaxRelativeDifference(dir.Join("elastic" + end), dir.Join("whole" + end)), 1e-6);
  // The metrics: the loss, island 1 leaving island 0 out, each round among the islands present (rounds 4
  // and 6: island 1's alone), the rejoin.
  const std::vector<std::string> events = ElasticEvents(dir.Join("elastic.jsonl"));
  EXPECT_EQ(events, (std::vector<std::string>{"round 2", "lost 0 live", "left out at 4 rejoin 6", "round 4",
                                              "round 6", "rejoined at 6", "round 8"}));
  // Every step has its line once: island 0's until it was lost (step 2), island 1's from there (the
  // steps it trained before it took the lead, kept until it did), every island's after the rejoin.
  std::vector<int64_t> steps;
  std::ifstream metrics(dir.Join("elastic.jsonl"));
  for (std::string line; std::getline(metrics, line);)
    if (const nlohmann::json j = nlohmann::json::parse(line); !j.contains("event") && j.contains("loss"))
      steps.push_back(j["step"].get<int64_t>());
  EXPECT_EQ(steps, (std::vector<int64_t>{1, 2, 3, 4, 5, 6, 7, 8}));
  // Islands of unlike shapes (2 ranks and 1): the one-rank island is lost (launch rank 2) and joins again,
  // as the same launches by hand. Island 0 goes on without stopping (the island lost is not the one
  // whose first rank hosts the rendezvous): it is not launched again until island 1 joins.
  const std::string unlike = " --steps 6 --island-plan " + dir.Join("p0.toml") + " --island-plan " +
                             dir.Write("one.toml", OneDevicePlan(2));
  job("unlike");
  CliRun lost = Motley("train unlike.toml --max-restarts 1 --die-rank 2 --die-at-step 3" + unlike, false,
                       dir.path().string());
  ASSERT_EQ(lost.exit_code, 0) << lost.output;
  EXPECT_CONTAINS(lost.output,
                  "rank 2 (island 1) failed: island 1 is lost — 1 of 1: island 0 goes on without "
                  "stopping");
  EXPECT_CONTAINS(lost.output, "island 1 joins again at step 4, from the outer state of its checkpoint");
  EXPECT_EQ(Count(lost.output, "motley launch: 3 ranks"), 2) << lost.output;  // no restart of island 0
  job("unlike-by-hand");
  const double u = ByHandThroughALoss(dir, "unlike-by-hand", unlike, "unlike", 0, 2, 4, "/step-000006");
  EXPECT_GE(u, 0);
  EXPECT_LT(u, 1e-10);
}

// A loss the islands left cannot go on from in the same processes: island 1's rank 3 dies writing its
// share of the sharded checkpoint of step 4, where island 0 waits for it (the islands' checkpoint ends
// together). Island 1 falls live, island 0's wait fails, and the supervisor launches island 0 alone again
// from the newest checkpoint (step 2), to the round's end where island 1 joins again — the same launches
// made by hand end in the same model (fp64, 1e-10).
TEST(IslandsTrain, ALossTheOthersCannotGoOnFromRestartsTheIslandsLeftFromTheNewestCheckpoint) {
  TempDir dir;
  const std::string two = ElasticIslands(dir);
  const auto job = [&](const std::string& name) {
    dir.Write(name + ".toml",
              Job(dir.Join(name), 1.0, true) +
                  "interval_steps = 2\nformat = \"sharded\"\n[islands]\ncount = 2\ninner_steps = 2\n");
  };
  job("restarted");
  CliRun restarted = Motley(
      "train restarted.toml --max-restarts 2 --die-rank 3 --die-at-step 4 --die-in-checkpoint --metrics "
      "restarted.jsonl" +
          two,
      false, dir.path().string());
  ASSERT_EQ(restarted.exit_code, 0) << restarted.output;
  EXPECT_CONTAINS(restarted.output, "rank 3 (island 1) failed: island 1 is lost — 1 of 2");
  EXPECT_CONTAINS(
      restarted.output,
      "restart 2 of 2: island 0 goes on from the checkpoint of step 2; island 1 joins again at step 4");
  EXPECT_EQ(Count(restarted.output, "motley launch: 4 ranks"), 2) << restarted.output;
  EXPECT_EQ(Count(restarted.output, "motley launch: 2 ranks"), 1) << restarted.output;
  job("by-hand");
  const double d = ByHandThroughALoss(dir, "by-hand", two, "restarted", 0, 2, 4);
  EXPECT_GE(d, 0);
  EXPECT_LT(d, 1e-10);
  const std::vector<std::string> events = ElasticEvents(dir.Join("restarted.jsonl"));
  EXPECT_EQ(events, (std::vector<std::string>{"round 2", "round 4", "lost 1 live", "lost 1 at 2 rejoin 4",
                                              "round 4", "rejoined at 4", "round 6", "round 8"}));
}

// Live islands: a two-rank island lost (its rank 2 killed mid-step; its rank 3 falls with it) is left
// out at the next meeting while island 0 goes on in the same processes, and joins again at the round's
// end its rejoin steps give — the model of the same islands launched by hand (stopped at the last round
// island 1 took part in, island 0 alone from there, every island from the rejoin), fp64.
TEST(IslandsTrain, ALostIslandIsLeftOutWhileTheOthersGoOnWithoutStopping) {
  TempDir dir;
  const auto job = [&](const std::string& name) { WriteElasticJob(dir, name); };
  const std::string two = ElasticIslands(dir);
  job("live");
  CliRun live = Motley(
      "train live.toml --max-restarts 1 --island-rejoin-steps 4 --die-rank 2 --die-at-step 3 --metrics "
      "live.jsonl" +
          two,
      false, dir.path().string());
  ASSERT_EQ(live.exit_code, 0) << live.output;
  EXPECT_CONTAINS(live.output, "ranks 2, 3 stop, the others go on");
  // The island supervisor reports the fallen ranks for them: island 0 counts them lost at once (a
  // killed rank says nothing; before, island 0 waited out the 15 s heartbeat timeout for it).
  EXPECT_CONTAINS(live.output, "rank 2 is lost (its launcher saw rank 2 end: it was killed by signal 9");
  EXPECT_CONTAINS(live.output, "rank 3 is lost (its launcher saw rank 2 end");
  EXPECT_EQ(live.output.find("no heartbeat"), std::string::npos) << live.output;
  EXPECT_CONTAINS(live.output, "island 1 joins again at step 6, from the outer state of its checkpoint");
  EXPECT_EQ(Count(live.output, "motley launch: 4 ranks"), 2) << live.output;
  job("by-hand");
  const double d = ByHandThroughALoss(dir, "by-hand", two, "live", 0, 2, 6);
  EXPECT_GE(d, 0);
  EXPECT_LT(d, 1e-10);
  const std::vector<std::string> events = ElasticEvents(dir.Join("live.jsonl"));
  EXPECT_EQ(events, (std::vector<std::string>{"round 2", "lost 1 live", "left out at 4 rejoin 6", "round 4",
                                              "round 6", "rejoined at 6", "round 8"}));
}

}  // namespace
