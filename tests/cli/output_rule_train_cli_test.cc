// The output rule (#48 item 2) where training writes: `checkpoint export` never removes an
// OUT.tmp it did not create, and a run folder's lock file is never opened through a link.
#include <filesystem>
#include <fstream>
#include <string>

#include <gtest/gtest.h>

#include "cli/cli_helpers.h"
#include "cli/training_fixtures.h"
#include "core/file_io.h"

namespace {

using namespace motley_test;

TEST(OutputRule, ExportKeepsAForeignTemporaryAndTheLockFileIsNeverALink) {
  TempDir dir;
  dir.Write("model.toml", kModel);
  dir.Write("cluster.toml", kCluster);
  std::string job = Job(dir.Join("run"), 1, true, "fp32");
  job.replace(job.find("steps = 5"), 9, "steps = 2");
  dir.Write("job.toml", job);
  CliRun r = Motley("train job.toml --single-process", false, dir.path().string());
  ASSERT_EQ(r.exit_code, 0) << r.output;

  fs::create_directories(dir.Join("out.tmp"));
  dir.Write("out.tmp/notes.txt", "someone's notes");
  r = Motley("checkpoint export run out", false, dir.path().string());
  EXPECT_NE(r.exit_code, 0);
  EXPECT_CONTAINS(r.output, "out.tmp: exists and this command did not create it");
  EXPECT_EQ(motley::ReadFileToString(dir.Join("out.tmp/notes.txt")).value(), "someone's notes");
  EXPECT_FALSE(fs::exists(dir.Join("out")));
  fs::remove_all(dir.Join("out.tmp"));
  r = Motley("checkpoint export run out", false, dir.path().string());
  EXPECT_EQ(r.exit_code, 0) << r.output;
  EXPECT_TRUE(fs::exists(dir.Join("out/model.safetensors")));

  // A lock file planted as a link to another file: refused, the file untouched.
  fs::create_directories(dir.Join("run2"));
  dir.Write("victim.txt", "precious");
  fs::create_symlink(dir.Join("victim.txt"), dir.Join("run2/.lock"));
  job.replace(job.find(dir.Join("run")), dir.Join("run").size(), dir.Join("run2"));
  dir.Write("job2.toml", job);
  r = Motley("train job2.toml --single-process", false, dir.path().string());
  EXPECT_NE(r.exit_code, 0);
  EXPECT_CONTAINS(r.output,
                  dir.Join("run2/.lock") + ": is a symbolic link, not motley's lock file; remove it");
  EXPECT_EQ(motley::ReadFileToString(dir.Join("victim.txt")).value(), "precious");
}

}  // namespace
