// Launching across hosts through one agent a host (#50), on this machine: `--remote "sh -c"` stands in
// for ssh, so every host is this one (the namespace hosts run the same in multi_host_cli_test.cc). An
// agent starts its host's ranks with their global ranks and reports each one's end; a rank that
// fails on one host stops every host's ranks and is named with its host; a host whose agent is
// gone is named and its ranks counted lost; no rank outlives a launcher killed with SIGKILL; `motley
// train --hosts` needs every node's host.
#include <gtest/gtest.h>

#include <chrono>
#include <string>

#include "cli/cli_helpers.h"

namespace {

using namespace motley_test;

double SecondsSince(std::chrono::steady_clock::time_point start) {
  return std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
}

TEST(HostLaunchCli, AnAgentStartsItsHostsRanksAndReportsEachEnd) {
  CliRun run = Motley(
      "agent --nproc 2 --rank-offset 2 --world-size 4 --master-addr 10.0.0.1 --master-port 1234 -- sh -c "
      "'echo is $RANK of $WORLD_SIZE, local $LOCAL_RANK of $LOCAL_WORLD_SIZE, at $MASTER_ADDR:$MASTER_PORT; "
      "exit $RANK'");
  EXPECT_EQ(run.exit_code, 1) << run.output;
  EXPECT_CONTAINS(run.output, "[rank 2] is 2 of 4, local 0 of 2, at 10.0.0.1:1234");
  EXPECT_CONTAINS(run.output, "[rank 3] is 3 of 4, local 1 of 2, at 10.0.0.1:1234");
  EXPECT_CONTAINS(run.output, "motley-agent: rank 2 status 512");  // exit code 2, as waitpid gives it
  EXPECT_CONTAINS(run.output, "motley-agent: rank 3 status 768");
  EXPECT_EQ(run.output.find("motley launch"), std::string::npos) << "an agent speaks only in reports";

  // Told to stop (or its launcher gone: stdin closed), it stops its ranks at once.
  const std::string agent = std::string(MOTLEY_BIN) +
                            " agent --stop-on-stdin --nproc 2 --rank-offset 0 --world-size 2 "
                            "--master-addr 127.0.0.1 --master-port 1234 -- sleep 60";
  for (const char* input : {"(sleep 1; echo stop) | ", "true | "}) {
    const auto start = std::chrono::steady_clock::now();
    CliRun stopped = Shell(std::string(input) + agent);
    EXPECT_LT(SecondsSince(start), 10) << input;
    EXPECT_CONTAINS(stopped.output, "motley-agent: rank 0 status 15");  // SIGTERM
    EXPECT_CONTAINS(stopped.output, "motley-agent: rank 1 status 15");
  }
  // Without --stop-on-stdin (srun and mpirun give most tasks no stdin) a closed stdin stops nothing.
  CliRun kept = Shell(std::string(MOTLEY_BIN) +
                      " agent --nproc 1 --rank-offset 0 --world-size 1 --master-addr 127.0.0.1 "
                      "--master-port 1234 -- sh -c 'sleep 1' < /dev/null");
  EXPECT_EQ(kept.exit_code, 0) << kept.output;
  EXPECT_CONTAINS(kept.output, "motley-agent: rank 0 status 0");
  // Neither told where its ranks sit nor started by a launcher: one error saying both ways.
  CliRun lost = Shell(
      "env -u RANK -u WORLD_SIZE -u SLURM_PROCID -u SLURM_NTASKS -u OMPI_COMM_WORLD_RANK "
      "-u OMPI_COMM_WORLD_SIZE " +
      std::string(MOTLEY_BIN) + " agent --nproc 2 -- true");
  EXPECT_NE(lost.exit_code, 0) << lost.output;
  EXPECT_CONTAINS(lost.output,
                  "give --rank-offset, --world-size, --master-addr and --master-port, or start it "
                  "as one task a host under srun or mpirun");
  // Under srun, one task a host: the task's rank places the host's ranks.
  CliRun task =
      Shell("env SLURM_PROCID=1 SLURM_NTASKS=2 SLURM_LOCALID=0 MASTER_ADDR=10.0.0.9 MASTER_PORT=2345 " +
            std::string(MOTLEY_BIN) +
            " agent --nproc 2 -- sh -c 'echo is $RANK of $WORLD_SIZE at "
            "$MASTER_ADDR:$MASTER_PORT'");
  EXPECT_EQ(task.exit_code, 0) << task.output;
  EXPECT_CONTAINS(task.output, "[rank 2] is 2 of 4 at 10.0.0.9:2345");
  EXPECT_CONTAINS(task.output, "[rank 3] is 3 of 4 at 10.0.0.9:2345");
}

// Real ranks (collectives over Gloo) on two "hosts": rank 3, on the second, fails with an error;
// every rank on every host stops within seconds, each survivor naming it, the launcher naming its host.
TEST(HostLaunchCli, AFailedRankOnOneHostStopsEveryHostNamingIt) {
  const auto start = std::chrono::steady_clock::now();
  CliRun run = Motley(
      "launch --hosts first:2,second:2 --remote 'sh -c' --master-addr 127.0.0.1 --stop-grace 2 -- motley "
      "comm "
      "check --size-mb 1 --iterations 100000000 --die-rank 3 --die-after 1 --fault error");
  EXPECT_EQ(run.exit_code, 1) << run.output;
  EXPECT_CONTAINS(run.output, "on 2 hosts (first:2,second:2)");
  EXPECT_CONTAINS(run.output, "motley launch: failed: rank 3 on host second exited with code 1");
  for (int r : {0, 1, 2})
    EXPECT_TRUE(RankSaid(run.output, r, "rank 3 failed first")) << "rank " << r << ":\n" << run.output;
  EXPECT_LT(SecondsSince(start), 15) << run.output;
}

TEST(HostLaunchCli, AHostWhoseAgentIsGoneIsNamedAndItsRanksCountedLost) {
  // Rank 3 kills its own agent (the host "disappears"): its ranks end with it (the parent-death
  // signal), the other host's are stopped, and the lost host is blamed.
  const auto start = std::chrono::steady_clock::now();
  CliRun run = Motley(
      "launch --hosts first:2,second:2 --remote 'sh -c' --stop-grace 1 -- sh -c "
      "'if [ $RANK = 3 ]; then sleep 1; kill -9 $PPID; fi; exec sleep 6173'");
  EXPECT_EQ(run.exit_code, 1) << run.output;
  EXPECT_CONTAINS(run.output, "motley launch: host second is gone (its agent was killed by signal 9");
  EXPECT_CONTAINS(run.output, "before rank(s) 2, 3 ended");
  EXPECT_CONTAINS(run.output, "motley launch: failed: rank 2 on host second was lost with its host");
  EXPECT_LT(SecondsSince(start), 15) << run.output;
  Shell("sleep 1");
  EXPECT_NE(Shell("pgrep -fx 'sleep 6173'").exit_code, 0) << "a rank outlived its host's agent";
}

TEST(HostLaunchCli, NoRankOnAnyHostOutlivesALauncherKilledWithSigkill) {
  const std::string cmd =
      std::string(MOTLEY_BIN) +
      " launch --hosts first:1,second:2 --remote 'sh -c' -- sleep 6174 > /dev/null 2>&1 & "
      "L=$!; for i in $(seq 100); do [ $(pgrep -fx 'sleep 6174' | wc -l) -ge 3 ] && break; "
      "sleep 0.1; done; echo ranks: $(pgrep -fx 'sleep 6174' | wc -l); kill -9 $L; sleep 3; "
      "echo alive: $(pgrep -fx 'sleep 6174' | wc -l); pkill -9 -fx 'sleep 6174'; echo checked";
  const std::string out = Shell(cmd).output;
  EXPECT_CONTAINS(out, "ranks: 3");
  EXPECT_CONTAINS(out, "alive: 0");
  EXPECT_CONTAINS(out, "checked");
}

// `motley train JOB --hosts` on a cluster whose nodes name no host: one error naming the node and the
// fix, before any rank starts.
TEST(HostLaunchCli, TrainAcrossHostsNeedsEveryNodesHost) {
  TempDir dir;
  CliRun r = Motley("train default --plan " + std::string(MOTLEY_SOURCE_DIR) +
                        "/examples/plans/local-even-dp.toml --hosts --steps 1",
                    false, dir.path().string());
  EXPECT_NE(r.exit_code, 0) << r.output;
  EXPECT_CONTAINS(r.output, "--hosts: node 'fast' of cluster local-emulated names no host");
  EXPECT_CONTAINS(r.output, "give each [[nodes]] a host = ");
  EXPECT_EQ(r.output.find("[rank"), std::string::npos) << "a rank started:\n" << r.output;
}

}  // namespace
