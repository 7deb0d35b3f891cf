#include "sim/profile.h"

#include <filesystem>

#include <gtest/gtest.h>

#include "core/cluster_parse.h"
#include "core/toml_reader.h"
#include "sim/cost_model.h"

namespace motley {
namespace {

ProfileEntry Entry() {
  ProfileEntry e;
  e.device_type = "t4";
  e.model = "llama-7b";
  e.hidden_size = 4096;
  e.seq_len = 1024;
  e.precision = Precision::kFp16;
  e.points = {{1, 10, 30}, {2, 15, 45}, {4, 25, 75}};
  return e;
}

TEST(Profile, InterpolatesBetweenPointsAndExtrapolatesLinearly) {
  ProfileEntry e = Entry();
  EXPECT_DOUBLE_EQ(e.ForwardS(1), 0.010);
  EXPECT_DOUBLE_EQ(e.ForwardS(3), 0.020);  // between 2 and 4
  EXPECT_DOUBLE_EQ(e.ForwardS(8), 0.045);  // the last segment's slope: 5 ms per sequence
  EXPECT_DOUBLE_EQ(e.BackwardS(1.5), 0.0375);
  // Monotone: more sequences never take less time.
  for (double b = 0.5; b < 16; b += 0.25) EXPECT_LE(e.ForwardS(b), e.ForwardS(b + 0.25));
  // A fit takes over past the last point.
  e.forward_fit = LinearFit{6, 0};
  e.backward_fit = LinearFit{18, 0};
  EXPECT_DOUBLE_EQ(e.ForwardS(8), 0.048);
}

TEST(Profile, JsonRoundTripAndLookup) {
  Profile p;
  p.entries.push_back(Entry());
  p.entries[0].resize_overhead = {{0.125, 0.3}, {0.5, 0.45}};
  p.entries[0].borrowed_cost = 1.7;
  p.links.push_back({"a", "b", 1e9, 1e-5, 2e-4, "gloo"});
  Result<Profile> back = ParseProfileJson(ProfileToJson(p).dump(), "p.json");
  ASSERT_TRUE(back.ok()) << back.status().message();
  ASSERT_EQ(back->entries.size(), 1u);
  EXPECT_DOUBLE_EQ(back->entries[0].ForwardS(3), 0.020);
  EXPECT_EQ(back->entries[0].resize_overhead, p.entries[0].resize_overhead);
  EXPECT_DOUBLE_EQ(back->entries[0].borrowed_cost, 1.7);
  // A ratio outside (0, 1) is one clear error.
  nlohmann::json bad = ProfileToJson(p);
  bad["entries"][0]["resize_overhead"][1][0] = 1.5;
  Result<Profile> rejected = ParseProfileJson(bad.dump(), "p.json");
  ASSERT_FALSE(rejected.ok());
  EXPECT_NE(rejected.status().message().find(
                "p.json: error: entry for t4: resize_overhead needs [ratio, fraction]"),
            std::string::npos)
      << rejected.status().message();
  nlohmann::json negative = ProfileToJson(p);
  negative["entries"][0]["borrowed_cost"] = -1;
  rejected = ParseProfileJson(negative.dump(), "p.json");
  ASSERT_FALSE(rejected.ok());
  EXPECT_NE(rejected.status().message().find(
                "p.json: error: entry for t4: borrowed_cost is a borrowed unit's time"),
            std::string::npos)
      << rejected.status().message();
  EXPECT_EQ(back->links[0].b, "b");
  EXPECT_DOUBLE_EQ(back->links[0].collective_overhead_s, 2e-4);
  EXPECT_EQ(back->links[0].library, "gloo");
  nlohmann::json unknown = ProfileToJson(p);
  unknown["links"][0]["library"] = "mpi";
  rejected = ParseProfileJson(unknown.dump(), "p.json");
  ASSERT_FALSE(rejected.ok());
  EXPECT_NE(rejected.status().message().find("link 0: library is \"gloo\" or \"nccl\", not \"mpi\""),
            std::string::npos)
      << rejected.status().message();
  const ModelSpec& m = *FindModelPreset("llama-7b");
  EXPECT_NE(back->Find("t4", m, 1024, Precision::kFp16), nullptr);
  EXPECT_NE(back->Find("t4", m, 1024, Precision::kBf16), nullptr);  // 16-bit formats stand in for each other
  EXPECT_EQ(back->Find("t4", m, 2048, Precision::kFp16), nullptr);
  EXPECT_EQ(back->Find("t4", m, 1024, Precision::kFp32), nullptr);
  EXPECT_EQ(back->Find("a10g", m, 1024, Precision::kFp16), nullptr);
}

TEST(Profile, ATensorParallelRankTakesItsMeasuredShareOfALayerAndTheWholeHead) {
  Cluster c = LoadCluster("poplar-b").value();  // device 0: a v100
  ModelSpec m = *FindModelPreset("llama-tiny");
  ProfileEntry e;
  e.device_type = "v100-16gb";
  e.model = m.name;
  e.hidden_size = m.hidden_size;
  e.seq_len = 64;
  e.precision = Precision::kBf16;
  e.points = {{1, 10, 30}, {4, 40, 120}};
  e.head_points = {{1, 2, 6}, {4, 8, 24}};
  e.tp_points[2] = {{1, 6, 18}, {4, 24, 72}};  // a share of 0.6, not 0.5
  Profile p;
  p.entries.push_back(e);
  Result<Profile> back = ParseProfileJson(ProfileToJson(p).dump(), "p.json");
  ASSERT_TRUE(back.ok()) << back.status().message();
  ASSERT_EQ(back->entries[0].tp_points.at(2).size(), 2u);
  CostModel costs(c, m, &*back, 64, Precision::kBf16, true);
  Op fwd;
  fwd.kind = OpKind::kForward;
  fwd.layer_begin = 0;
  fwd.layer_end = 3;
  fwd.head = true;
  fwd.sequences = 4;
  fwd.tp_degree = 2;
  // The head: a rank's vocabulary columns, the measured whole head divided by the degree.
  EXPECT_NEAR(costs.ComputeS(0, fwd), (3 * 24 + 8 / 2.0) * 1e-3, 1e-12);
  Op bwd = fwd;
  bwd.kind = OpKind::kBackward;
  EXPECT_NEAR(costs.ComputeS(0, bwd), (3 * 72 + 24 / 2.0) * 1e-3, 1e-12);
  fwd.tp_degree = 4;  // not measured: the whole layer divided, and the head
  EXPECT_NEAR(costs.ComputeS(0, fwd), (3 * 40.0 / 4 + 8 / 4.0) * 1e-3, 1e-12);
}

TEST(Profile, MeasuredLinksReplaceTheClustersFigures) {
  Cluster c = LoadCluster("poplar-b").value();  // nodes v100 and t4, 25 Gbps between them
  const ModelSpec& m = *FindModelPreset("llama-tiny");
  Profile p;
  p.links.push_back({"t4", "v100", 1e9, 1e-3});  // measured: 1 GB/s, 1 ms
  CostModel measured(c, m, &p, 64, Precision::kBf16, true);
  CostModel derived(c, m, nullptr, 64, Precision::kBf16, true);
  EXPECT_DOUBLE_EQ(measured.TransferS(0, 2, 1e9), 1e-3 + 1.0);
  EXPECT_DOUBLE_EQ(derived.TransferS(0, 2, 1e9), c.network.inter_node_latency_s + 1e9 / (25e9 / 8));
  EXPECT_DOUBLE_EQ(measured.TransferS(0, 1, 1e9), derived.TransferS(0, 1, 1e9));  // inside a node: unchanged
}

TEST(Profile, LinksMeasuredOnGlooTimeCollectivesAsGlooRunsThem) {
  Cluster c = LoadCluster("poplar-b").value();  // devices 0, 1 on node v100; 2, 3 on node t4
  const ModelSpec& m = *FindModelPreset("llama-tiny");
  Profile p;
  p.links.push_back({"t4", "v100", 1e9, 1e-3, 0, "gloo"});  // measured on Gloo: 1 GB/s, 1 ms
  const CostModel gloo(c, m, &p, 64, Precision::kBf16, true);
  p.links[0].library = "nccl";
  const CostModel nccl(c, m, &p, 64, Precision::kBf16, true);
  const std::vector<int> all = {0, 1, 2, 3};
  // Gloo's reduce-scatter is an all-to-all: each node's two devices send a quarter to each of the
  // other node's two — the whole payload through its card (1 GB/s, the fastest of its links).
  EXPECT_DOUBLE_EQ(gloo.CollectiveS(OpKind::kReduceScatter, all, 1e9), 1e-3 + 1.0);
  // Its all-reduce one ring in the group's order: 2 passes x 3 rounds of a quarter, paced by the
  // link between the nodes.
  EXPECT_DOUBLE_EQ(gloo.CollectiveS(OpKind::kAllReduce, all, 1e9), 2 * 3 * (1e-3 + 0.25));
  // NCCL reduces within each node first and sends a quarter across.
  EXPECT_LT(nccl.CollectiveS(OpKind::kReduceScatter, all, 1e9), 0.3);
  // Emulated devices are CPU processes: Gloo, whatever the profile says.
  c.nodes[0].emulation.assign(2, EmulationConfig{});
  c.nodes[1].emulation.assign(2, EmulationConfig{});
  const CostModel emulated(c, m, &p, 64, Precision::kBf16, true);
  EXPECT_DOUBLE_EQ(emulated.CollectiveS(OpKind::kReduceScatter, all, 1e9), 1e-3 + 1.0);
}

TEST(Profile, BadFilesSayWhatIsWrong) {
  EXPECT_NE(ParseProfileJson("{}", "p.json").status().message().find("not a motley profile"),
            std::string::npos);
  Result<Profile> bad = ParseProfileJson(
      R"({"format": "motley-profile-1", "entries": [{"device_type": "t4", "hidden_size": 8, "seq_len": 8,
          "points": [{"microbatch": 1, "forward_ms": -1, "backward_ms": 2}]}]})",
      "p.json");
  ASSERT_FALSE(bad.ok());
  EXPECT_NE(bad.status().message().find("forward_ms and backward_ms > 0"), std::string::npos);
  // Found by the fuzzer: a tp_points key that is not a number threw from std::stoi (an uncaught
  // std::invalid_argument ended the process).
  Result<Profile> key = ParseProfileJson(
      R"({"format": "motley-profile-1", "entries": [{"device_type": "t4", "hidden_size": 8, "seq_len": 8,
          "points": [{"microbatch": 1, "forward_ms": 1, "backward_ms": 2}], "tp_points": {"two": []}}]})",
      "p.json");
  ASSERT_FALSE(key.ok());
  EXPECT_NE(key.status().message().find("tp_points key \"two\" must be a tensor-parallel degree"),
            std::string::npos)
      << key.status().message();
  // #48: a field of the wrong type names the entry, without the JSON library's tag; a size beyond
  // int64 is shown as written.
  Result<Profile> type = ParseProfileJson(
      R"({"format": "motley-profile-1", "entries": [{"device_type": "t4", "hidden_size": 8, "seq_len": 8,
          "points": [{"microbatch": "one", "forward_ms": 1, "backward_ms": 2}]}]})",
      "p.json");
  ASSERT_FALSE(type.ok());
  EXPECT_NE(type.status().message().find(
                "p.json: error: entry 0 (t4): a field is missing or of the wrong type (type "
                "must be number, but is string)"),
            std::string::npos)
      << type.status().message();
  EXPECT_EQ(type.status().message().find("json.exception"), std::string::npos);
  Result<Profile> big = ParseProfileJson(
      R"({"format": "motley-profile-1", "entries": [{"device_type": "t4", "hidden_size": 18446744073709551615,
          "seq_len": 8, "points": []}]})",
      "p.json");
  ASSERT_FALSE(big.ok());
  EXPECT_NE(big.status().message().find(
                "\"hidden_size\" must be an integer from 1 to 2^24, not 18446744073709551615"),
            std::string::npos)
      << big.status().message();
}

TEST(Profile, ImportsTheZorseMeasurements) {
  const std::filesystem::path file =
      std::filesystem::path(MOTLEY_SOURCE_DIR) / "../shared/data/zorse-measured/model_latencies.json";
  if (!std::filesystem::exists(file)) GTEST_SKIP() << "no " << file << " beside the checkout";
  Result<std::string> text = ReadTextFile(file.string());
  ASSERT_TRUE(text.ok());
  Result<Profile> p = ImportZorseMeasured(*text, file.string());
  ASSERT_TRUE(p.ok()) << p.status().message();
  // The README's example: Llama-7B, seq 1024, fp16, A100-80GB: 2.54 ms forward, 7.42 backward at b=1.
  const ModelSpec& m = *FindModelPreset("llama-7b");
  const ProfileEntry* a100 = p->Find("a100-80gb", m, 1024, Precision::kFp16);
  ASSERT_NE(a100, nullptr);
  EXPECT_NEAR(a100->ForwardS(1) * 1e3, 2.54, 0.01);
  EXPECT_NEAR(a100->BackwardS(1) * 1e3, 7.42, 0.01);
  EXPECT_NE(p->Find("t4", m, 1024, Precision::kFp16), nullptr);
  EXPECT_NE(p->Find("h100-nvl", *FindModelPreset("llama-65b"), 4096, Precision::kFp16), nullptr);
  // The cost model uses it for the devices it covers and the roofline for the rest.
  Cluster c = LoadCluster("zorse-a").value();
  CostModel costs(c, m, &*p, 1024, Precision::kFp16, true);
  EXPECT_EQ(costs.ComputeSource(4), "profile");  // an A100
  EXPECT_NEAR(costs.LayerForwardS(4, 1) * 1e3, 2.54, 0.01);
  EXPECT_EQ(costs.ComputeSource(0), "roofline");  // the H100-NVLs were measured at 512 and 4096 only
}

}  // namespace
}  // namespace motley

namespace motley {
namespace {

// A reserve `motley profile` measured on a GPU (#47) replaces the catalog's default for that type
// in plan, simulate and train — not one the cluster file gives; the source says which; it survives
// the file; an impossible figure is refused.
TEST(Profile, AMeasuredReserveReplacesTheCatalogsDefault) {
  const std::string text = R"({"format": "motley-profile-1", "entries": [
    {"device_type": "t4", "hidden_size": 64, "seq_len": 32, "precision": "fp16",
     "points": [{"microbatch": 1, "forward_ms": 1, "backward_ms": 2}],
     "reserve": {"context_bytes": 400000000, "communication_bytes": 200000000, "fragmentation_bytes": 100000000}}]})";
  Profile p = ParseProfileJson(text, "p.json").value();
  ASSERT_TRUE(p.entries[0].reserve);
  EXPECT_DOUBLE_EQ(p.entries[0].reserve->total_bytes(), 7e8);
  Profile back = ParseProfileJson(ProfileToJson(p).dump(), "back.json").value();
  ASSERT_TRUE(back.entries[0].reserve);
  EXPECT_DOUBLE_EQ(back.entries[0].reserve->communication_bytes, 2e8);

  const std::string nodes = "[[nodes]]\nname = \"a\"\ndevice = \"t4\"\ncount = 1\n";
  Cluster plain = ParseClusterToml(nodes, "c.toml").value();
  ASSERT_TRUE(ApplyMeasuredReserves(p, "p.json", &plain).ok());
  EXPECT_DOUBLE_EQ(plain.reserve_bytes(0), 7e8);
  EXPECT_EQ(plain.spec(0).reserve_source.rfind("measured by motley profile (p.json: context", 0), 0)
      << plain.spec(0).reserve_source;
  Cluster given =
      ParseClusterToml("[device_types.t4]\nbase = \"t4\"\nreserve = \"3GiB\"\n" + nodes, "c.toml").value();
  ASSERT_TRUE(ApplyMeasuredReserves(p, "p.json", &given).ok());
  EXPECT_DOUBLE_EQ(given.reserve_bytes(0), 3.0 * (1 << 30)) << "the cluster file's word stands";

  std::string huge = text;
  huge.replace(huge.find("400000000"), 9, "40000000000");
  Status s = ApplyMeasuredReserves(ParseProfileJson(huge, "huge.json").value(), "huge.json", &plain);
  ASSERT_FALSE(s.ok());
  EXPECT_NE(s.message().find("huge.json: the reserve measured on t4"), std::string::npos) << s.message();
  std::string negative = text;
  negative.replace(negative.find("100000000}"), 9, "-10000000");
  Result<Profile> bad = ParseProfileJson(negative, "neg.json");
  ASSERT_FALSE(bad.ok());
  EXPECT_NE(bad.status().message().find("reserve figures must be bytes >= 0"), std::string::npos)
      << bad.status().message();
}

}  // namespace
}  // namespace motley
