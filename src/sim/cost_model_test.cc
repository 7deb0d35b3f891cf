// The cost model's per-pair-of-nodes links and the cluster's per-node types are what finding them
// afresh gives, overrides and measured links included.
#include "sim/cost_model.h"

#include <gtest/gtest.h>

#include "core/cluster_parse.h"
#include "core/model_parse.h"
#include "cost/comm_cost.h"

namespace motley {
namespace {

constexpr const char* kThreeRegions = R"(
[network]
inter_region_bandwidth = "5Gbps"
inter_region_latency = "6ms"

[[nodes]]
name = "a"
device = "a100-80gb"
count = 4
interconnect = "nvswitch"
nic_bandwidth = "100Gbps"
region = "east"

[[nodes]]
name = "b"
device = "T4"
count = 2
nic_bandwidth = "50Gbps"
region = "east"

[[nodes]]
name = "solo"
device = "t4"
count = 1
nic_bandwidth = "40Gbps"
region = "west"

[[nodes]]
name = "c"
device = "v100-16gb"
count = 2
nic_bandwidth = "25Gbps"
region = "north"

[[links]]
between = ["a", "b"]
bandwidth = "12Gbps"
latency = "50us"

[[links]]
between = ["east", "north"]
bandwidth = "2Gbps"
)";

TEST(CostModel, EachPairOfDevicesGetsTheLinkFoundAfreshOverridesAndMeasurementsIncluded) {
  Result<Cluster> c = ParseClusterToml(kThreeRegions, "three.toml");
  ASSERT_TRUE(c.ok()) << c.status().message();
  Profile profile;
  profile.links.push_back({"solo", "c", 3e8, 2e-3, 1e-4, "nccl"});  // measured between two nodes
  const ModelSpec model = LoadModel("llama-1m").value();
  const CostModel costs(*c, model, &profile, 128, Precision::kFp32, true);
  const double bytes = 1e8;
  for (int a = 0; a < c->num_devices(); ++a)
    for (int b = 0; b < c->num_devices(); ++b) {
      Link want = c->LinkBetween(a, b);
      const std::string na = c->node_of(a).name, nb = c->node_of(b).name;
      if ((na == "solo" && nb == "c") || (na == "c" && nb == "solo")) {
        want.bandwidth_bytes_per_s = 3e8;
        want.latency_s = 2e-3;
        want.collective_overhead_s = 1e-4;
      }
      EXPECT_EQ(costs.TransferS(a, b, bytes), TransferS(want, bytes)) << a << " -> " << b;
    }
  // Pairs the model reads differently: a node's own devices, the overridden pair, across regions.
  EXPECT_NE(costs.TransferS(0, 1, bytes), costs.TransferS(0, 4, bytes));
  EXPECT_NE(costs.TransferS(4, 7, bytes), costs.TransferS(6, 7, bytes));
}

TEST(Cluster, ADevicesTypeFollowsTheCatalogAsItChanges) {
  Result<Cluster> c = ParseClusterToml(kThreeRegions, "three.toml");
  ASSERT_TRUE(c.ok()) << c.status().message();
  EXPECT_EQ(c->spec(4).name, "t4");  // "T4" in the file
  Cluster copy = *c;
  GpuSpec faster = copy.spec(4);
  faster.peak_fp16_flops *= 2;
  copy.catalog.Upsert(faster);  // as a measured type replaces the catalog's
  EXPECT_EQ(copy.spec(4).peak_fp16_flops, 2 * c->spec(4).peak_fp16_flops);
  EXPECT_EQ(copy.spec(6).peak_fp16_flops, copy.spec(4).peak_fp16_flops);
  // A whole other catalog, its types in another order: its own, though the nodes' types were
  // found in the old one.
  Cluster other = *c;
  GpuCatalog catalog;
  GpuSpec t4 = c->spec(4);
  t4.memory_bytes /= 2;
  for (const GpuSpec& s : {c->spec(7), t4, c->spec(0)}) catalog.Upsert(s);
  other.catalog = catalog;
  EXPECT_EQ(other.spec(5).memory_bytes, c->spec(5).memory_bytes / 2);
  EXPECT_EQ(other.spec(0).name, "a100-80gb");
  EXPECT_EQ(other.spec(7).name, "v100-16gb");
}

}  // namespace
}  // namespace motley
