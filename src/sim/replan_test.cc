#include "sim/replan.h"

#include <gtest/gtest.h>

#include "core/cluster_parse.h"
#include "plan/plan_io.h"
#include "sim/cost_model.h"
#include "sim/plan_evaluator.h"

namespace motley {
namespace {

PlanRequest Request(int64_t sequences) {
  PlanRequest r;
  r.global_batch_sequences = sequences;
  r.seq_len = 64;
  r.precision = Precision::kFp32;
  return r;
}

// Poplar's plan for the local emulated cluster; then device 1 (a fast one) runs 3x slower: the
// re-plan gives it fewer sequences, keeps every rank on its device, and is predicted faster on the
// cluster as measured than the plan it replaces.
TEST(ReplanInPlace, DataParallelismMovesBatchOffASlowedDevice) {
  const Cluster cluster = LoadCluster("local-emulated").value();
  const ModelSpec model = *FindModelPreset("llama-1m");
  const PlanRequest request = Request(64);
  CostModel costs(cluster, model, nullptr, request.seq_len, request.precision,
                  request.activation_checkpointing);
  StrategyOutcome first =
      PlanWithStrategy("poplar", cluster, model, costs, request, SimulationEvaluator(cluster, model, costs));
  ASSERT_TRUE(first.status.ok()) << first.status.message();
  ASSERT_EQ(first.plan.groups.size(), 1u);
  Cluster measured = cluster;
  measured.measured_slowdown[1] = 3.0;
  Result<Replanned> r = ReplanInPlace(first.plan, measured, model, nullptr, request);
  ASSERT_TRUE(r.ok()) << r.status().message();
  const GroupPlan& before = first.plan.groups[0];
  const GroupPlan& after = r->plan.groups[0];
  ASSERT_EQ(after.devices.size(), before.devices.size());
  int64_t total = 0;
  for (size_t i = 0; i < after.devices.size(); ++i) {
    EXPECT_EQ(after.devices[i].device, before.devices[i].device) << "rank " << i << " keeps its device";
    total += after.devices[i].sequences();
  }
  EXPECT_EQ(total, 64);
  auto sequences_of = [](const GroupPlan& g, int device) {
    for (const DevicePlan& d : g.devices)
      if (d.device == device) return d.sequences();
    return int64_t{-1};
  };
  EXPECT_LT(sequences_of(after, 1), sequences_of(before, 1)) << PlanToToml(r->plan);
  EXPECT_LT(r->predicted_step_s, r->current_step_s * 0.9) << r->why;
  EXPECT_NE(r->why.find("sequences per device"), std::string::npos) << r->why;
}

// A pipeline of the four devices as four one-device groups of 3 layers each: device 2 slowed 3x.
// The same groups in the same order, and fewer layers on the slowed one.
TEST(ReplanInPlace, APipelineMovesLayersOffASlowedStage) {
  const Cluster cluster = LoadCluster("local-emulated").value();
  ModelSpec model = *FindModelPreset("llama-1m");
  model.num_layers = 12;
  Plan current;
  current.seq_len = 64;
  current.precision = Precision::kFp32;
  current.zero_stage = 2;
  current.schedule = PipelineSchedule::k1F1B;
  const int layers = static_cast<int>(model.num_layers);
  for (int d = 0; d < 4; ++d) {
    GroupPlan g;
    g.ministages = {{d * layers / 4, (d + 1) * layers / 4}};
    g.devices = {{d, 2, 8, 0}};
    current.groups.push_back(g);
  }
  Cluster measured = cluster;
  measured.measured_slowdown[2] = 3.0;
  Result<Replanned> r = ReplanInPlace(current, measured, model, nullptr, Request(16));
  ASSERT_TRUE(r.ok()) << r.status().message();
  ASSERT_EQ(r->plan.groups.size(), 4u);
  for (int g = 0; g < 4; ++g) {
    ASSERT_EQ(r->plan.groups[g].devices.size(), 1u);
    EXPECT_EQ(r->plan.groups[g].devices[0].device, g);
  }
  EXPECT_LT(r->plan.groups[2].num_layers(), current.groups[2].num_layers()) << PlanToToml(r->plan);
  EXPECT_LT(r->predicted_step_s, r->current_step_s) << r->why;
  EXPECT_FALSE(r->plan.groups[0].routing.empty()) << "the runtime needs the routing";
}

}  // namespace
}  // namespace motley
