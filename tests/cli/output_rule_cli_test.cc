// One rule for every file a command writes (#48 item 2; core/file_io.h): each output flag against
// a private device node (it stays a device), a symbolic link (followed; it stays a link) and a
// folder (refused, naming it) — and what a command did not create is never removed.
#include <sys/stat.h>
#include <sys/sysmacros.h>

#include <filesystem>
#include <fstream>
#include <string>
#include <vector>

#include <gtest/gtest.h>

#include "cli/cli_helpers.h"
#include "core/file_io.h"

namespace {

using namespace motley_test;

bool IsCharDevice(const std::string& path) {
  struct stat st {};
  return ::lstat(path.c_str(), &st) == 0 && S_ISCHR(st.st_mode);
}

TEST(OutputRule, EveryOutputFlagWritesThroughADeviceFollowsALinkAndRefusesAFolder) {
  TempDir dir;
  const std::string plan = std::string(MOTLEY_SOURCE_DIR) + "/examples/plans/local-zorse.toml";
  struct Flag {
    const char* name;
    std::string command;  // OUT stands for the output path
  };
  const std::vector<Flag> flags = {
      {"plan -o",
       "plan --cluster local-emulated --model llama-1m --seq-len 128 --global-batch-tokens 4096 -o OUT"},
      {"simulate --trace", "simulate --plan " + plan + " --trace OUT"},
      {"report -o", "report --plan " + plan + " -o OUT"},
  };
  const bool can_mknod = ::mknod(dir.Join("probe").c_str(), S_IFCHR | 0666, makedev(1, 3)) == 0;
  for (const Flag& f : flags) {
    SCOPED_TRACE(f.name);
    auto run = [&](const std::string& out) {
      std::string cmd = f.command;
      cmd.replace(cmd.find("OUT"), 3, "'" + out + "'");
      return Motley(cmd, false, dir.path().string());
    };
    if (can_mknod) {
      const std::string device = dir.Join("null-device");
      ASSERT_EQ(::mknod(device.c_str(), S_IFCHR | 0666, makedev(1, 3)), 0);
      const CliRun r = run(device);
      EXPECT_EQ(r.exit_code, 0) << r.output;
      EXPECT_TRUE(IsCharDevice(device)) << "the device node was replaced by a file";
      fs::remove(device);
    }
    // A link: what it names is written, the link stays.
    const std::string target = dir.Join("written-here"), link = dir.Join("link");
    fs::create_symlink(target, link);
    CliRun r = run(link);
    EXPECT_EQ(r.exit_code, 0) << r.output;
    EXPECT_TRUE(fs::is_symlink(fs::symlink_status(link)));
    EXPECT_GT(fs::file_size(target), 0u);
    fs::remove(link);
    fs::remove(target);
    // A folder: refused, with its contents as they were.
    const std::string folder = dir.Join("a-folder");
    fs::create_directories(folder);
    dir.Write("a-folder/keep.txt", "kept");
    r = run(folder);
    EXPECT_NE(r.exit_code, 0);
    EXPECT_CONTAINS(r.output, folder + ": is a directory");
    EXPECT_TRUE(fs::exists(dir.Join("a-folder/keep.txt")));
    fs::remove_all(folder);
    // Someone else's temporary beside the output is left alone.
    const std::string out = dir.Join("out.file");
    dir.Write("out.file.tmp", "not motley's");
    r = run(out);
    EXPECT_EQ(r.exit_code, 0) << r.output;
    EXPECT_EQ(motley::ReadFileToString(dir.Join("out.file.tmp")).value(), "not motley's");
    fs::remove(out);
    fs::remove(dir.Join("out.file.tmp"));
  }
  if (!can_mknod) GTEST_SKIP() << "mknod needs root: the device node cases were not run";
}

// The readers' side (#48 item 4): `--profile /dev/zero` or `--metrics /dev/zero` is one error naming
// it, at once — not a read until the host runs out of memory.
TEST(InputRule, ADeviceGivenAsAnInputIsOneErrorAtOnce) {
  const std::string plan = std::string(MOTLEY_SOURCE_DIR) + "/examples/plans/local-zorse.toml";
  CliRun profile = Motley("simulate --plan " + plan + " --profile /dev/zero");
  EXPECT_EQ(profile.exit_code, 1) << profile.output;
  EXPECT_CONTAINS(profile.output, "/dev/zero: is not a regular file");
  CliRun metrics =
      Motley("calibrate --profile /dev/null --plan " + plan + " --metrics /dev/zero -o /dev/null");
  EXPECT_EQ(metrics.exit_code, 1) << metrics.output;
  EXPECT_CONTAINS(metrics.output, "is not a regular file");
}

}  // namespace
