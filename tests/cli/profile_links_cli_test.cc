// `motley profile --links`: link measurement by launched ranks on emulated clusters.
#include <string>

#include <gtest/gtest.h>

#include "cli/cli_helpers.h"
#include "cli/training_fixtures.h"

using namespace motley_test;

namespace {

TEST(ProfileLinks, MeasuresEachDistinctLinkOfAnEmulatedCluster) {
  // Two alike nodes of two devices joined by 200 Mbps (25 MB/s): three links to report (within
  // a, within b, a <-> b) from two measurements (within, between).
  TempDir dir;
  dir.Write("model.toml", kModel);
  dir.Write("cluster.toml", std::string("name = \"slow-pair\"\n") + kCpuType + R"([[nodes]]
name = "a"
device = "cpu"
count = 2
intra_bandwidth = "10GB/s"
nic_bandwidth = "200Mbps"
[nodes.emulation]
speed_factor = 1.0
[[nodes]]
name = "b"
device = "cpu"
count = 2
intra_bandwidth = "10GB/s"
nic_bandwidth = "200Mbps"
[nodes.emulation]
speed_factor = 1.0
)");
  CliRun r = Motley(
      "profile --cluster cluster.toml --model model.toml --seq-len 16 --precision fp32 --links "
      "--max-microbatch 2 --repeats 1 -o profile.json",
      false, dir.path().string());
  ASSERT_EQ(r.exit_code, 0) << r.output;
  EXPECT_CONTAINS(r.output, "a <-> b");
  std::ifstream in(dir.Join("profile.json"));
  const auto profile = nlohmann::json::parse(in);
  ASSERT_EQ(profile["links"].size(), 3u) << profile.dump();
  for (const auto& l : profile["links"]) {
    const std::string a = l["between"][0].get<std::string>();
    const std::string b = l["between"][1].get<std::string>();
    const double bandwidth = l["bandwidth_bytes_per_s"];
    SCOPED_TRACE(a + "-" + b);
    if (a != b) {
      // Paced to 25 MB/s, plus Gloo's own time: a little slower, never faster (up to fitting noise).
      EXPECT_GT(bandwidth, 0.6 * 25e6);
      EXPECT_LT(bandwidth, 1.2 * 25e6);
    } else {
      EXPECT_GT(bandwidth, 25e6);  // within a node: much faster than between
    }
    EXPECT_GE(static_cast<double>(l["latency_s"]), 0.0);
    // A small all-reduce's time beyond its ring steps: never negative, far below a step.
    EXPECT_GE(static_cast<double>(l["collective_overhead_s"]), 0.0);
    EXPECT_LT(static_cast<double>(l["collective_overhead_s"]), 0.05);
  }
  EXPECT_CONTAINS(r.output, "a call");
}

TEST(ProfileLinks, UnderALauncherEachTypeIsMeasuredByItsFirstRankAtOnce) {
  TempDir dir;
  dir.Write("model.toml", kModel);
  dir.Write("cluster.toml", std::string("name = \"two-types\"\n") + kCpuType + R"([device_types.cpu-b]
base = "cpu"
memory = "1GiB"
[[nodes]]
name = "a"
device = "cpu"
count = 2
intra_bandwidth = "10GB/s"
nic_bandwidth = "200Mbps"
[nodes.emulation]
speed_factor = 1.0
[[nodes]]
name = "b"
device = "cpu-b"
count = 1
nic_bandwidth = "200Mbps"
[nodes.emulation]
speed_factor = 1.0
)");
  CliRun r =
      Motley("launch --nproc 3 -- " + std::string(MOTLEY_BIN) +
                 " profile --cluster cluster.toml --model model.toml --seq-len 16 --precision fp32 --links "
                 "--max-microbatch 2 --repeats 1 --no-cache -o profile.json",
             false, dir.path().string());
  ASSERT_EQ(r.exit_code, 0) << r.output;
  // Rank 0 measured cpu, rank 2 (node b's device) cpu-b; rank 0 wrote both.
  EXPECT_CONTAINS(r.output, "[rank 0]   cpu: layer and head at microbatch 1");
  EXPECT_CONTAINS(r.output, "[rank 2]   cpu-b: layer and head at microbatch 1");
  std::ifstream in(dir.Join("profile.json"));
  const auto profile = nlohmann::json::parse(in);
  std::set<std::string> types;
  for (const auto& e : profile["entries"]) types.insert(e["device_type"].get<std::string>());
  EXPECT_EQ(types, (std::set<std::string>{"cpu", "cpu-b"}));
  EXPECT_EQ(profile["links"].size(), 2u);  // within a; a <-> b (b has one device)
  // The wrong number of ranks is one clear error.
  CliRun wrong = Motley("launch --nproc 2 -- " + std::string(MOTLEY_BIN) +
                            " profile --cluster cluster.toml --model model.toml --seq-len 16 --links",
                        false, dir.path().string());
  EXPECT_NE(wrong.exit_code, 0);
  EXPECT_CONTAINS(wrong.output,
                  "needs one rank per device of two-types (3 devices), but 2 ranks were started");
}

}  // namespace
