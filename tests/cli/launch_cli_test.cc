// `motley launch` and failure handling across ranks: a dead rank is named by every survivor and
// the run ends (no test here measures how fast: a hang meets ctest's timeout), with or without
// motley's launcher.
#include <gtest/gtest.h>
#include <chrono>

#include "cli/cli_helpers.h"

namespace {

using namespace motley_test;

TEST(LaunchCli, RanksTalkAndReportBandwidth) {
  CliRun run = Motley("launch --nproc 3 -- motley comm check --size-mb 1 --iterations 3");
  ASSERT_EQ(run.exit_code, 0) << run.output;
  for (int r = 0; r < 3; ++r)
    EXPECT_CONTAINS(run.output, "[rank " + std::to_string(r) + "] rank " + std::to_string(r) + "/3");
  EXPECT_CONTAINS(run.output, "collectives ok");
  EXPECT_CONTAINS(run.output, "Gloo on CPU");  // no GPU per rank here: --device auto takes the CPU
}

TEST(LaunchCli, AKilledRankStopsTheRunWithItsNameUnderTheLauncher) {
  // Without the watchdog this would run for 10^8 iterations (a hang: ctest's timeout fails it).
  CliRun run = Motley(
      "launch --nproc 3 -- motley comm check --size-mb 1 --iterations 100000000 --die-rank 1 --die-after 1");
  EXPECT_EQ(run.exit_code, 1) << run.output;
  EXPECT_CONTAINS(run.output, "motley launch: failed: rank 1 was killed by signal 9");
  // Each survivor names the dead rank itself.
  for (int r : {0, 2})
    EXPECT_TRUE(RankSaid(run.output, r, "1 stopped responding")) << "rank " << r << " did not name rank 1:\n"
                                                                 << run.output;
}

// #28: a rank that exits with an error (not a crash) is seen as failed at once — the others stop
// within seconds naming it and its error, not at a collective's timeout — and the launcher blames it.
TEST(LaunchCli, ARankFailingWithAnErrorStopsTheOthersWithinSecondsNamingIt) {
  const auto start = std::chrono::steady_clock::now();
  CliRun run = Motley(
      "launch --nproc 3 -- motley comm check --size-mb 1 --iterations 100000000 --die-rank 1 "
      "--die-after 1 --fault error");
  const double elapsed_s = std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
  EXPECT_EQ(run.exit_code, 1) << run.output;
  // Each survivor names it: from its watchdog, or from the collective the failed rank left.
  for (int r : {0, 2})
    EXPECT_TRUE(RankSaid(run.output, r, "rank 1 failed first: fault injection: rank 1 fails"))
        << "rank " << r << " did not name rank 1 and its error:\n"
        << run.output;
  EXPECT_CONTAINS(run.output, "motley launch: failed: rank 1 exited with code 1");
  EXPECT_LT(elapsed_s, 15) << run.output;  // started, ran a second, failed, and the others stopped
}

// A rank that hangs (stopped, its heartbeat too): the others name it, the launcher stops it after
// its grace and blames it — not a rank that exited because of it.
TEST(LaunchCli, AHungRankIsNamedByTheOthersAndBlamedByTheLauncher) {
  CliRun run = Motley(
      "launch --nproc 3 --stop-grace 2 -- motley comm check --size-mb 1 --iterations 100000000 "
      "--die-rank 2 --die-after 1 --fault stop");
  EXPECT_EQ(run.exit_code, 1) << run.output;
  EXPECT_CONTAINS(run.output, "rank 2 stopped responding");
  EXPECT_CONTAINS(run.output, "motley launch: failed: rank 2 was killed by signal 9");
}

TEST(LaunchCli, AKilledRankIsNamedWithoutTheLauncherToo) {
  // As srun or mpirun would start them: three independent processes with the rendezvous set.
  TempDir dir;
  const std::string port = std::to_string(20000 + ::getpid() % 20000);
  std::string cmd = "cd " + dir.path().string() + " && (";
  for (int r = 0; r < 3; ++r)
    cmd += "RANK=" + std::to_string(r) + " WORLD_SIZE=3 MASTER_ADDR=127.0.0.1 MASTER_PORT=" + port + " " +
           MOTLEY_BIN + " comm check --size-mb 1 --iterations 100000000 --die-rank 0 --die-after 1 > out" +
           std::to_string(r) + ".txt 2>&1 & ";
  cmd += "wait)";
  Shell(cmd);
  for (int r = 1; r < 3; ++r) {
    std::ifstream in(dir.Join("out" + std::to_string(r) + ".txt"));
    std::string out((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
    EXPECT_CONTAINS(out, "rank 0 (the rendezvous store");
  }
}

TEST(LaunchCli, RanksStopWhenTheirLauncherIsKilled) {
  // The launcher killed with -9 (it cannot pass anything on): its ranks must not train on.
  const std::string cmd = std::string(MOTLEY_BIN) +
                          " launch --nproc 2 -- sleep 300 > /dev/null 2>&1 & L=$!; "
                          "for i in $(seq 100); do K=$(pgrep -P $L | tr '\\n' ' '); "
                          "[ $(echo $K | wc -w) -ge 2 ] && break; sleep 0.1; done; "
                          "echo ranks: $K; kill -9 $L; sleep 3; "
                          "for k in $K; do if [ -e /proc/$k ] && ! grep -q ') Z' /proc/$k/stat; then "
                          "echo alive: $k; kill -9 $k; fi; done; echo checked";
  const std::string out = Shell(cmd).output;
  EXPECT_CONTAINS(out, "checked");
  EXPECT_EQ(out.find("ranks: \n"), std::string::npos) << "the ranks never started: " << out;
  EXPECT_EQ(out.find("alive:"), std::string::npos) << out;
}

TEST(LaunchCli, UsageErrors) {
  CliRun no_cmd = Motley("launch --nproc 2");
  EXPECT_EQ(no_cmd.exit_code, 2);
  EXPECT_CONTAINS(no_cmd.output, "give the command after --");
  CliRun neither = Motley("launch -- /bin/true");
  EXPECT_EQ(neither.exit_code, 2);
  EXPECT_CONTAINS(neither.output, "give --nproc N (ranks on this machine) or --hosts NAME:RANKS,...");
  CliRun hosts = Motley("launch --hosts node1:0 -- /bin/true");
  EXPECT_EQ(hosts.exit_code, 2);
  EXPECT_CONTAINS(hosts.output, "--hosts: \"node1:0\": the ranks on a host are a number from 1 to 1024");
  CliRun both = Motley("launch --nproc 2 --hosts a:1 -- /bin/true");
  EXPECT_EQ(both.exit_code, 2);
  // A remote start that fails is the rank's failure, named.
  CliRun remote = Motley("launch --hosts a:1,b:1 --remote '/nonexistent/remote {host}' -- /bin/true");
  EXPECT_EQ(remote.exit_code, 1);
  EXPECT_CONTAINS(remote.output, "cannot run /nonexistent/remote");
  CliRun missing = Motley("launch --nproc 2 -- /nonexistent/prog");
  EXPECT_EQ(missing.exit_code, 1);
  EXPECT_CONTAINS(missing.output, "cannot run /nonexistent/prog");
  CliRun alone = Shell("RANK=0 " + std::string(MOTLEY_BIN) + " comm check");
  EXPECT_EQ(alone.exit_code, 1);
  EXPECT_CONTAINS(alone.output, "RANK is set but WORLD_SIZE is not");
  CliRun one = Shell(std::string(MOTLEY_BIN) + " comm check --size-mb 0.1 --iterations 1");
  EXPECT_EQ(one.exit_code, 0) << one.output;
  EXPECT_CONTAINS(one.output, "rank 0/1");
  EXPECT_CONTAINS(one.output, "one rank: nothing crossed a link");
  CliRun typo = Shell(std::string(MOTLEY_BIN) + " comm check --device gpu");
  EXPECT_EQ(typo.exit_code, 1);
  EXPECT_CONTAINS(typo.output, "--device gpu: expected auto, cpu or cuda");
  // What cannot measure is refused (#48): no timed all-reduce, no payload, a fault that cannot fire.
  CliRun zero = Shell(std::string(MOTLEY_BIN) + " comm check --iterations 0");
  EXPECT_EQ(zero.exit_code, 2) << zero.output;
  EXPECT_CONTAINS(zero.output, "--iterations: must be between 1 and 1000000000, got 0");
  CliRun empty = Shell(std::string(MOTLEY_BIN) + " comm check --size-mb 0");
  EXPECT_EQ(empty.exit_code, 2) << empty.output;
  EXPECT_CONTAINS(empty.output, "--size-mb: must be between");
  CliRun nobody =
      Motley("launch --nproc 2 -- " + std::string(MOTLEY_BIN) + " comm check --size-mb 0.1 --die-rank 5");
  EXPECT_EQ(nobody.exit_code, 1) << nobody.output;
  EXPECT_CONTAINS(nobody.output, "--die-rank 5: no such rank — this launch has 2 (0..1)");
  CliRun never = Motley("launch --nproc 2 -- " + std::string(MOTLEY_BIN) +
                        " comm check --size-mb 0.1 --iterations 2 --die-rank 1 --die-after 3600");
  EXPECT_EQ(never.exit_code, 1) << never.output;
  EXPECT_CONTAINS(never.output, "--die-after 3600: the bandwidth test took");
  EXPECT_CONTAINS(never.output, "the fault never fired");
}

}  // namespace
