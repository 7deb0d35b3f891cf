#include "runtime/device/rank_device.h"

#include <gtest/gtest.h>

#include "core/cluster_parse.h"

namespace motley {
namespace {

// A schedule whose rank r runs on devices[r] (only what rank mapping reads).
Schedule ProgramsOn(const std::vector<int>& devices) {
  Schedule s;
  for (int device : devices) {
    Program p;
    p.rank = static_cast<int32_t>(s.programs.size());
    p.device = device;
    s.programs.push_back(p);
  }
  return s;
}

Rendezvous Host(int local_rank, int local_world_size) {
  Rendezvous rv;
  rv.world_size = 2 * local_world_size;
  rv.rank = local_world_size + local_rank;  // on the second host
  rv.local_rank = local_rank;
  rv.local_world_size = local_world_size;
  return rv;
}

TEST(RankDevice, EachRankTakesTheGpuOfItsLocalRankWhenEveryRankHasOne) {
  EXPECT_EQ(RankDevice("auto", Host(2, 4), 4).value(), torch::Device(torch::kCUDA, 2));
  EXPECT_EQ(RankDevice("cuda", Host(3, 4), 8).value(), torch::Device(torch::kCUDA, 3));
  // Fewer GPUs than ranks on the host (an emulated cluster on a workstation): all on the CPU.
  EXPECT_EQ(RankDevice("auto", Host(0, 4), 2).value(), torch::Device(torch::kCPU));
  EXPECT_EQ(RankDevice("auto", Host(0, 1), 0).value(), torch::Device(torch::kCPU));
  EXPECT_EQ(RankDevice("cpu", Host(1, 2), 2).value(), torch::Device(torch::kCPU));
}

TEST(RankDevice, InsistingOnGpusThatAreNotThereSaysHowMany) {
  Result<torch::Device> d = RankDevice("cuda", Host(0, 4), 2);
  ASSERT_FALSE(d.ok());
  EXPECT_NE(d.status().message().find("4 ranks on this host but 2 GPU(s) visible"), std::string::npos)
      << d.status().message();
  Result<torch::Device> typo = RankDevice("gpu", Host(0, 1), 1);
  ASSERT_FALSE(typo.ok());
  EXPECT_NE(typo.status().message().find("--device gpu: expected auto, cpu or cuda"), std::string::npos);
}

TEST(RankDevice, AClusterOfMoreGpusThanThisHostHasSaysHowToStartItsRanks) {
  const Cluster gpus = ParseClusterToml(R"(name = "two-nodes"
[[nodes]]
name = "n"
device = "h100-sxm"
count = 8
replicas = 2
nic_bandwidth = "400Gbps"
)",
                                        "c.toml")
                           .value();
  EXPECT_TRUE(CheckClusterFitsThisHost(gpus, 16, "job.toml").ok());
  EXPECT_TRUE(CheckClusterFitsThisHost(gpus, 0, "job.toml").ok());  // CPU ranks stand in for the GPUs
  const Status s = CheckClusterFitsThisHost(gpus, 8, "job.toml");
  ASSERT_FALSE(s.ok());
  EXPECT_NE(s.message().find("cluster two-nodes has 16 devices but this host sees 8 GPU(s)"),
            std::string::npos)
      << s.message();
  EXPECT_NE(s.message().find("--no-python motley train job.toml --plan plan.toml"), std::string::npos);
}

TEST(RankDevice, OnRealDevicesEachProcessRunsItsOwnDevicesProgram) {
  // Launcher rank q sits on cluster device q; the plan lists the A100s (devices 2, 3) first.
  const Cluster real = ParseClusterToml(R"(name = "mixed"
[[nodes]]
name = "h"
device = "h100-sxm"
count = 2
nic_bandwidth = "100Gbps"
[[nodes]]
name = "a"
device = "a100-80gb"
count = 2
nic_bandwidth = "100Gbps"
)",
                                        "c.toml")
                           .value();
  const Schedule s = ProgramsOn({2, 3, 0, 1});
  EXPECT_EQ(PlanRankOf(s, real, 0, 4), 2);  // process 0 (an H100) runs the plan's rank 2 (device 0)
  EXPECT_EQ(PlanRankOf(s, real, 3, 4), 1);
  // A plan over some of the devices, or an emulated cluster: the launcher's rank.
  EXPECT_EQ(PlanRankOf(s, real, 1, 3), 1);
  Cluster emulated = real;
  emulated.nodes[0].emulation.assign(2, EmulationConfig{});
  emulated.Finalize();
  ASSERT_TRUE(emulated.emulated());
  EXPECT_EQ(PlanRankOf(s, emulated, 0, 4), 0);
}

// #50: where the cluster names its hosts, a rank finds its device by its host and local rank,
// whatever order the launcher numbered the hosts in; a rank on a host the plan does not use, or
// more or fewer ranks on a host than the plan has devices there, is refused naming both.
TEST(RankDevice, OnNamedHostsARankFindsItsDeviceByHostAndLocalRank) {
  const Cluster hosts = ParseClusterToml(R"(name = "hosts"
[[nodes]]
name = "a"
device = "h100-sxm"
count = 2
nic_bandwidth = "100Gbps"
host = "10.0.0.1"
[[nodes]]
name = "b"
device = "a100-80gb"
count = 2
nic_bandwidth = "100Gbps"
host = "10.0.0.2"
)",
                                         "c.toml")
                            .value();
  const Schedule s = ProgramsOn({2, 3, 0, 1});  // the plan lists the A100s (host b) first
  ThisHost b{"node-b", {"127.0.0.1", "10.0.0.2"}};
  Rendezvous rv;
  rv.world_size = 4;
  rv.launcher_rank = 0;  // the launcher numbered host b first
  rv.local_rank = 1;
  rv.local_world_size = 2;
  EXPECT_EQ(PlanRankOnHost(s, hosts, rv, b).value(), 1);  // device 3: the plan's rank 1
  ThisHost a{"node-a", {"10.0.0.1"}};
  rv.launcher_rank = 3;
  EXPECT_EQ(PlanRankOnHost(s, hosts, rv, a).value(), 3);  // device 1
  ThisHost elsewhere{"node-c", {"10.0.0.3"}};
  Result<int> lost = PlanRankOnHost(s, hosts, rv, elsewhere);
  ASSERT_FALSE(lost.ok());
  EXPECT_NE(lost.status().message().find(
                "rank 3 (local rank 1 of 2) runs on node-c (10.0.0.3), but the plan puts no "
                "device on this host: it expects its ranks on 10.0.0.2 (node 'b'), 10.0.0.1 "
                "(node 'a')"),
            std::string::npos)
      << lost.status().message();
  rv.local_world_size = 3;
  rv.local_rank = 2;
  Result<int> crowded = PlanRankOnHost(s, hosts, rv, a);
  ASSERT_FALSE(crowded.ok());
  EXPECT_NE(crowded.status().message().find(
                "where the plan has 2 device(s) (0, 1): start exactly 2 rank(s) on this host"),
            std::string::npos)
      << crowded.status().message();
  rv.world_size = 3;
  EXPECT_FALSE(PlanRankOnHost(s, hosts, rv, a).ok());  // the plan runs 4 ranks
}

// #50: on a GPU, a rank checks that it is the kind of GPU the plan made its part for.
TEST(RankDevice, ARankOnAnotherKindOfGpuIsRefusedNamingBoth) {
  const Cluster c = ParseClusterToml(R"(name = "mixed"
[[nodes]]
name = "h"
device = "h100-sxm"
nic_bandwidth = "100Gbps"
host = "gpu-a"
[[nodes]]
name = "l"
device = "l4"
nic_bandwidth = "100Gbps"
host = "gpu-b"
)",
                                     "c.toml")
                        .value();
  const int64_t gib = int64_t{1} << 30;
  EXPECT_TRUE(CheckRankGpu(c, 0, 0, "NVIDIA H100 80GB HBM3", 80 * gib - 400 * (int64_t{1} << 20)).ok());
  EXPECT_TRUE(CheckRankGpu(c, 1, 1, "NVIDIA L4", static_cast<int64_t>(c.spec(1).memory_bytes)).ok());
  // An A10G has an L4's memory, but not its name; an H100 NVL is an H100 with 94 GB.
  const Status a10g = CheckRankGpu(c, 1, 1, "NVIDIA A10G", static_cast<int64_t>(c.spec(1).memory_bytes));
  ASSERT_FALSE(a10g.ok());
  EXPECT_NE(a10g.message().find("rank 1 runs on a NVIDIA A10G with"), std::string::npos) << a10g.message();
  EXPECT_NE(a10g.message().find("but the plan made its part for device 1 of node 'l' on gpu-b"),
            std::string::npos)
      << a10g.message();
  EXPECT_FALSE(CheckRankGpu(c, 0, 0, "NVIDIA H100 NVL", 94 * gib).ok());
  EXPECT_FALSE(CheckRankGpu(c, 0, 0, "NVIDIA L4", static_cast<int64_t>(c.spec(1).memory_bytes)).ok());
}

}  // namespace
}  // namespace motley
