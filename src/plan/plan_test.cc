#include "plan/plan.h"

#include <random>

#include <fmt/format.h>
#include <gtest/gtest.h>

#include "core/cluster_parse.h"
#include "plan/plan_io.h"

namespace motley {

void PrintTo(const LayerRange& r, std::ostream* os) { *os << "[" << r.begin << ", " << r.end << ")"; }

namespace {

Plan TwoGroupPipeline() {
  Plan p;
  p.strategy = "manual";
  p.seq_len = 64;
  p.precision = Precision::kFp32;
  p.schedule = PipelineSchedule::kInterleaved;
  p.zero_stage = 2;
  p.offload_params = true;
  p.offload_activations = true;
  GroupPlan a{{{0, 1}}, 1, {{0, 2, 3, 0}, {1, 2, 1, 0}}, {0, 1, 0, 0}, {}};
  GroupPlan b{{{1, 2}}, 1, {{2, 2, 2, 0}, {3, 2, 2, 0}}, {}, {}};
  p.groups = {a, b};
  return p;
}

TEST(Plan, MinistagesSplitLayersEvenly) {
  EXPECT_EQ(SplitLayers(10, 10, 4), (std::vector<LayerRange>{{10, 13}, {13, 16}, {16, 18}, {18, 20}}));
}

TEST(Plan, InterleavedMinistagesGoRoundRobinAcrossGroups) {
  // Zorse Figure 4 in small: 3 groups, 2 ministages each, 9/6/3 layers by speed.
  auto m = InterleavedMinistages({9, 6, 3}, {2, 2, 2});
  // Ministage sizes: g0 5+4, g1 3+3, g2 2+1 (earlier ministages take the extra layer).
  EXPECT_EQ(m[0], (std::vector<LayerRange>{{0, 5}, {10, 14}}));
  EXPECT_EQ(m[1], (std::vector<LayerRange>{{5, 8}, {14, 17}}));
  EXPECT_EQ(m[2], (std::vector<LayerRange>{{8, 10}, {17, 18}}));
  Plan p;
  p.schedule = PipelineSchedule::kInterleaved;
  for (auto& r : m) p.groups.push_back(GroupPlan{r, 1, {}, {}, {}});
  auto stages = MinistagesByLayer(p);
  ASSERT_EQ(stages.size(), 6u);
  EXPECT_EQ(stages[2].group, 2);
  EXPECT_EQ(stages[3].group, 0);
  EXPECT_EQ(stages[3].index, 1);
  // Uneven ministage counts: groups that run out are skipped.
  auto u = InterleavedMinistages({4, 2}, {4, 1});
  EXPECT_EQ(u[1], (std::vector<LayerRange>{{1, 3}}));
  EXPECT_EQ(u[0].back(), (LayerRange{5, 6}));
}

TEST(Plan, BatchFiguresFromPerDeviceSizes) {
  DevicePlan d{0, 4, 3, 2};
  EXPECT_EQ(d.sequences(), 4 + 4 + 2);
  EXPECT_EQ(d.microbatch_size_at(2), 2);
  Plan p = TwoGroupPipeline();
  EXPECT_EQ(p.global_batch_sequences(), 8);
  EXPECT_EQ(p.global_batch_tokens(), 8 * 64);
  EXPECT_EQ(BlockRouting(p.groups[1]), (std::vector<int>{2, 2, 3, 3}));
}

TEST(Plan, ValidPlanPasses) {
  Cluster c = LoadCluster("local-emulated").value();
  ModelSpec m = *FindModelPreset("llama-tiny");
  Status s = ValidatePlan(TwoGroupPipeline(), c, m);
  EXPECT_TRUE(s.ok()) << s.message();
}

TEST(Plan, ValidationNamesEveryFactor) {
  Cluster c = LoadCluster("local-emulated").value();
  ModelSpec m = *FindModelPreset("llama-tiny");
  Plan p = TwoGroupPipeline();
  p.groups[1].devices[0].device = 1;            // used twice
  p.groups[1].devices[1].num_microbatches = 1;  // 3 != 4 microbatches
  p.groups[0].routing = {0, 0, 0, 1, 1};        // wrong length and counts
  p.groups[1].ministages = {{1, 3}};            // past the model
  Status s = ValidatePlan(p, c, m);
  ASSERT_FALSE(s.ok());
  const std::string& e = s.message();
  EXPECT_NE(e.find("groups[1].devices[0] (device 1): the device is already used by groups[0].devices[1]"),
            std::string::npos)
      << e;
  EXPECT_NE(e.find("groups[1]: processes 3 microbatches but groups[0] processes 4"), std::string::npos) << e;
  EXPECT_NE(
      e.find(
          "groups[0]: routing must list one device of the group (a tensor-parallel leader) per microbatch"),
      std::string::npos)
      << e;
  EXPECT_NE(e.find("groups[1].ministages[0]: layers [1, 3) must hold at least one of the model's 2 layers"),
            std::string::npos)
      << e;
}

TEST(Plan, PipelinesNeedOneMicrobatchSize) {
  Cluster c = LoadCluster("local-emulated").value();
  Plan p = TwoGroupPipeline();
  p.groups[1].devices[1].microbatch_size = 1;
  p.groups[1].devices[1].num_microbatches = 4;
  Status s = ValidatePlan(p, c, *FindModelPreset("llama-tiny"));
  ASSERT_FALSE(s.ok());
  EXPECT_NE(s.message().find("same microbatch_size (1 here, 2 on groups[0].devices[0])"), std::string::npos)
      << s.message();
}

// #28: a plan file with num_microbatches of 2^39 (accepted by the reader) ran the lowering out of
// memory; the count is refused with the limit and the fix.
TEST(Plan, MicrobatchCountsBeyondWhatAStepRunsAreRefused) {
  Cluster c = LoadCluster("local-emulated").value();
  for (int64_t count : {int64_t{10'000'000}, int64_t{1} << 39}) {
    Plan p = TwoGroupPipeline();
    for (auto& g : p.groups)
      for (auto& d : g.devices) d.num_microbatches = count;
    Status s = ValidatePlan(p, c, *FindModelPreset("llama-tiny"));
    ASSERT_FALSE(s.ok());
    EXPECT_NE(
        s.message().find(fmt::format("groups[0].devices[0] (device 0): num_microbatches ({}) is more than "
                                     "motley runs in one step ({}:",
                                     count, kMaxMicrobatchesPerDevice)),
        std::string::npos)
        << s.message();
  }
}

// Random plans of every shape round-trip exactly through TOML and JSON.
Plan RandomPlan(std::mt19937& rng) {
  auto pick = [&](int lo, int hi) { return std::uniform_int_distribution<int>(lo, hi)(rng); };
  Plan p;
  p.strategy = pick(0, 1) ? "zorse" : "poplar";
  if (pick(0, 1)) p.model = "llama-7b";
  if (pick(0, 1)) p.cluster = "examples/clusters/zorse-a.toml";
  p.seq_len = pick(1, 4096);
  p.precision = static_cast<Precision>(pick(0, 2));
  p.schedule = static_cast<PipelineSchedule>(pick(0, 2));
  p.zero_stage = pick(0, 3);
  p.activation_checkpointing = pick(0, 1);
  p.offload_params = pick(0, 1);
  p.offload_activations = pick(0, 1);
  p.gradient_clipping = pick(0, 1);
  const char* flextp_modes[] = {"", "off", "migrate", "resize", "semi"};
  p.flextp_mode = flextp_modes[pick(0, 4)];
  int layer = 0, device = 0;
  for (int g = pick(1, 4); g > 0; --g) {
    GroupPlan gp;
    int n = pick(1, 10);
    gp.ministages = SplitLayers(layer, n, pick(1, n));
    layer += n;
    gp.tp_degree = pick(1, 2);
    for (int d = pick(1, 5); d > 0; --d)
      gp.devices.push_back({device++, pick(1, 8), pick(0, 6), pick(0, 1) ? pick(1, 8) : 0});
    if (pick(0, 1))
      for (int r = pick(1, 10); r > 0; --r) gp.routing.push_back(pick(0, device));
    p.groups.push_back(gp);
  }
  return p;
}

TEST(PlanIo, RandomPlansRoundTripExactlyThroughTomlAndJson) {
  std::mt19937 rng(7);
  for (int i = 0; i < 200; ++i) {
    Plan p = RandomPlan(rng);
    Result<Plan> from_toml = ParsePlanToml(PlanToToml(p), "p.toml");
    ASSERT_TRUE(from_toml.ok()) << from_toml.status().message() << "\n" << PlanToToml(p);
    EXPECT_EQ(*from_toml, p) << PlanToToml(p);
    Result<Plan> from_json = ParsePlanJson(PlanToJson(p).dump(), "p.json");
    ASSERT_TRUE(from_json.ok()) << from_json.status().message();
    EXPECT_EQ(*from_json, p) << PlanToJson(p).dump(2);
    EXPECT_EQ(PlanToToml(*from_toml), PlanToToml(p));
  }
}

TEST(PlanIo, BadPlanFilesGetPositionedErrors) {
  Result<Plan> p = ParsePlanToml(
      "seq_len = 8\n[[groups]]\nministages = [[0]]\ndevices = [0, 1]\nmicrobatch_size = [1]\n"
      "num_microbatches = [1, 1]\nnum_ministages = 2\n",
      "p.toml");
  ASSERT_FALSE(p.ok());
  const std::string& e = p.status().message();
  EXPECT_NE(e.find("p.toml:3:14: error: groups[0].ministages: expected layer ranges [begin, end)"),
            std::string::npos)
      << e;
  EXPECT_NE(e.find("groups[0].microbatch_size: has 1 entries but devices has 2"), std::string::npos) << e;
  EXPECT_NE(e.find("unknown key 'num_ministages' in [groups[0]]; did you mean 'ministages'?"),
            std::string::npos)
      << e;
  Result<Plan> j = ParsePlanJson(
      "{\"seq_len\": 8, \"groups\": [{\"ministages\": [[0, 1]], \"devices\": [\"a\"], "
      "\"microbatch_size\": [1], \"num_microbatches\": [1]}]}",
      "p.json");
  ASSERT_FALSE(j.ok());
  EXPECT_NE(j.status().message().find("groups[0].devices: expected an array of integers"), std::string::npos)
      << j.status().message();
  // #48: an integer beyond int64 is named, not read as a float or wrapped to a negative number.
  Result<Plan> big = ParsePlanJson(
      "{\"seq_len\": 8, \"groups\": [{\"ministages\": [[0, 1]], \"devices\": [0], "
      "\"microbatch_size\": [18446744073709551615], \"num_microbatches\": [1]}]}",
      "p.json");
  ASSERT_FALSE(big.ok());
  EXPECT_EQ(big.status().message(),
            "p.json: error: groups[0].microbatch_size[0]: a number beyond 2^63 - 1 is out of range for every "
            "plan figure");
}

}  // namespace
}  // namespace motley
