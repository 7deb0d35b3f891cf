// What a plan costs: devices at their prices (spot ones at their spot price), and what spot
// interruptions cost a run (cost/money.h).
#include "cost/money.h"

#include <fmt/format.h>
#include <gtest/gtest.h>

#include "core/cluster_parse.h"

namespace motley {
namespace {

Cluster TwoNodes(double interruptions_per_hour) {
  Result<Cluster> c = ParseClusterToml(fmt::format(R"(
name = "spot-and-not"
[[nodes]]
name = "a"
device = "a100-40gb"
count = 4
nic_bandwidth = "100Gbps"
spot = true
[[nodes]]
name = "b"
device = "t4"
count = 4
nic_bandwidth = "100Gbps"
[[prices]]
device = "a100-40gb"
price = "2.00 USD/h"
spot_price = "0.80 USD/h"
spot_interruptions_per_hour = {}
[[prices]]
device = "t4"
price = "0.50 USD/h"
)",
                                                   interruptions_per_hour),
                                       "spot.toml");
  EXPECT_TRUE(c.ok()) << c.status().message();
  return *c;
}

TEST(PlanMoney, SpotDevicesCostTheirSpotPriceAndTheirInterruptionsCostTime) {
  const Cluster c = TwoNodes(0.02);
  const std::vector<int> all = {0, 1, 2, 3, 4, 5, 6, 7}, on_demand = {4, 5, 6, 7};
  const InterruptionCost cost{3600, 1800, ""};  // hourly checkpoints, half an hour to restart
  const PlanMoney m = PriceOfPlan(c, all, 0.5, 1e5, {}, cost);
  EXPECT_EQ(m.spot_devices, 4);
  EXPECT_DOUBLE_EQ(m.interruptions_per_hour, 4 * 0.02);
  // Each interruption: half an hour of work lost and half an hour to restart.
  EXPECT_DOUBLE_EQ(m.availability, 1 / (1 + 0.08 * 1.0));
  EXPECT_DOUBLE_EQ(m.nominal_tokens_per_s, 2e5);
  EXPECT_DOUBLE_EQ(m.tokens_per_s, 2e5 * m.availability);
  EXPECT_DOUBLE_EQ(m.compute_usd_per_hour, 4 * 0.80 + 4 * 0.50);
  EXPECT_DOUBLE_EQ(m.on_demand_usd_per_hour, 4 * 2.00 + 4 * 0.50);
  EXPECT_DOUBLE_EQ(m.usd_per_million_tokens, m.usd_per_hour / (m.tokens_per_s * 3600) * 1e6);
  EXPECT_DOUBLE_EQ(m.on_demand_usd_per_million_tokens, 10.0 / (2e5 * 3600) * 1e6);
  // On demand only: nothing to interrupt.
  const PlanMoney d = PriceOfPlan(c, on_demand, 0.5, 1e5, {}, cost);
  EXPECT_EQ(d.spot_devices, 0);
  EXPECT_EQ(d.availability, 1);
  EXPECT_EQ(d.tokens_per_s, d.nominal_tokens_per_s);
  EXPECT_EQ(d.usd_per_hour, d.on_demand_usd_per_hour);
  // More interruptions, a longer checkpoint interval or a slower restart: less of the time trains.
  double last = 1;
  for (double rate : {0.0, 0.01, 0.1, 1.0, 10.0}) {
    const double a = Availability(TwoNodes(rate), all, cost);
    EXPECT_LE(a, last) << rate;
    EXPECT_GT(a, 0);
    last = a;
  }
  EXPECT_LT(Availability(c, all, {7200, 1800, ""}), Availability(c, all, cost));
  EXPECT_LT(Availability(c, all, {3600, 3600, ""}), Availability(c, all, cost));
}

TEST(PlanMoney, ASpotNodeWithoutASpotPriceIsOneErrorNamingTheNodeAndTheFix) {
  const std::string nodes = R"(
name = "x"
[[nodes]]
name = "a"
device = "t4"
count = 4
spot = true
)";
  Result<Cluster> c =
      ParseClusterToml(nodes + "[[prices]]\ndevice = \"t4\"\nprice = \"0.50 USD/h\"\n", "c.toml");
  ASSERT_FALSE(c.ok());
  EXPECT_NE(c.status().message().find("c.toml:7"), std::string::npos) << c.status().message();
  EXPECT_NE(c.status().message().find("add spot_price"), std::string::npos) << c.status().message();
  c = ParseClusterToml(nodes, "c.toml");
  ASSERT_FALSE(c.ok());
  EXPECT_NE(c.status().message().find("a spot node needs its prices"), std::string::npos)
      << c.status().message();
}

}  // namespace
}  // namespace motley
