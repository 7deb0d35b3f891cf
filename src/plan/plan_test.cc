#include "plan/plan.h"

#include <random>

#include <gtest/gtest.h>

#include "core/cluster_parse.h"
#include "plan/plan_io.h"

namespace motley {
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
  GroupPlan a{0, 1, 1, 1, {{0, 2, 3, 0}, {1, 2, 1, 0}}, {0, 1, 0, 0}};
  GroupPlan b{1, 2, 1, 1, {{2, 2, 2, 0}, {3, 2, 2, 0}}, {}};
  p.groups = {a, b};
  return p;
}

TEST(Plan, MinistagesSplitLayersEvenly) {
  GroupPlan g;
  g.layer_begin = 10;
  g.layer_end = 20;
  g.num_ministages = 4;
  EXPECT_EQ(g.ministage_layers(0), std::make_pair(10, 13));
  EXPECT_EQ(g.ministage_layers(1), std::make_pair(13, 16));
  EXPECT_EQ(g.ministage_layers(2), std::make_pair(16, 18));
  EXPECT_EQ(g.ministage_layers(3), std::make_pair(18, 20));
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
  p.groups[1].devices[0].device = 1;             // used twice
  p.groups[1].devices[1].num_microbatches = 1;   // 3 != 4 microbatches
  p.groups[0].routing = {0, 0, 0, 1, 1};         // wrong length and counts
  p.groups[1].layer_end = 3;                     // past the model
  Status s = ValidatePlan(p, c, m);
  ASSERT_FALSE(s.ok());
  const std::string& e = s.message();
  EXPECT_NE(e.find("groups[1].devices[0] (device 1): the device is already used by groups[0].devices[1]"),
            std::string::npos) << e;
  EXPECT_NE(e.find("groups[1]: processes 3 microbatches but groups[0] processes 4"), std::string::npos) << e;
  EXPECT_NE(e.find("groups[0]: routing must list one device of the group per microbatch"), std::string::npos) << e;
  EXPECT_NE(e.find("the groups cover layers [0, 3) but the model 'llama-tiny' has 2 layers"), std::string::npos) << e;
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

// Random plans of every shape round-trip exactly through TOML and JSON.
Plan RandomPlan(std::mt19937& rng) {
  auto pick = [&](int lo, int hi) { return std::uniform_int_distribution<int>(lo, hi)(rng); };
  Plan p;
  p.strategy = pick(0, 1) ? "zorse" : "poplar";
  p.seq_len = pick(1, 4096);
  p.precision = static_cast<Precision>(pick(0, 2));
  p.schedule = static_cast<PipelineSchedule>(pick(0, 2));
  p.zero_stage = pick(0, 3);
  p.activation_checkpointing = pick(0, 1);
  p.offload_params = pick(0, 1);
  p.offload_activations = pick(0, 1);
  int layer = 0, device = 0;
  for (int g = pick(1, 4); g > 0; --g) {
    GroupPlan gp;
    gp.layer_begin = layer;
    gp.layer_end = layer += pick(1, 10);
    gp.num_ministages = pick(1, gp.num_layers());
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
  Result<Plan> p = ParsePlanToml("seq_len = 8\n[[groups]]\nlayers = [0]\ndevices = [0, 1]\nmicrobatch_size = [1]\n"
                                 "num_microbatches = [1, 1]\nministages = 2\n",
                                 "p.toml");
  ASSERT_FALSE(p.ok());
  const std::string& e = p.status().message();
  EXPECT_NE(e.find("p.toml:3:10: error: groups[0].layers: expected [begin, end), two integers; got 1 values"),
            std::string::npos) << e;
  EXPECT_NE(e.find("groups[0].microbatch_size: has 1 entries but devices has 2"), std::string::npos) << e;
  EXPECT_NE(e.find("unknown key 'ministages' in [groups[0]]; did you mean 'num_ministages'?"), std::string::npos) << e;
  Result<Plan> j = ParsePlanJson("{\"seq_len\": 8, \"groups\": [{\"layers\": [0, 1], \"devices\": [\"a\"], "
                                 "\"microbatch_size\": [1], \"num_microbatches\": [1]}]}",
                                 "p.json");
  ASSERT_FALSE(j.ok());
  EXPECT_NE(j.status().message().find("groups[0].devices: expected an array of integers"), std::string::npos)
      << j.status().message();
}

}  // namespace
}  // namespace motley
