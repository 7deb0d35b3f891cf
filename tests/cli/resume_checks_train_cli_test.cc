// A resume refuses what eval and export refuse (#48 item 5): a checkpoint whose config.json
// describes another model than the job's — here the same shape with another rotary base, which
// the weights' shapes cannot tell — is one error in a planned run as in one process.
#include <string>

#include <gtest/gtest.h>

#include "cli/cli_helpers.h"
#include "cli/plan_cases.h"
#include "cli/training_fixtures.h"

namespace {

using namespace motley_test;

TEST(ResumeChecks, APlannedRunRefusesACheckpointOfAnotherModelAsOneProcessDoes) {
  TempDir dir;
  dir.Write("model.toml", kModel);
  dir.Write("cluster.toml", kCluster);
  std::string job = Job(dir.Join("run"), 1, true, "fp32");
  job.replace(job.find("steps = 5"), 9, "steps = 3");
  dir.Write("job.toml", job);
  CliRun r = Motley("train job.toml --single-process --steps 2", false, dir.path().string());
  ASSERT_EQ(r.exit_code, 0) << r.output;
  dir.Write("other-model.toml", std::string(kModel) + "rope_theta = 500000.0\n");
  std::string other = job;
  other.replace(other.find("model = \"model.toml\""), 20, "model = \"other-model.toml\"");
  other.replace(other.find(dir.Join("run")), dir.Join("run").size(), dir.Join("run2"));
  dir.Write("other.toml", other);
  const PlanCase& plan = PlanNamed("dp3-zero0-last-batch");
  std::string text =
      "model = \"other-model.toml\"\ncluster = \"cluster.toml\"\nseq_len = 16\nprecision = \"fp32\"\n";
  dir.Write("plan.toml", text + plan.body);
  const std::string resume = " --resume " + dir.Join("run/step-000002");
  r = Motley("train other.toml --single-process" + resume, false, dir.path().string());
  EXPECT_EQ(r.exit_code, 1) << r.output;
  EXPECT_CONTAINS(r.output, "the checkpoint's model (config.json) differs from the job's model");
  r = Motley("launch --nproc 3 -- " + std::string(MOTLEY_BIN) + " train other.toml --plan plan.toml" + resume,
             false, dir.path().string());
  EXPECT_NE(r.exit_code, 0) << r.output;
  EXPECT_CONTAINS(r.output, "the checkpoint's model (config.json) differs from the job's model");
}

}  // namespace
