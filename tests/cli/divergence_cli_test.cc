// A diverged run (#48 item 1): a step whose loss is NaN on one rank is never applied, no checkpoint
// is written or pruned after it, and the run stops naming the step, the rank and the last good
// checkpoint — or, with [divergence] action = "rollback", goes back to that checkpoint and on with
// the learning rate lowered and the data that led there skipped. The same in one process.
#include <cmath>
#include <fstream>
#include <map>
#include <string>
#include <vector>

#include <gtest/gtest.h>
#include <nlohmann/json.hpp>

#include "cli/cli_helpers.h"
#include "cli/plan_cases.h"
#include "cli/training_fixtures.h"
#include "core/file_io.h"

namespace {

using namespace motley_test;

std::vector<nlohmann::json> Lines(const std::string& path) {
  std::vector<nlohmann::json> out;
  std::ifstream in(path);
  for (std::string line; std::getline(in, line);) out.push_back(nlohmann::json::parse(line));
  return out;
}

// A job of `steps` steps that keeps a checkpoint every `interval` steps, the newest `keep`.
std::string JobWithCheckpoints(const TempDir& dir, double clip, int steps, int interval, int keep,
                               const std::string& divergence = "") {
  std::string job = Job(dir.Join("run"), clip, true, "fp32");
  job.replace(job.find("steps = 5"), 9, "steps = " + std::to_string(steps));
  return job + "interval_steps = " + std::to_string(interval) + "\nkeep = " + std::to_string(keep) + "\n" +
         divergence;
}

std::string PlanFile(const TempDir& dir, const PlanCase& c) {
  return dir.Write(
      "plan.toml",
      "model = \"model.toml\"\ncluster = \"cluster.toml\"\nseq_len = 16\nprecision = \"fp32\"\n" +
          std::string(c.clip > 0 ? "" : "gradient_clipping = false\n") + c.body);
}

// Without clipping (the updates run before the step's norm is summed) and with it (the norm is
// summed first, so no rank updates): either way the run stops at step 4, says which rank's loss
// was NaN and where the last good checkpoint is, and keeps it — `keep = 2` would have pruned
// step 2's had a step-4 checkpoint been written.
TEST(Divergence, ADivergedRunStopsNamingTheStepTheRankAndTheLastGoodCheckpoint) {
  struct Case {
    const char* plan;
    int loss_rank;  // a rank that computes a loss: the pipeline's last stage
  };
  for (const Case& c : {Case{"pipeline2-gpipe", 1}, Case{"dp3-zero0-last-batch", 2}}) {
    SCOPED_TRACE(c.plan);
    TempDir dir;
    dir.Write("model.toml", kModel);
    dir.Write("cluster.toml", kCluster);
    const PlanCase& plan = PlanNamed(c.plan);
    dir.Write("job.toml", JobWithCheckpoints(dir, plan.clip, 6, 1, 2));
    PlanFile(dir, plan);
    const CliRun r = Motley("launch --nproc " + std::to_string(plan.ranks) + " -- " +
                                std::string(MOTLEY_BIN) + " train job.toml --plan plan.toml --diverge-rank " +
                                std::to_string(c.loss_rank) + " --diverge-at-step 4",
                            false, dir.path().string());
    EXPECT_EQ(r.exit_code, 1) << r.output;
    EXPECT_CONTAINS(r.output, "step 4: the loss is nan");
    EXPECT_CONTAINS(r.output, "(rank " + std::to_string(c.loss_rank) + "'s own loss was not finite)");
    EXPECT_CONTAINS(r.output, "no rank applied it and no checkpoint is written after it");
    EXPECT_CONTAINS(r.output, "the last good checkpoint is " + dir.Join("run/step-000003") + " (step 3)");
    EXPECT_CONTAINS(r.output, "[divergence] action = \"rollback\"");
    EXPECT_CONTAINS(r.output, "motley launch: failed: rank 0");  // the run's stop, not a rank to blame
    EXPECT_TRUE(fs::exists(dir.Join("run/step-000003")));
    EXPECT_TRUE(fs::exists(dir.Join("run/step-000002"))) << "a checkpoint after the divergence pruned it";
    EXPECT_FALSE(fs::exists(dir.Join("run/step-000004")));
    EXPECT_EQ(motley::ReadFileToString(dir.Join("run/latest")).value().substr(0, 11), "step-000003");
    bool said = false;
    for (const nlohmann::json& j : Lines(dir.Join("run/metrics.jsonl"))) {
      EXPECT_FALSE(j.contains("loss") && j.value("step", 0) == 4 && !j.contains("event")) << j.dump();
      if (j.value("event", "") == "diverged") {
        said = true;
        EXPECT_EQ(j["step"], 4);
        EXPECT_EQ(j["ranks"], nlohmann::json::array({c.loss_rank}));
        EXPECT_EQ(j["action"], "stop");
      }
    }
    EXPECT_TRUE(said) << "the metrics do not record the divergence";
    // The checkpoint it names resumes.
    EXPECT_EQ(Motley("launch --nproc " + std::to_string(plan.ranks) + " -- " + std::string(MOTLEY_BIN) +
                         " train job.toml --plan plan.toml --resume run/step-000003",
                     false, dir.path().string())
                  .exit_code,
              0);
  }
}

// [divergence] action = "rollback": the run goes back to step 2's checkpoint, replays steps 3-6
// at half the learning rate on the windows after the diverged step's, and ends; the final
// checkpoint carries the rollback's figures, so a resume goes on the same way.
TEST(Divergence, RollbackGoesBackToTheLastGoodCheckpointAndOnWithALowerLearningRate) {
  TempDir dir;
  dir.Write("model.toml", kModel);
  dir.Write("cluster.toml", kCluster);
  const PlanCase& plan = PlanNamed("dp2-zero2-uneven");
  dir.Write("job.toml", JobWithCheckpoints(dir, plan.clip, 6, 2, 3,
                                           "[divergence]\naction = \"rollback\"\nlr_factor = 0.5\n"));
  PlanFile(dir, plan);
  const CliRun r = Motley("launch --nproc 2 -- " + std::string(MOTLEY_BIN) +
                              " train job.toml --plan plan.toml --diverge-rank 0 --diverge-at-step 4",
                          false, dir.path().string());
  ASSERT_EQ(r.exit_code, 0) << r.output;
  EXPECT_CONTAINS(r.output, "step 4: the loss is nan");
  EXPECT_CONTAINS(r.output, "rolled back to " + dir.Join("run/step-000002") + " (step 2)");
  std::map<int, std::vector<nlohmann::json>> steps;  // each step's lines, in order (a replayed step twice)
  bool rolled = false;
  for (const nlohmann::json& j : Lines(dir.Join("run/metrics.jsonl"))) {
    if (j.value("event", "") == "rollback") {
      rolled = true;
      EXPECT_EQ(j["step"], 4);
      EXPECT_EQ(j["to_step"], 2);
      EXPECT_EQ(j["lr_factor"], 0.5);
      EXPECT_EQ(j["data_skip_steps"], 2);
      EXPECT_EQ(j["rollbacks"], 1);
    }
    if (!j.contains("event") && j.contains("loss")) steps[j["step"].get<int>()].push_back(j);
  }
  ASSERT_TRUE(rolled);
  ASSERT_EQ(steps[3].size(), 2u) << "step 3 ran before the divergence and again after the rollback";
  EXPECT_NEAR(steps[3][1]["lr"].get<double>(), 0.5 * steps[3][0]["lr"].get<double>(), 1e-15);
  EXPECT_NE(steps[3][1]["loss"].get<double>(), steps[3][0]["loss"].get<double>()) << "the same data again";
  for (int s = 4; s <= 6; ++s) {
    ASSERT_EQ(steps[s].size(), 1u) << s;
    EXPECT_TRUE(std::isfinite(steps[s][0]["loss"].get<double>())) << s;
  }
  const nlohmann::json state =
      nlohmann::json::parse(motley::ReadFileToString(dir.Join("run/step-000006/trainer_state.json")).value());
  EXPECT_EQ(state["lr_factor"], 0.5);
  EXPECT_EQ(state["data_skip_steps"], 2);
  EXPECT_EQ(state["rollbacks"], 1);
}

// One process: the same stop and the same rollback.
TEST(Divergence, OneProcessStopsOrRollsBackTheSameWay) {
  TempDir dir;
  dir.Write("model.toml", kModel);
  dir.Write("cluster.toml", kCluster);
  dir.Write("job.toml", JobWithCheckpoints(dir, 1, 5, 2, 1));
  CliRun r = Motley("train job.toml --single-process --diverge-rank 0 --diverge-at-step 3", false,
                    dir.path().string());
  EXPECT_EQ(r.exit_code, 1) << r.output;
  EXPECT_CONTAINS(r.output, "step 3: the loss is nan");
  EXPECT_CONTAINS(r.output, "the last good checkpoint is " + dir.Join("run/step-000002") + " (step 2)");
  EXPECT_FALSE(fs::exists(dir.Join("run/step-000004")));
  dir.Write("job.toml", JobWithCheckpoints(dir, 1, 5, 2, 1, "[divergence]\naction = \"rollback\"\n"));
  r = Motley("train job.toml --single-process --overwrite --diverge-rank 0 --diverge-at-step 3", false,
             dir.path().string());
  ASSERT_EQ(r.exit_code, 0) << r.output;
  EXPECT_CONTAINS(r.output, "rolled back to " + dir.Join("run/step-000002") + " (step 2)");
  EXPECT_CONTAINS(r.output, "the learning rate is now 0.5x");
  // Without a checkpoint to go back to, a rollback cannot happen: the run stops and says why.
  dir.Write("job.toml", JobWithCheckpoints(dir, 1, 5, 0, 1, "[divergence]\naction = \"rollback\"\n"));
  r = Motley("train job.toml --single-process --overwrite --diverge-rank 0 --diverge-at-step 3", false,
             dir.path().string());
  EXPECT_EQ(r.exit_code, 1) << r.output;
  EXPECT_CONTAINS(r.output, "there is no checkpoint of this run to go back to");
}

}  // namespace
