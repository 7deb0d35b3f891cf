#include "profile/link_probe.h"

#include <gtest/gtest.h>

#include "core/cluster_parse.h"

namespace motley {
namespace {

Cluster Parse(const std::string& text) {
  Result<Cluster> c = ParseClusterToml(text, "test.toml");
  EXPECT_TRUE(c.ok()) << c.status().message();
  return *c;
}

TEST(LinkProbe, OnePairPerDistinctPairOfNodeConfigurations) {
  // Nodes a and b are alike; c has another GPU type; d is alike to c but has one GPU.
  const Cluster cluster = Parse(R"(name = "mixed"
[[nodes]]
name = "a"
device = "a100-80gb"
count = 4
nic_bandwidth = "100Gbps"
[[nodes]]
name = "b"
device = "a100-80gb"
count = 4
nic_bandwidth = "100Gbps"
[[nodes]]
name = "c"
device = "v100-32gb"
count = 2
nic_bandwidth = "100Gbps"
[[nodes]]
name = "d"
device = "v100-32gb"
count = 1
nic_bandwidth = "100Gbps"
)");
  EXPECT_EQ(NodeConfigKey(cluster, 0), NodeConfigKey(cluster, 1));
  EXPECT_NE(NodeConfigKey(cluster, 0), NodeConfigKey(cluster, 2));
  EXPECT_NE(NodeConfigKey(cluster, 2), NodeConfigKey(cluster, 3));  // one device: no link inside
  // Within: a (devices 0, 1), c (8, 9). Between: a-b (same config, two nodes), a-c, a-d, c-d.
  const std::vector<std::pair<int, int>> expected = {{0, 1}, {8, 9}, {0, 4}, {0, 8}, {0, 10}, {8, 10}};
  EXPECT_EQ(LinkProbePairs(cluster), expected);
}

TEST(LinkProbe, ALinkOverrideMakesANodeItsOwnConfiguration) {
  const Cluster cluster = Parse(R"(name = "two"
[[nodes]]
name = "a"
device = "h100-sxm"
count = 2
nic_bandwidth = "100Gbps"
[[nodes]]
name = "b"
device = "h100-sxm"
count = 2
nic_bandwidth = "100Gbps"
[[nodes]]
name = "c"
device = "h100-sxm"
count = 2
nic_bandwidth = "100Gbps"
[[links]]
between = ["a", "c"]
bandwidth = "10Gbps"
)");
  EXPECT_NE(NodeConfigKey(cluster, 0), NodeConfigKey(cluster, 1));
  EXPECT_NE(NodeConfigKey(cluster, 2), NodeConfigKey(cluster, 1));
  EXPECT_EQ(LinkProbePairs(cluster).size(), 3u + 3u);  // three within, three between
}

}  // namespace
}  // namespace motley
