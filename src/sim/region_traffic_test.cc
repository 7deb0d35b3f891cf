// What a step sends between regions, and what it costs: a pipeline's activations and a data-parallel
// group's gradient all-reduce across two regions, against the formulas.
#include "sim/region_traffic.h"

#include <gtest/gtest.h>

#include "core/cluster_parse.h"
#include "cost/money.h"
#include "plan/lower.h"
#include "sim/test_models.h"

namespace motley {
namespace {

// Two one-device nodes, one in each region, priced.
Cluster TwoRegions() {
  return ParseClusterToml(R"(
[network]
inter_region_bandwidth = "10Gbps"
[[nodes]]
name = "e"
device = "a100-80gb"
nic_bandwidth = "100Gbps"
region = "east"
[[nodes]]
name = "w"
device = "a100-80gb"
nic_bandwidth = "100Gbps"
region = "west"
[[prices]]
device = "a100-80gb"
price = "4 USD/h"
[[egress]]
from = "east"
to = "west"
price = "0.02 USD/GB"
[[egress]]
from = "west"
to = "east"
price = "0.05 USD/GB"
)",
                          "two.toml")
      .value();
}

TEST(RegionTraffic, APipelineSendsItsActivationsAcrossAndTheirGradientsBack) {
  const ModelSpec m = test::LayerHeavyModel(4);
  const Cluster c = TwoRegions();
  Plan p;
  p.seq_len = 128;
  p.zero_stage = 0;
  const int microbatches = 3;
  for (int g = 0; g < 2; ++g) {
    GroupPlan gp;
    gp.ministages = {{2 * g, 2 * g + 2}};
    gp.devices = {{g, 2, microbatches, 0}};
    p.groups.push_back(gp);
  }
  const Schedule s = LowerPlan(p, c, m).value();
  const std::vector<RegionBytes> t = RegionTraffic(s, c);
  // Each microbatch's boundary activation (2 sequences x 128 tokens x hidden 256, bf16) goes east ->
  // west in the forward and its gradient west -> east in the backward; the one collective (the
  // global norm, 8 bytes a member) crosses once each way too.
  const double activation = 2.0 * 128 * 256 * 2 * microbatches;
  ASSERT_EQ(t.size(), 2u);
  EXPECT_EQ(t[0].from_region, 0);
  EXPECT_EQ(t[0].to_region, 1);
  EXPECT_NEAR(t[0].bytes, activation, 64);
  EXPECT_EQ(t[1].from_region, 1);
  EXPECT_NEAR(t[1].bytes, activation, 64);
}

TEST(RegionTraffic, ADataParallelPairAllReducesItsGradientsAcrossAndPaysForIt) {
  const ModelSpec m = test::LayerHeavyModel(2);
  const Cluster c = TwoRegions();
  Plan p;
  p.seq_len = 128;
  p.zero_stage = 0;
  GroupPlan gp;
  gp.ministages = {{0, 2}};
  gp.devices = {{0, 1, 1, 0}, {1, 1, 1, 0}};
  p.groups.push_back(gp);
  const Schedule s = LowerPlan(p, c, m).value();
  const std::vector<RegionBytes> t = RegionTraffic(s, c);
  // A ring of two: each member sends 2 (n - 1) / n = 1 payload to the other.
  const double grads = static_cast<double>(TotalParams(m)) * 2;
  ASSERT_EQ(t.size(), 2u);
  EXPECT_NEAR(t[0].bytes, grads, grads * 1e-3);
  EXPECT_NEAR(t[1].bytes, grads, grads * 1e-3);
  // Priced: two devices at $4/h, and each step's bytes at their direction's egress.
  const double step_s = 0.5;
  const PlanMoney money = PriceOfPlan(c, {0, 1}, step_s, 256, t);
  EXPECT_DOUBLE_EQ(money.compute_usd_per_hour, 8);
  EXPECT_NEAR(money.egress_usd_per_hour, (t[0].bytes * 0.02 + t[1].bytes * 0.05) / 1e9 * 7200, 1e-9);
  EXPECT_DOUBLE_EQ(money.tokens_per_s, 512);
  EXPECT_NEAR(money.usd_per_million_tokens, money.usd_per_hour / (512 * 3600) * 1e6, 1e-12);
  EXPECT_DOUBLE_EQ(money.inter_region_bytes_per_step, t[0].bytes + t[1].bytes);
  // In one region nothing crosses.
  EXPECT_TRUE(RegionTraffic(LowerPlan(p, test::FastCluster(2), m).value(), test::FastCluster(2)).empty());
}

}  // namespace
}  // namespace motley
