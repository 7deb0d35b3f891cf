#include "core/cluster.h"

#include <gtest/gtest.h>

#include "core/net.h"

#include "core/builtin_files.h"
#include "core/cluster_parse.h"

namespace motley {
namespace {

constexpr double kGiB = 1024.0 * 1024 * 1024;

Cluster Parse(const std::string& text) {
  Result<Cluster> c = ParseClusterToml(text, "c.toml");
  EXPECT_TRUE(c.ok()) << c.status().message();
  return c.ok() ? *c : Cluster{};
}

std::string Error(const std::string& text) {
  Result<Cluster> c = ParseClusterToml(text, "c.toml");
  EXPECT_FALSE(c.ok());
  return c.ok() ? "" : c.status().message();
}

const char* kTwoRegions = R"(
[network]
inter_region_bandwidth = "5Gbps"
inter_region_latency = "6ms"

[[nodes]]
name = "a"
device = "a100-80gb"
count = 8
interconnect = "nvswitch"
nic_bandwidth = "100Gbps"
region = "east"

[[nodes]]
name = "b"
device = "t4"
count = 4
nic_bandwidth = "50Gbps"
region = "east"

[[nodes]]
name = "c"
device = "v100-16gb"
count = 2
nic_bandwidth = "25Gbps"
region = "west"
)";

TEST(Cluster, DerivesDevicesInFileOrder) {
  Cluster c = Parse(kTwoRegions);
  ASSERT_EQ(c.num_devices(), 14);
  EXPECT_EQ(c.devices[8].node, 1);
  EXPECT_EQ(c.devices[8].local_index, 0);
  EXPECT_EQ(c.spec(13).name, "v100-16gb");
  EXPECT_EQ(c.regions, (std::vector<std::string>{"east", "west"}));
  EXPECT_DOUBLE_EQ(c.total_peak_fp16_flops(), 8 * 312e12 + 4 * 65e12 + 2 * 125e12);
  EXPECT_DOUBLE_EQ(c.memory_bytes(0), 80 * kGiB);
}

TEST(Cluster, LinkBetweenAnyTwoDevices) {
  Cluster c = Parse(kTwoRegions);
  Link self = c.LinkBetween(3, 3);
  EXPECT_EQ(self.kind, LinkKind::kSelf);
  Link intra = c.LinkBetween(0, 7);  // NVSwitch default: the A100's NVLink per direction
  EXPECT_EQ(intra.kind, LinkKind::kIntraNode);
  EXPECT_DOUBLE_EQ(intra.bandwidth_bytes_per_s, 300e9);
  EXPECT_DOUBLE_EQ(intra.latency_s, c.network.intra_node_latency_s);
  Link t4_intra = c.LinkBetween(8, 9);  // no NVLink: PCIe Gen3 host link
  EXPECT_DOUBLE_EQ(t4_intra.bandwidth_bytes_per_s, 15.75e9);
  Link inter = c.LinkBetween(0, 8);  // min of the two NICs
  EXPECT_EQ(inter.kind, LinkKind::kInterNode);
  EXPECT_DOUBLE_EQ(inter.bandwidth_bytes_per_s, 50e9 / 8);
  Link region = c.LinkBetween(0, 12);  // min of NICs and the inter-region link
  EXPECT_EQ(region.kind, LinkKind::kInterRegion);
  EXPECT_DOUBLE_EQ(region.bandwidth_bytes_per_s, 5e9 / 8);
  EXPECT_DOUBLE_EQ(region.latency_s, 6e-3);
  // Symmetric.
  EXPECT_DOUBLE_EQ(c.LinkBetween(12, 0).bandwidth_bytes_per_s, region.bandwidth_bytes_per_s);
}

TEST(Cluster, MeasuredOverridesReplaceDerivedFigures) {
  Cluster c = Parse(std::string(kTwoRegions) + R"(
[[links]]
between = ["a", "b"]
bandwidth = "12Gbps"
latency = "50us"

[[links]]
between = ["east", "west"]
bandwidth = "2Gbps"
)");
  Link ab = c.LinkBetween(1, 9);
  EXPECT_DOUBLE_EQ(ab.bandwidth_bytes_per_s, 12e9 / 8);
  EXPECT_DOUBLE_EQ(ab.latency_s, 50e-6);
  Link bc = c.LinkBetween(9, 12);
  EXPECT_DOUBLE_EQ(bc.bandwidth_bytes_per_s, 2e9 / 8);
  EXPECT_DOUBLE_EQ(bc.latency_s, 6e-3);                                // latency not overridden
  EXPECT_DOUBLE_EQ(c.LinkBetween(0, 7).bandwidth_bytes_per_s, 300e9);  // intra-node untouched
}

TEST(Cluster, ReplicasExpandToNumberedNodes) {
  Cluster c = Parse(R"(
[[nodes]]
name = "t4"
replicas = 3
device = "t4"
count = 8
nic_bandwidth = "100Gbps"
)");
  ASSERT_EQ(c.nodes.size(), 3u);
  EXPECT_EQ(c.nodes[2].name, "t4-2");
  EXPECT_EQ(c.num_devices(), 24);
}

TEST(Cluster, EmulationSettingsPerNodeOrPerDevice) {
  Cluster c = Parse(R"(
[[nodes]]
name = "n"
device = "a10g"
count = 2
nic_bandwidth = "1Gbps"
[[nodes.emulation]]
speed_factor = 1.0
memory = "1GiB"
[[nodes.emulation]]
speed_factor = 3.0
memory = "512MiB"
link_bandwidth = "1Gbps"

[[nodes]]
name = "m"
device = "a10g"
nic_bandwidth = "10Gbps"
)");
  EXPECT_TRUE(c.emulated());
  EXPECT_DOUBLE_EQ(c.emulation(1)->speed_factor, 3.0);
  EXPECT_DOUBLE_EQ(c.memory_bytes(1), 512.0 * 1024 * 1024);
  EXPECT_EQ(c.emulation(2), nullptr);
  EXPECT_DOUBLE_EQ(c.memory_bytes(2), 24 * kGiB);
  // The emulated link cap applies to every link of device 1.
  EXPECT_DOUBLE_EQ(c.LinkBetween(0, 1).bandwidth_bytes_per_s, 1e9 / 8);
  EXPECT_DOUBLE_EQ(c.LinkBetween(1, 2).bandwidth_bytes_per_s, 1e9 / 8);
  EXPECT_DOUBLE_EQ(c.LinkBetween(0, 2).bandwidth_bytes_per_s, 1e9 / 8);  // min NIC
}

TEST(Cluster, AnEmulatedDeviceOffersNoMoreMemoryThanItsType) {
  Result<Cluster> r = ParseClusterToml(R"([[nodes]]
name = "a"
device = "t4"
count = 1
[nodes.emulation]
memory = "64GiB"
)",
                                       "big.toml");
  ASSERT_FALSE(r.ok());
  EXPECT_NE(
      r.status().message().find("big.toml:6:10: error: nodes[0].emulation.memory: 64.0 GiB is more than a t4 "
                                "has (16.0 GiB)"),
      std::string::npos)
      << r.status().message();
}

// Each GPU type keeps a reserve for CUDA's context, NCCL's buffers and fragmentation (#47): a
// catalog default per generation with its source, overridden per device type, never on emulated
// devices; one that is not below the memory is an error naming the key.
TEST(Cluster, DeviceTypesReserveMemoryThatPlansDoNotUse) {
  for (const GpuSpec& s : GpuCatalog::Builtin().specs()) {
    EXPECT_GE(s.reserve_bytes, 1.0 * (1 << 30)) << s.name;
    EXPECT_LE(s.reserve_bytes, 3.0 * (1 << 30)) << s.name;
    EXPECT_NE(s.reserve_source.find("CUDA context"), std::string::npos) << s.name;
  }
  const std::string nodes = "[[nodes]]\nname = \"a\"\ndevice = \"t4\"\ncount = 1\n";
  Cluster plain = ParseClusterToml(nodes, "c.toml").value();
  EXPECT_DOUBLE_EQ(plain.reserve_bytes(0), 1.25 * (1 << 30));
  EXPECT_DOUBLE_EQ(plain.usable_memory_bytes(0), 16.0 * (1 << 30) - 1.25 * (1 << 30));
  Cluster given =
      ParseClusterToml("[device_types.t4]\nbase = \"t4\"\nreserve = \"3GiB\"\n" + nodes, "c.toml").value();
  EXPECT_DOUBLE_EQ(given.reserve_bytes(0), 3.0 * (1 << 30));
  EXPECT_EQ(given.spec(0).reserve_source, "cluster file c.toml");
  Cluster none =
      ParseClusterToml("[device_types.t4]\nbase = \"t4\"\nreserve = \"0B\"\n" + nodes, "c.toml").value();
  EXPECT_EQ(none.reserve_bytes(0), 0);
  Cluster emulated =
      ParseClusterToml(nodes + "[nodes.emulation]\nspeed_factor = 2.0\nmemory = \"1GiB\"\n", "c.toml")
          .value();
  EXPECT_EQ(emulated.reserve_bytes(0), 0);
  EXPECT_DOUBLE_EQ(emulated.usable_memory_bytes(0), 1.0 * (1 << 30));
  Result<Cluster> bad =
      ParseClusterToml("[device_types.t4]\nbase = \"t4\"\nreserve = \"20GiB\"\n" + nodes, "c.toml");
  ASSERT_FALSE(bad.ok());
  EXPECT_NE(
      bad.status().message().find("c.toml:3:11: error: device_types.t4.reserve: reserve 20.0 GiB is not less "
                                  "than the device's memory 16.0 GiB"),
      std::string::npos)
      << bad.status().message();
}

TEST(Cluster, FileCanAddAndOverrideDeviceTypes) {
  Cluster c = Parse(R"(
[device_types.a800]
base = "a100-80gb"
nvlink = "200GB/s"

[device_types.t4]
base = "t4"
fp16_flops = "60TFLOPS"

[device_types.mygpu]
memory = "12GiB"
memory_bandwidth = "500GB/s"
fp16_flops = "80TFLOPS"
fp32_flops = "20TFLOPS"
host_link = "16GB/s"

[[nodes]]
name = "x"
device = "a800"
count = 2
nic_bandwidth = "10Gbps"

[[nodes]]
name = "y"
device = "mygpu"
nic_bandwidth = "10Gbps"
)");
  EXPECT_DOUBLE_EQ(c.catalog.Find("a800")->peak_fp16_flops, 312e12);
  EXPECT_DOUBLE_EQ(c.LinkBetween(0, 1).bandwidth_bytes_per_s, 200e9);
  EXPECT_DOUBLE_EQ(c.catalog.Find("t4")->peak_fp16_flops, 60e12);
  EXPECT_DOUBLE_EQ(c.memory_bytes(2), 12 * kGiB);
  // The built-in catalog is untouched.
  EXPECT_DOUBLE_EQ(GpuCatalog::Builtin().Find("t4")->peak_fp16_flops, 65e12);
  // fp64: a base's figure, else half the fp32 figure unless given.
  EXPECT_DOUBLE_EQ(PeakFlops(*c.catalog.Find("a800"), Precision::kFp64), 19.5e12);
  EXPECT_DOUBLE_EQ(PeakFlops(*c.catalog.Find("mygpu"), Precision::kFp64), 10e12);
  EXPECT_DOUBLE_EQ(PeakFlops(*c.catalog.Find("mygpu"), Precision::kBf16), 80e12);
  EXPECT_DOUBLE_EQ(PeakFlops(*c.catalog.Find("mygpu"), Precision::kFp32), 20e12);
  Cluster given = Parse(R"(
[device_types.mygpu]
memory = "12GiB"
memory_bandwidth = "500GB/s"
fp16_flops = "80TFLOPS"
fp32_flops = "20TFLOPS"
fp64_flops = "0.3TFLOPS"
host_link = "16GB/s"
[[nodes]]
name = "y"
device = "mygpu"
)");
  EXPECT_DOUBLE_EQ(PeakFlops(*given.catalog.Find("mygpu"), Precision::kFp64), 0.3e12);
}

TEST(Cluster, EveryBuiltinExampleParses) {
  int clusters = 0;
  for (const auto& f : BuiltinFiles()) {
    if (f.kind != "clusters") continue;
    ++clusters;
    Result<Cluster> c = ParseClusterToml(f.text, std::string(f.path));
    EXPECT_TRUE(c.ok()) << c.status().message();
  }
  EXPECT_EQ(clusters, 9);  // local-emulated, t4-emulated, poplar-a..c, zorse-a..c, three-sites
}

TEST(Cluster, ZorseExamplesMatchPaperTable4) {
  struct Case {
    const char* name;
    int devices;
    size_t regions;
  } cases[] = {{"zorse-a", 20, 1}, {"zorse-b", 64, 1}, {"zorse-c", 128, 2}};
  for (const auto& k : cases) {
    Result<Cluster> c = LoadCluster(k.name);
    ASSERT_TRUE(c.ok()) << c.status().message();
    EXPECT_EQ(c->num_devices(), k.devices) << k.name;
    EXPECT_EQ(c->regions.size(), k.regions) << k.name;
  }
  // Cluster A: 4 H100-NVL at 835.5 and 16 A100 at 312 TFLOPS = 8,332 TFLOPS (Table 4).
  EXPECT_NEAR(LoadCluster("zorse-a")->total_peak_fp16_flops() / 1e12, 8332, 8332 * 1e-3);
}

// ---- Errors: one clear message per problem, with file:line:column, the key and the fix. -------

TEST(ClusterErrors, UnknownKeySuggestsAndListsValidKeys) {
  std::string e = Error("[[nodes]]\nname = \"a\"\ndevice = \"t4\"\nnic_bandwith = \"1Gbps\"\n");
  EXPECT_NE(e.find("c.toml:4:1: error: unknown key 'nic_bandwith' in [nodes[0]]; did you mean "
                   "'nic_bandwidth'?"),
            std::string::npos)
      << e;
  EXPECT_NE(e.find("Valid keys here: count, device, emulation, host, interconnect, intra_bandwidth, name, "
                   "nic_bandwidth, region, replicas"),
            std::string::npos)
      << e;
}

TEST(ClusterErrors, UnknownDeviceTypeSuggestsTheNearest) {
  std::string e = Error("[[nodes]]\nname = \"a\"\ndevice = \"a100-80g\"\n");
  EXPECT_NE(e.find("c.toml:3:10: error: nodes[0].device: unknown device type 'a100-80g'; did you mean "
                   "'a100-80gb'?"),
            std::string::npos)
      << e;
  EXPECT_NE(e.find("[device_types.a100-80g]"), std::string::npos) << e;
}

TEST(ClusterErrors, DuplicateNodeNamesPointAtBoth) {
  std::string e = Error(
      "[[nodes]]\nname = \"a\"\ndevice = \"t4\"\nnic_bandwidth = \"1Gbps\"\n"
      "[[nodes]]\nname = \"a\"\ndevice = \"t4\"\nnic_bandwidth = \"1Gbps\"\n");
  EXPECT_NE(
      e.find("c.toml:6:8: error: nodes[1].name: duplicate node name 'a' (first declared at c.toml:2:8)"),
      std::string::npos)
      << e;
}

TEST(ClusterErrors, ReplicasThatCollideWithANodeName) {
  std::string e = Error(
      "[[nodes]]\nname = \"t4-1\"\ndevice = \"t4\"\nnic_bandwidth = \"1Gbps\"\n"
      "[[nodes]]\nname = \"t4\"\nreplicas = 2\ndevice = \"t4\"\nnic_bandwidth = \"1Gbps\"\n");
  EXPECT_NE(e.find("duplicate node name 't4-1'"), std::string::npos) << e;
}

TEST(ClusterErrors, BandwidthMustBePositiveAndHaveAUnit) {
  std::string zero = Error("[[nodes]]\nname = \"a\"\ndevice = \"t4\"\nintra_bandwidth = \"0Gbps\"\n");
  EXPECT_NE(zero.find("c.toml:4:19: error: nodes[0].intra_bandwidth: a bandwidth must be greater than zero, "
                      "got \"0Gbps\""),
            std::string::npos)
      << zero;
  std::string negative = Error("[[nodes]]\nname = \"a\"\ndevice = \"t4\"\nintra_bandwidth = \"-5GB/s\"\n");
  EXPECT_NE(negative.find("must be greater than zero"), std::string::npos) << negative;
  std::string no_unit = Error("[[nodes]]\nname = \"a\"\ndevice = \"t4\"\nintra_bandwidth = 16\n");
  EXPECT_NE(no_unit.find("a bandwidth needs a unit; write it as a string like intra_bandwidth = \"50Gbps\""),
            std::string::npos)
      << no_unit;
}

TEST(ClusterErrors, WrongTypesMissingKeysAndRanges) {
  std::string e = Error("[[nodes]]\ndevice = \"t4\"\ncount = \"8\"\n");
  EXPECT_NE(e.find("c.toml:1:1: error: missing required key 'nodes[0].name' in [nodes[0]]; add it"),
            std::string::npos)
      << e;
  EXPECT_NE(e.find("c.toml:3:9: error: nodes[0].count: expected an integer, got a string (\"8\"); write it "
                   "like count = 1"),
            std::string::npos)
      << e;
  std::string range = Error("[[nodes]]\nname = \"a\"\ndevice = \"t4\"\ncount = 0\n");
  EXPECT_NE(range.find("nodes[0].count: 0 is out of range; it must be between 1 and 64"), std::string::npos)
      << range;
  EXPECT_NE(Error("name = \"x\"\n").find("missing required key 'nodes'"), std::string::npos);
}

TEST(ClusterErrors, WholeClusterChecks) {
  std::string nic =
      Error("[[nodes]]\nname = \"a\"\ndevice = \"t4\"\n[[nodes]]\nname = \"b\"\ndevice = \"t4\"\n");
  EXPECT_NE(nic.find("missing nic_bandwidth: the cluster has 2 nodes"), std::string::npos) << nic;
  std::string regions = Error(
      "[[nodes]]\nname = \"a\"\ndevice = \"t4\"\nnic_bandwidth = \"1Gbps\"\nregion = \"x\"\n"
      "[[nodes]]\nname = \"b\"\ndevice = \"t4\"\nnic_bandwidth = \"1Gbps\"\nregion = \"y\"\n");
  EXPECT_NE(regions.find("the nodes are in 2 regions (x, y) but [network] has no inter_region_bandwidth"),
            std::string::npos)
      << regions;
  std::string nvlink = Error("[[nodes]]\nname = \"a\"\ndevice = \"t4\"\ninterconnect = \"nvlink\"\n");
  EXPECT_NE(nvlink.find("device type 't4' has no NVLink"), std::string::npos) << nvlink;
  std::string emu = Error(
      "[[nodes]]\nname = \"a\"\ndevice = \"t4\"\ncount = 3\n[[nodes.emulation]]\nspeed_factor = 2.0\n"
      "[[nodes.emulation]]\nspeed_factor = 1.0\n");
  EXPECT_NE(emu.find("has 2 entries but the node has count = 3 devices"), std::string::npos) << emu;
}

TEST(ClusterErrors, LinkOverridesNameRealNodesOrRegions) {
  std::string base =
      "[[nodes]]\nname = \"alpha\"\ndevice = \"t4\"\nnic_bandwidth = \"1Gbps\"\n"
      "[[nodes]]\nname = \"beta\"\ndevice = \"t4\"\nnic_bandwidth = \"1Gbps\"\n";
  std::string e = Error(base + "[[links]]\nbetween = [\"alpha\", \"betta\"]\nbandwidth = \"1Gbps\"\n");
  EXPECT_NE(e.find("'betta' is neither a node nor a region; did you mean 'beta'?"), std::string::npos) << e;
  std::string mixed = Error(base + "[[links]]\nbetween = [\"alpha\", \"default\"]\nbandwidth = \"1Gbps\"\n");
  EXPECT_NE(mixed.find("mixes a node and a region"), std::string::npos) << mixed;
  std::string three =
      Error(base + "[[links]]\nbetween = [\"alpha\", \"beta\", \"alpha\"]\nbandwidth = \"1Gbps\"\n");
  EXPECT_NE(three.find("needs exactly two names"), std::string::npos) << three;
}

TEST(ClusterErrors, ReportsEveryProblemAtOnce) {
  std::string e = Error("[[nodes]]\nname = \"a\"\ndevice = \"t5\"\ncuont = 2\nregion = 3\n");
  EXPECT_NE(e.find("unknown device type 't5'"), std::string::npos) << e;
  EXPECT_NE(e.find("unknown key 'cuont'"), std::string::npos) << e;
  EXPECT_NE(e.find("nodes[0].region: expected a string, got an integer"), std::string::npos) << e;
}

TEST(ClusterErrors, SyntaxErrorHasAPosition) {
  std::string e = Error("[[nodes]]\nname = \"a\ndevice = \"t4\"\n");
  EXPECT_NE(e.find("c.toml:2:"), std::string::npos) << e;
  EXPECT_NE(e.find("TOML syntax"), std::string::npos) << e;
}

// #50: a node names the host it is; every node does, or none.
TEST(ClusterErrors, HostsAreNamedOnEveryNodeOrNone) {
  const std::string two =
      "[[nodes]]\nname = \"a\"\ndevice = \"t4\"\nnic_bandwidth = \"10Gbps\"\nhost = \"10.0.0.1\"\n"
      "[[nodes]]\nname = \"b\"\ndevice = \"t4\"\nnic_bandwidth = \"10Gbps\"\n";
  std::string e = Error(two);
  EXPECT_NE(e.find("c.toml:6:1: error: [nodes[1]]: missing host: other nodes name the host they run on, so "
                   "every node must"),
            std::string::npos)
      << e;
  Result<Cluster> ok = ParseClusterToml(two + "host = \"node-b.example\"\n", "c.toml");
  ASSERT_TRUE(ok.ok()) << ok.status().message();
  EXPECT_EQ(ok->nodes[0].host, "10.0.0.1");
  EXPECT_EQ(ok->nodes[1].host, "node-b.example");
  e = Error(
      "[[nodes]]\nname = \"a\"\ndevice = \"t4\"\nreplicas = 2\nnic_bandwidth = \"10Gbps\"\nhost = \"x\"\n");
  EXPECT_NE(e.find("a node with a host stands for one machine"), std::string::npos) << e;
  e = Error("[[nodes]]\nname = \"a\"\ndevice = \"t4\"\nhost = \"a b; rm\"\n");
  EXPECT_NE(e.find("is not a hostname or address"), std::string::npos) << e;
}

TEST(ThisHost, AHostIsItsNameOrAnAddressOfIt) {
  const ThisHost me{"node-7.cluster", {"127.0.0.1", "10.1.2.3", "fe80::1"}};
  EXPECT_TRUE(IsThisHost("node-7.cluster", me));
  EXPECT_TRUE(IsThisHost("node-7", me));
  EXPECT_TRUE(IsThisHost("10.1.2.3", me));
  EXPECT_FALSE(IsThisHost("10.1.2.4", me));
  EXPECT_FALSE(IsThisHost("", me));
  EXPECT_FALSE(IsThisHost("localhost", ThisHost{"other", {"10.9.9.9"}}));  // loopback names no host
  EXPECT_EQ(me.Describe(), "node-7.cluster (10.1.2.3)");
  const ThisHost found = FindThisHost();
  EXPECT_FALSE(found.addresses.empty());  // loopback at least
  EXPECT_EQ(LocalAddressToward("127.0.0.1"), "127.0.0.1");
  EXPECT_EQ(LocalAddressToward("no-such-host.invalid"), "");
}

TEST(ClusterErrors, UnknownBuiltinClusterSuggests) {
  Result<Cluster> c = LoadCluster("zorse-d");
  ASSERT_FALSE(c.ok());
  EXPECT_NE(c.status().message().find("did you mean 'zorse-"), std::string::npos) << c.status().message();
}

}  // namespace
}  // namespace motley
