// Several hosts for real (#50): two network namespaces on one bridge (scripts/test-hosts.sh), each a
// host with its own address and a token-bucket-shaped link, and `motley launch --hosts` starting
// ranks on them through `ip netns exec` (scripts/test-hosts.sh exec). A pipeline whose stages sit on
// different hosts trains the model one process trains (fp64, 1e-10) over Gloo between the hosts' addresses —
// also when the launcher numbers the hosts the other way round (ranks find their devices by host and local
// rank) — a checkpoint written on one host layout resumes under the other, `motley profile --links` measures
// the shaped link between the hosts — and under Open MPI's mpirun (its remote agent entering the namespaces)
// and Slurm's srun (a slurmctld and a slurmd per host, scripts/test-slurm.sh; ranks as Slurm's tasks, and one
// `motley agent` a host as Slurm's task starting that host's ranks); a rank on a host the plan puts
// no device on stops before any step, naming where it runs and where the plan expected it. A rank that
// fails on one host stops every host's ranks (one agent a host); no rank outlives a launcher killed
// with SIGKILL. Skipped, saying why, where namespaces cannot be made (not root).
#include <unistd.h>

#include <chrono>
#include <cstdlib>
#include <iostream>
#include <string>

#include <gtest/gtest.h>
#include <nlohmann/json.hpp>

#include "cli/cli_helpers.h"
#include "cli/plan_cases.h"
#include "cli/training_fixtures.h"
#include "core/file_io.h"

namespace {

using namespace motley_test;

const std::string kHosts = std::string(MOTLEY_SOURCE_DIR) + "/scripts/test-hosts.sh";
const std::string kSlurm = std::string(MOTLEY_SOURCE_DIR) + "/scripts/test-slurm.sh";
constexpr char kPrefix[] = "mhtest";

// The hosts, made for the test and taken down after it (also when it fails).
class TestHosts {
 public:
  TestHosts() {
    if (::geteuid() != 0) {
      why_not_ = "not root: network namespaces need root";
      return;
    }
    CliRun up = Shell(kHosts + " up 2 --bandwidth 1gbit --rate " + kPrefix + "1=200mbit --prefix " + kPrefix);
    if (up.exit_code != 0) why_not_ = "scripts/test-hosts.sh up failed:\n" + up.output;
  }
  ~TestHosts() {
    Shell(kSlurm + " down --prefix " + kPrefix);
    Shell(kHosts + " down --prefix " + kPrefix);
  }
  const std::string& why_not() const { return why_not_; }

 private:
  std::string why_not_;
};

// Two nodes of two CPU devices, each on its own host.
std::string Cluster(const std::string& host0, const std::string& host1) {
  std::string out = std::string("name = \"two-hosts\"\n") + kCpuType;
  for (const auto& [name, host] : {std::pair<std::string, std::string>{"first", host0}, {"second", host1}})
    out += "[[nodes]]\nname = \"" + name +
           "\"\ndevice = \"cpu\"\ncount = 2\ninterconnect = \"pcie\"\n"
           "intra_bandwidth = \"10GB/s\"\nnic_bandwidth = \"1Gbps\"\nhost = \"" +
           host + "\"\n";
  return out;
}

std::string Launch(const std::string& hosts, const std::string& name, const std::string& plan,
                   const std::string& extra = "", const std::string& train_extra = "") {
  return "launch --hosts " + hosts + " --remote '" + kHosts + " exec --prefix " + kPrefix + " {host}' " +
         extra + " -- " + MOTLEY_BIN + " train " + name + ".toml --plan " + plan + " --metrics " + name +
         ".jsonl " + train_extra;
}

TEST(MultiHost, APipelineAcrossTwoHostsTrainsAsOneProcessUnderMotleyLaunchMpirunAndSrun) {
  TestHosts hosts;
  if (!hosts.why_not().empty()) GTEST_SKIP() << hosts.why_not();
  TempDir dir;
  dir.Write("cluster.toml", Cluster("10.77.0.10", "10.77.0.11"));
  dir.Write("model.toml", kModel);
  const PlanCase& c =
      PlanNamed("pipeline2x2-1f1b-round-robin");  // stage 0 on the first host, stage 1 on the second
  const std::string plan = dir.Write("plan.toml", PlanHeader() + c.body);
  dir.Write("ref.toml", Job(dir.Join("ref"), c.clip, c.checkpointing));
  CliRun ref = Motley("train ref.toml --single-process --metrics ref.jsonl", false, dir.path().string());
  ASSERT_EQ(ref.exit_code, 0) << ref.output;
  // The run `name` ended where one process did: parameters and AdamW moments within fp64's tolerance.
  auto expect_as_one_process = [&](const std::string& name, const std::string& step = "step-000005") {
    const double d = MaxRelativeDifference(dir.Join(name + "/" + step + "/model.safetensors"),
                                           dir.Join("ref/" + step + "/model.safetensors"));
    const double m = MaxRelativeDifference(dir.Join(name + "/" + step + "/optimizer.safetensors"),
                                           dir.Join("ref/" + step + "/optimizer.safetensors"));
    std::cout << name << ": relative difference of the parameters " << d << ", of the moments " << m << "\n";
    EXPECT_GE(d, 0);
    EXPECT_LT(d, kFp64Tolerance);
    EXPECT_LT(m, kFp64Tolerance);
  };

  for (const char* order : {"10.77.0.10:2,10.77.0.11:2", "10.77.0.11:2,10.77.0.10:2"}) {
    SCOPED_TRACE(order);
    const std::string name = std::string("run") + (order[9] == '0' ? "-in-order" : "-reversed");
    dir.Write(name + ".toml", Job(dir.Join(name), c.clip, c.checkpointing));
    CliRun r = Motley(Launch(order, name, plan), false, dir.path().string());
    ASSERT_EQ(r.exit_code, 0) << r.output;
    EXPECT_CONTAINS(r.output, "on 2 hosts");
    expect_as_one_process(name);
  }

  // The in-order run's checkpoint resumes with the hosts the other way round (each rank now on
  // the other host, its part read from the shared folder) and ends step 7 where one process does.
  CliRun ref7 = Motley("train ref.toml --single-process --steps 7 --resume ref --metrics ref.jsonl", false,
                       dir.path().string());
  ASSERT_EQ(ref7.exit_code, 0) << ref7.output;
  CliRun resumed = Motley(Launch("10.77.0.11:2,10.77.0.10:2", "run-in-order", plan, "",
                                 "--steps 7 --resume " + dir.Join("run-in-order")),
                          false, dir.path().string());
  ASSERT_EQ(resumed.exit_code, 0) << resumed.output;
  expect_as_one_process("run-in-order", "step-000007");

  // Open MPI's mpirun, started on the first host, its remote agent entering the other: the store
  // runs on MASTER_ADDR's host whichever rank mpirun put there.
  if (Shell("command -v mpirun").exit_code != 0) {
    ADD_FAILURE() << "mpirun is not installed: scripts/setup.sh installs Debian's openmpi-bin";
  } else {
    dir.Write("mpi.toml", Job(dir.Join("mpi"), c.clip, c.checkpointing));
    CliRun r =
        Shell("cd '" + dir.path().string() + "' && ip netns exec " + kPrefix +
              "0 mpirun --allow-run-as-root "
              "--host 10.77.0.11:2,10.77.0.10:2 --mca plm_rsh_agent '" +
              kHosts + " exec --prefix " + kPrefix +
              "' --mca oob_tcp_if_include eth0 --mca btl_tcp_if_include eth0 -x MASTER_ADDR=10.77.0.11 "
              "-x MASTER_PORT=" +
              std::to_string(20000 + ::getpid() % 20000) + " " + MOTLEY_BIN + " train mpi.toml --plan " +
              plan + " --metrics mpi.jsonl");
    ASSERT_EQ(r.exit_code, 0) << r.output;
    EXPECT_CONTAINS(r.output, "on 4 ranks");
    expect_as_one_process("mpi");
  }

  // Slurm: slurmctld and a slurmd per host (scripts/test-slurm.sh), srun on the first host.
  CliRun slurm = Shell(kSlurm + " up 2 --prefix " + kPrefix);
  if (slurm.exit_code != 0) {
    ADD_FAILURE() << "no Slurm cluster on the test hosts (scripts/setup.sh installs slurm-wlm and munge):\n"
                  << slurm.output;
  } else {
    dir.Write("slurm.toml", Job(dir.Join("slurm"), c.clip, c.checkpointing));
    auto srun = [&](int port_offset, const std::string& tasks) {
      return "cd '" + dir.path().string() + "' && ip netns exec " + kPrefix +
             "0 env SLURM_CONF=/tmp/motley-slurm-" + kPrefix +
             "/slurm.conf MASTER_PORT=" + std::to_string(20000 + (::getpid() + port_offset) % 20000) +
             " srun -N2 --ntasks-per-node=" + tasks + " " + MOTLEY_BIN;
    };
    CliRun r = Shell(srun(7, "2") + " train slurm.toml --plan " + plan + " --metrics slurm.jsonl");
    // One agent a host as Slurm's task on it: each starts its host's two ranks.
    dir.Write("agents.toml", Job(dir.Join("agents"), c.clip, c.checkpointing));
    CliRun agents = Shell(srun(11, "1") + " agent --nproc 2 -- " + MOTLEY_BIN + " train agents.toml --plan " +
                          plan + " --metrics agents.jsonl");
    Shell(kSlurm + " down --prefix " + kPrefix);
    ASSERT_EQ(r.exit_code, 0) << r.output;
    EXPECT_CONTAINS(r.output, "on 4 ranks");
    expect_as_one_process("slurm");
    ASSERT_EQ(agents.exit_code, 0) << agents.output;
    EXPECT_CONTAINS(agents.output, "motley-agent: rank 3 status 0");
    expect_as_one_process("agents");
  }

  // `motley profile --links` across the hosts measures the shaped link between them (200 Mbit/s,
  // the slower host's; the veth pair unshaped carries gigabits): at most 10% above it, and on a busy
  // host at least half of it (179.9 Mbit/s measured while the suite ran beside another).
  CliRun links =
      Motley("launch --hosts 10.77.0.10:2,10.77.0.11:2 --remote '" + kHosts + " exec --prefix " + kPrefix +
                 " {host}' -- " + MOTLEY_BIN +
                 " profile --cluster cluster.toml --model model.toml --seq-len 16 --links -o links.json",
             false, dir.path().string());
  ASSERT_EQ(links.exit_code, 0) << links.output;
  bool measured = false;
  const nlohmann::json profile =
      nlohmann::json::parse(motley::ReadFileToString(dir.Join("links.json")).value());
  for (const auto& l : profile["links"])
    if (l["between"][0] != l["between"][1]) {
      const double mbit_s = l["bandwidth_bytes_per_s"].get<double>() * 8 / 1e6;
      std::cout << "measured between the hosts: " << mbit_s << " Mbit/s (shaped to 200)\n";
      EXPECT_LE(mbit_s, 220);
      EXPECT_GE(mbit_s, 100);
      measured = true;
    }
  EXPECT_TRUE(measured) << "no link between the hosts in the profile:\n" << profile.dump(1);

  // The plan expects its second stage on a host nobody started: the ranks on 10.77.0.11 say so and
  // stop before any step.
  dir.Write("cluster.toml", Cluster("10.77.0.10", "10.77.0.99"));
  dir.Write("wrong.toml", Job(dir.Join("wrong"), c.clip, c.checkpointing));
  CliRun wrong = Motley(Launch("10.77.0.10:2,10.77.0.11:2", "wrong", plan, "--stop-grace 2"), false,
                        dir.path().string());
  EXPECT_NE(wrong.exit_code, 0);
  EXPECT_CONTAINS(wrong.output, "rank 2 (local rank 0 of 2) runs on");
  EXPECT_CONTAINS(wrong.output, "(10.77.0.11)");
  EXPECT_CONTAINS(wrong.output,
                  "but the plan puts no device on this host: it expects its ranks on 10.77.0.10 (node "
                  "'first'), 10.77.0.99 (node 'second')");
  motley::Result<std::string> read = motley::ReadFileToString(dir.Join("wrong.jsonl"));
  const std::string metrics = read.ok() ? *read : "";
  EXPECT_EQ(metrics.find("\"step\":"), std::string::npos) << "a step ran:\n" << metrics;
}

// Across namespace hosts, through one agent a host: rank 3 (on the second host) fails with an
// error; every rank on both hosts stops within seconds, the survivors naming it and the launcher
// naming it with its host. Then the launcher is killed with SIGKILL: no rank on either host runs on.
TEST(MultiHost, AFailedRankStopsEveryHostAndNoRankOutlivesTheLauncher) {
  TestHosts hosts;
  if (!hosts.why_not().empty()) GTEST_SKIP() << hosts.why_not();
  const std::string remote = " --remote '" + kHosts + " exec --prefix " + kPrefix + " {host}' ";
  const auto start = std::chrono::steady_clock::now();
  CliRun run = Motley("launch --hosts 10.77.0.10:2,10.77.0.11:2" + remote +
                      "--stop-grace 2 -- motley comm check --size-mb 1 --iterations 100000000 --die-rank 3 "
                      "--die-after 1 --fault error");
  const double elapsed_s = std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
  EXPECT_EQ(run.exit_code, 1) << run.output;
  EXPECT_CONTAINS(run.output, "motley launch: failed: rank 3 on host 10.77.0.11 exited with code 1");
  for (int r : {0, 1, 2})
    EXPECT_TRUE(RankSaid(run.output, r, "rank 3 failed first")) << "rank " << r << ":\n" << run.output;
  EXPECT_LT(elapsed_s, 13) << run.output;  // up in ~2 s, failed after 1 s, every host stopped within 10 s

  const std::string cmd =
      std::string(MOTLEY_BIN) + " launch --hosts 10.77.0.10:1,10.77.0.11:2" + remote +
      "-- sleep 6175 > /dev/null 2>&1 & L=$!; for i in $(seq 100); do "
      "[ $(pgrep -fx 'sleep 6175' | wc -l) -ge 3 ] && break; sleep 0.1; done; "
      "echo ranks: $(pgrep -fx 'sleep 6175' | wc -l); kill -9 $L; sleep 3; "
      "echo alive: $(pgrep -fx 'sleep 6175' | wc -l); pkill -9 -fx 'sleep 6175'; echo checked";
  const std::string out = Shell(cmd).output;
  EXPECT_CONTAINS(out, "ranks: 3");
  EXPECT_CONTAINS(out, "alive: 0");
  EXPECT_CONTAINS(out, "checked");
}

// `motley train JOB --hosts` (#50 item 4): nodes a and b on the first host, c on the second; the
// second host disappears after step 12. The supervisor, launching through one agent a host, names
// it, plans around node c, resumes on the first host from step 10 and finishes — with the
// parameters of a run that switched to that plan at step 10 (fp64).
TEST(MultiHost, TrainAcrossHostsPlansAroundALostNodeAndFinishesOnTheSurvivors) {
  TestHosts hosts;
  if (!hosts.why_not().empty()) GTEST_SKIP() << hosts.why_not();
  TempDir dir;
  dir.Write("model.toml", kModel);
  std::string cluster = std::string("name = \"three-nodes-two-hosts\"\n") + kCpuType;
  for (const auto& [node, host] :
       {std::pair<std::string, std::string>{"a", "10.77.0.10"}, {"b", "10.77.0.10"}, {"c", "10.77.0.11"}})
    cluster += "[[nodes]]\nname = \"" + node +
               "\"\ndevice = \"cpu\"\ncount = 1\ninterconnect = \"pcie\"\nintra_bandwidth = \"10GB/s\"\n"
               "nic_bandwidth = \"10Gbps\"\nhost = \"" +
               host + "\"\n";
  dir.Write("cluster.toml", cluster);
  std::string job = Job(dir.Join("run"), 1, true);
  job.replace(job.find("steps = 5"), 9, "steps = 20");
  job += "interval_steps = 5\nkeep = 10\n[plan]\nstrategy = \"poplar\"\n";
  dir.Write("job.toml", job);
  dir.Write("plan.toml", PlanHeader() + PlanNamed("dp3-zero0-last-batch").body);
  const std::string remote = "--remote '" + kHosts + " exec --prefix " + kPrefix + " {host}'";
  // The second host disappears after step 12 (its checkpoint of step 10 written): every process in
  // its namespace killed — its agent among them — and its link taken down.
  const std::string host1 = std::string(kPrefix) + "1";
  CliRun r =
      RunCommandLine("cd '" + dir.path().string() +
                     "' && (until grep -q '\"step\":12,' run/metrics.jsonl 2>/dev/null; do sleep 0.05; done; "
                     "ip netns pids " +
                     host1 + " | xargs -r kill -9; ip link set " + host1 + "v down) & cd '" +
                     dir.path().string() + "' && MOTLEY_CACHE_DIR='" + dir.Join("cache") + "' " + MOTLEY_BIN +
                     " train job.toml --plan plan.toml --hosts " + remote + " --max-restarts 1 2>&1");
  ASSERT_EQ(r.exit_code, 0) << r.output;
  EXPECT_CONTAINS(r.output, "on 2 hosts (10.77.0.10:2,10.77.0.11:1)");
  EXPECT_CONTAINS(r.output, "motley launch: host 10.77.0.11 is gone");
  EXPECT_CONTAINS(r.output, "rank 2 (device 2, node c) failed: its node is lost — restart 1 of 1");
  EXPECT_CONTAINS(r.output, "resuming from the checkpoint of step 10");
  EXPECT_CONTAINS(r.output, "on 1 hosts (10.77.0.10:2)");
  EXPECT_CONTAINS(r.output, "[rank 0] done: 10 steps");
  // The same plan from the same checkpoint, by hand, on the first host: the same parameters.
  std::string by_hand = Job(dir.Join("by-hand"), 1, true);
  by_hand.replace(by_hand.find("steps = 5"), 9, "steps = 20");
  dir.Write("by-hand.toml", by_hand);
  CliRun again = Motley("launch --hosts 10.77.0.10:2 " + remote + " -- " + MOTLEY_BIN +
                            " train by-hand.toml --plan run/plan.toml --resume run/step-000010",
                        false, dir.path().string());
  ASSERT_EQ(again.exit_code, 0) << again.output;
  const double d = MaxRelativeDifference(dir.Join("run/step-000020/model.safetensors"),
                                         dir.Join("by-hand/step-000020/model.safetensors"));
  EXPECT_GE(d, 0);
  EXPECT_LT(d, kFp64Tolerance);
}

// An out-of-memory across hosts escalates as on one host: the local emulated cluster with its fast
// node on the first host and its slow node on the second, 96 MiB a device; a plan that overflows
// device 0 in step 3 is planned again more frugally and the step runs again from step 2's state,
// through the agents — ending where the even split's four steps end (fp64).
TEST(MultiHost, AnOutOfMemoryOnOneHostEscalatesAsOnOne) {
  TestHosts hosts;
  if (!hosts.why_not().empty()) GTEST_SKIP() << hosts.why_not();
  TempDir dir;
  auto source = [](const std::string& path) {
    return motley::ReadFileToString(std::string(MOTLEY_SOURCE_DIR) + "/" + path).value();
  };
  auto replace = [](std::string text, const std::string& from, const std::string& to) {
    const size_t at = text.find(from);
    EXPECT_NE(at, std::string::npos) << from;
    return at == std::string::npos ? text : text.replace(at, from.size(), to);
  };
  std::string cluster = source("examples/clusters/local-emulated.toml");
  cluster = replace(cluster, "memory = \"1GiB\"", "memory = \"96MiB\"");
  cluster = replace(cluster, "memory = \"512MiB\"", "memory = \"96MiB\"");
  cluster = replace(cluster, "name = \"fast\"\n", "name = \"fast\"\nhost = \"10.77.0.10\"\n");
  cluster = replace(cluster, "name = \"slow\"\n", "name = \"slow\"\nhost = \"10.77.0.11\"\n");
  dir.Write("c.toml", cluster);
  std::string job = source("examples/jobs/default.toml");
  job = replace(job, "cluster = \"local-emulated\"", "cluster = \"c.toml\"");
  job = replace(job, "global_batch_sequences = 32", "global_batch_sequences = 48");
  job = replace(job, "precision = \"fp32\"", "precision = \"fp64\"");
  dir.Write("job.toml", replace(job, "dir = \"checkpoints/default\"", "dir = \"run\""));
  dir.Write("reference.toml", replace(job, "dir = \"checkpoints/default\"", "dir = \"reference\""));
  std::string even = source("examples/plans/local-even-dp.toml");
  even = replace(even, "cluster = \"local-emulated\"", "cluster = \"c.toml\"");
  even = replace(even, "precision = \"fp32\"", "precision = \"fp64\"");
  even = replace(even, "microbatch_size = [2, 2, 2, 2]", "microbatch_size = [3, 3, 3, 3]");
  dir.Write("even.toml", even);
  std::string big = replace(even, "microbatch_size = [3, 3, 3, 3]", "microbatch_size = [36, 1, 1, 1]");
  dir.Write("big.toml", replace(big, "num_microbatches = [4, 4, 4, 4]", "num_microbatches = [1, 4, 4, 4]"));

  const std::string train = "cd '" + dir.path().string() + "' && MOTLEY_CACHE_DIR='" + dir.Join("cache") +
                            "' " + MOTLEY_BIN + " train --hosts --remote '" + kHosts + " exec --prefix " +
                            kPrefix + " {host}' ";
  CliRun first = RunCommandLine(train + "job.toml --plan even.toml --steps 2 --no-validation 2>&1");
  ASSERT_EQ(first.exit_code, 0) << first.output;
  EXPECT_CONTAINS(first.output, "on 2 hosts (10.77.0.10:2,10.77.0.11:2)");
  CliRun r = RunCommandLine(train +
                            "job.toml --plan big.toml --steps 4 --no-validation --resume run "
                            "--even-if-predicted-oom 2>&1");
  ASSERT_EQ(r.exit_code, 0) << r.output;
  EXPECT_CONTAINS(r.output, "out of memory — rank 0 (device 0, emu-cpu) ran out of memory in step 3");
  EXPECT_CONTAINS(r.output, "the plan, more frugal");
  EXPECT_CONTAINS(r.output, "retrying from run again");
  EXPECT_CONTAINS(r.output, "done: 2 steps");
  CliRun reference = RunCommandLine(train + "reference.toml --plan even.toml --steps 4 --no-validation 2>&1");
  ASSERT_EQ(reference.exit_code, 0) << reference.output;
  const double d = MaxRelativeDifference(dir.Join("run/step-000004/model.safetensors"),
                                         dir.Join("reference/step-000004/model.safetensors"));
  EXPECT_GE(d, 0);
  EXPECT_LT(d, kFp64Tolerance);
}

// `motley train JOB --hosts` end to end: the links measured between the hosts themselves, the even
// split's baseline run across them, the profile calibrated on it, and the plan run across them.
TEST(MultiHost, TrainAcrossHostsMeasuresCalibratesAndRunsOnTheHosts) {
  TestHosts hosts;
  if (!hosts.why_not().empty()) GTEST_SKIP() << hosts.why_not();
  TempDir dir;
  std::string cluster =
      motley::ReadFileToString(std::string(MOTLEY_SOURCE_DIR) + "/examples/clusters/local-emulated.toml")
          .value();
  for (const auto& [node, host] :
       {std::pair<std::string, std::string>{"fast", "10.77.0.10"}, {"slow", "10.77.0.11"}}) {
    const std::string line = "name = \"" + node + "\"\n";
    cluster.insert(cluster.find(line) + line.size(), "host = \"" + host + "\"\n");
  }
  dir.Write("c.toml", cluster);
  std::string job =
      motley::ReadFileToString(std::string(MOTLEY_SOURCE_DIR) + "/examples/jobs/default.toml").value();
  job.replace(job.find("cluster = \"local-emulated\""), 26, "cluster = \"c.toml\"");
  job.replace(job.find("dir = \"checkpoints/default\""), 27, "dir = \"run\"");
  dir.Write("job.toml", job);
  CliRun r = RunCommandLine("cd '" + dir.path().string() + "' && MOTLEY_CACHE_DIR='" + dir.Join("cache") +
                            "' " + MOTLEY_BIN + " train job.toml --hosts --remote '" + kHosts +
                            " exec --prefix " + kPrefix + " {host}' --baseline-steps 4 --steps 6 2>&1");
  ASSERT_EQ(r.exit_code, 0) << r.output;
  auto count = [&r](const std::string& what) {
    size_t n = 0;
    for (size_t at = r.output.find(what); at != std::string::npos; at = r.output.find(what, at + 1)) ++n;
    return n;
  };
  // The links and the baseline across both hosts; the plan on the hosts its devices sit on (the
  // planner may leave the slow host's node out, its link measured at ~160 Mbit/s).
  EXPECT_EQ(count("motley launch: "), 3u) << r.output;
  EXPECT_GE(count("on 2 hosts (10.77.0.10:2,10.77.0.11:2)"), 2u)
      << "the links and the baseline, each across the hosts:\n"
      << r.output;
  EXPECT_CONTAINS(r.output, "profile: link fast <-> slow: ");
  EXPECT_CONTAINS(r.output, "profile calibrated on the even split's run");
  EXPECT_CONTAINS(r.output, "measured: ");
  EXPECT_CONTAINS(r.output, "[rank 0] done: 6 steps");
}

}  // namespace
