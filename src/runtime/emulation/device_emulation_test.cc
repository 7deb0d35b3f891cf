#include "runtime/emulation/device_emulation.h"

#include <chrono>

#include <gtest/gtest.h>
#include <torch/torch.h>

#include "core/cluster_parse.h"
#include "cost/comm_cost.h"

namespace motley {
namespace {

Cluster TwoNodes() {
  Result<Cluster> c = ParseClusterToml(R"(name = "t"
[device_types.cpu]
display_name = "cpu"
memory = "2GiB"
memory_bandwidth = "10GB/s"
fp16_flops = "50GFLOPS"
fp32_flops = "50GFLOPS"
host_link = "10GB/s"
source = "test"
[[nodes]]
name = "a"
device = "cpu"
count = 2
interconnect = "pcie"
intra_bandwidth = "8GB/s"
nic_bandwidth = "1GB/s"
[nodes.emulation]
speed_factor = 1.0
[[nodes]]
name = "b"
device = "cpu"
count = 1
interconnect = "pcie"
intra_bandwidth = "8GB/s"
nic_bandwidth = "1GB/s"
[nodes.emulation]
speed_factor = 4.0
memory = "512MiB"
)",
                                       "t.toml");
  EXPECT_TRUE(c.ok()) << c.status().message();
  return *c;
}

double Seconds(const std::function<void()>& f) {
  const auto t = std::chrono::steady_clock::now();
  f();
  return std::chrono::duration<double>(std::chrono::steady_clock::now() - t).count();
}

TEST(DeviceEmulation, AMatmulStragglerSlowsOnlyTheMatrixMultiplications) {
  DeviceEmulation e;  // no cluster emulation: only the run-time slowdown
  EXPECT_FALSE(e.stretches());
  e.set_matmul_slowdown(3.0);
  EXPECT_TRUE(e.stretches());
  // The clock counts this thread's matrix multiplications (forward and backward), not other ops.
  torch::Tensor a = torch::randn({256, 256}, torch::requires_grad()), b = torch::randn({256, 256});
  double before = MatmulCpuSeconds();
  torch::Tensor sum = a;
  for (int i = 0; i < 200; ++i) sum = sum + b * 0.5;
  EXPECT_LT(MatmulCpuSeconds() - before, 1e-4);
  before = MatmulCpuSeconds();
  torch::nn::functional::linear(a, b).sum().backward();  // addmm/mm forward, mm backward
  const double matmul_s = MatmulCpuSeconds() - before;
  EXPECT_GT(matmul_s, 0.0);
  // An op of 20 ms CPU (10 ms of it in matmuls) in 20 ms of wall time lasts 20 + 2 x 10 ms: 20 ms more.
  EXPECT_NEAR(e.ExtraComputeSeconds(0.020, 0.020, 0.010), 0.020, 1e-12);
  double late_s = 0;
  EXPECT_GE(Seconds([&] { e.StretchCompute(0.020, 0.020, 0.010, &late_s); }), 0.020);  // it sleeps that long
  e.set_matmul_slowdown(1.0);
  EXPECT_EQ(e.ExtraComputeSeconds(0.020, 0.020, 0.010), 0);
}

// While it sleeps to the device's time the host looks at its communication about every
// millisecond (the executor's PollInCompute); the sleep still lasts the whole time.
TEST(DeviceEmulation, TheStretchLetsTheHostLookAroundWhileItSleeps) {
  const Cluster c = TwoNodes();
  DeviceEmulation slow(c, 2);  // speed factor 4
  double late_s = 0;
  int looks = 0;
  const double slept = Seconds([&] { slow.StretchCompute(0.030, 0.020, 0, &late_s, [&] { ++looks; }); });
  EXPECT_GE(slept, 0.050);
  EXPECT_GE(looks, 10);  // 50 ms in steps of at most 1 ms, however the host schedules this thread
  EXPECT_LE(looks, 51);
}

TEST(DeviceEmulation, ComputeLastsSpeedFactorTimesItsCpuTime) {
  const Cluster c = TwoNodes();
  DeviceEmulation slow(c, 2), fast(c, 0), off;
  EXPECT_DOUBLE_EQ(slow.speed_factor(), 4.0);
  EXPECT_DOUBLE_EQ(slow.memory_bytes(), 512.0 * 1024 * 1024);
  // An op that used 20 ms of CPU in 30 ms of wall time lasts 80 ms: 50 ms more.
  EXPECT_NEAR(slow.ExtraComputeSeconds(0.030, 0.020), 0.050, 1e-12);
  double late_s = 0;
  EXPECT_GE(Seconds([&] { slow.StretchCompute(0.030, 0.020, 0, &late_s); }), 0.050);  // it sleeps that long
  EXPECT_EQ(late_s, 0);
  EXPECT_EQ(fast.ExtraComputeSeconds(0.030, 0.020), 0);
  EXPECT_EQ(off.ExtraComputeSeconds(0.030, 0.020), 0);
  // Already slower than that (the host made it wait): no sleep, and 20 ms late.
  EXPECT_EQ(slow.ExtraComputeSeconds(0.100, 0.020), 0);
  EXPECT_NEAR(slow.LateComputeSeconds(0.100, 0.020), 0.020, 1e-12);
  EXPECT_EQ(slow.LateComputeSeconds(0.030, 0.020), 0);
  EXPECT_EQ(off.LateComputeSeconds(0.100, 0.020), 0);
  // The next ops make the lateness up from their sleeps: 20 ms late, then an op due 50 ms more
  // sleeps 30, the one after its whole 50.
  EXPECT_EQ(slow.StretchCompute(0.100, 0.020, 0, &late_s), 0);
  EXPECT_NEAR(late_s, 0.020, 1e-12);
  EXPECT_NEAR(slow.StretchCompute(0.030, 0.020, 0, &late_s), 0.030, 1e-12);
  EXPECT_EQ(late_s, 0);
  EXPECT_NEAR(slow.StretchCompute(0.030, 0.020, 0, &late_s), 0.050, 1e-12);
  // A run-time slowdown multiplies the device's own factor.
  slow.set_slowdown(2.0);
  EXPECT_NEAR(slow.ExtraComputeSeconds(0.030, 0.020), 2 * 4 * 0.020 - 0.030, 1e-12);
}

TEST(DeviceEmulation, TransfersAndRingsTakeTheClustersLinks) {
  const Cluster c = TwoNodes();
  DeviceEmulation d0(c, 0);
  const Link intra = c.LinkBetween(0, 1), inter = c.LinkBetween(0, 2);
  EXPECT_DOUBLE_EQ(d0.TransferSeconds(8e6, 1), intra.latency_s + 8e6 / intra.bandwidth_bytes_per_s);
  EXPECT_DOUBLE_EQ(d0.TransferSeconds(8e6, 2), inter.latency_s + 8e6 / inter.bandwidth_bytes_per_s);
  EXPECT_EQ(d0.TransferSeconds(8e6, 0), 0);
  // A ring inside a node: (n-1)/n of the payload per pass over the intra-node link.
  const double ring = intra.latency_s + 0.5 * 3e6 / intra.bandwidth_bytes_per_s;
  EXPECT_NEAR(d0.CollectiveSeconds(3e6, {0, 1}, CollectiveKind::kAllGather), ring, 1e-12);
  EXPECT_NEAR(d0.CollectiveSeconds(3e6, {0, 1}, CollectiveKind::kAllReduce), 2 * ring, 1e-12);
  // Across the nodes: the simulator's formula (cost/comm_cost.h) over the same links, as Gloo runs
  // it (emulated devices are CPU processes), the nodes' cards shared.
  const auto link = [&c](int a, int b) { return c.LinkBetween(a, b); };
  const Network net{link, [&c](int d) { return c.devices[d].node; }, NodeNics({0, 2}, link),
                    CollectiveLibrary::kGloo};
  for (const CollectiveKind kind :
       {CollectiveKind::kAllReduce, CollectiveKind::kReduceScatter, CollectiveKind::kAllGather})
    EXPECT_DOUBLE_EQ(d0.CollectiveSeconds(3e6, {0, 1, 2}, kind), CollectiveS(kind, {0, 1, 2}, 3e6, net));
  const double slow_ring = 2 * inter.latency_s + 2.0 / 3.0 * 3e6 / inter.bandwidth_bytes_per_s;
  EXPECT_LE(d0.CollectiveSeconds(3e6, {0, 1, 2}, CollectiveKind::kAllGather), 2 * slow_ring);
  EXPECT_EQ(DeviceEmulation().CollectiveSeconds(3e6, {0, 1, 2}, CollectiveKind::kAllReduce), 0);
}

}  // namespace
}  // namespace motley
