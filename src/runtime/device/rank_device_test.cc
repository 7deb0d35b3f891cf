#include "runtime/device/rank_device.h"

#include <gtest/gtest.h>

#include "core/cluster_parse.h"

namespace motley {
namespace {

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
)", "c.toml").value();
  EXPECT_TRUE(CheckClusterFitsThisHost(gpus, 16, "job.toml").ok());
  EXPECT_TRUE(CheckClusterFitsThisHost(gpus, 0, "job.toml").ok());  // CPU ranks stand in for the GPUs
  const Status s = CheckClusterFitsThisHost(gpus, 8, "job.toml");
  ASSERT_FALSE(s.ok());
  EXPECT_NE(s.message().find("cluster two-nodes has 16 devices but this host sees 8 GPU(s)"), std::string::npos)
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
)", "c.toml").value();
  Schedule s;
  for (int device : {2, 3, 0, 1}) {
    Program p;
    p.rank = static_cast<int32_t>(s.programs.size());
    p.device = device;
    s.programs.push_back(p);
  }
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

}  // namespace
}  // namespace motley
