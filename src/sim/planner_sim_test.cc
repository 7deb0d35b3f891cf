// Planners checked against the simulator: the memory model against simulated peaks, and plans
// against the baselines they should beat.
#include <random>

#include <gtest/gtest.h>

#include "core/cluster_parse.h"
#include "plan/lower.h"
#include "plan/memory_model.h"
#include "plan/poplar_planner.h"
#include "sim/simulator.h"

namespace motley {
namespace {

TEST(MemoryModel, BoundsTheSimulatedPeakOfDataParallelPlans) {
  Cluster cluster = LoadCluster("local-emulated").value();
  ModelSpec m = *FindModelPreset("llama-1m");
  std::mt19937 rng(5);
  auto pick = [&](int lo, int hi) { return std::uniform_int_distribution<int>(lo, hi)(rng); };
  for (int trial = 0; trial < 80; ++trial) {
    Plan p;
    p.seq_len = 64;
    p.precision = pick(0, 1) ? Precision::kFp32 : Precision::kBf16;
    p.zero_stage = pick(0, 3);
    p.activation_checkpointing = pick(0, 3) > 0;
    const int n = pick(1, 4);
    GroupPlan g;
    const bool per_layer = pick(0, 1);
    const int layers = static_cast<int>(m.num_layers);
    g.ministages = per_layer ? SplitLayers(0, layers, layers) : std::vector<LayerRange>{{0, layers}};
    for (int d = 0; d < n; ++d) g.devices.push_back({d, pick(1, 6), pick(1, 3), 0});
    p.groups = {g};
    Schedule s = LowerPlan(p, cluster, m).value();
    CostModel costs(cluster, m, nullptr, p.seq_len, p.precision, p.activation_checkpointing);
    SimResult r = Simulate(s, cluster, costs).value();
    const double unit = per_layer ? static_cast<double>(ParamsPerLayer(m) + std::max(EmbeddingParams(m), HeadParams(m)))
                                  : static_cast<double>(TotalParams(m));
    DataParallelMemoryInput in{&m, p.precision, p.zero_stage, n, p.seq_len, p.activation_checkpointing, unit};
    const StateBytesPerParam sb = StateBytes(p.precision);
    const double act = 64.0 * 6 * m.hidden_size * BytesPerElement(p.precision);  // the largest microbatch's boundary
    const double slack =
        2 * unit * ((p.zero_stage >= 2 ? sb.grads : 0) + (p.zero_stage == 3 ? sb.params : 0)) + (m.num_layers + 2) * act;
    for (int d = 0; d < n; ++d) {
      const double model = DataParallelPeakBytes(in, g.devices[d].microbatch_size);
      const double simulated = r.devices[d].peak_memory_bytes;
      EXPECT_DOUBLE_EQ(DataParallelStaticBytes(in), s.programs[d].static_device_bytes) << "trial " << trial;
      EXPECT_GE(model, simulated * (1 - 1e-12)) << "trial " << trial << " device " << d << " zero " << p.zero_stage << " ckpt " << p.activation_checkpointing << " prec " << (int)p.precision << " n " << n;
      // Loose by at most the gathered and gradient buffers the model assumes in flight.
      EXPECT_LE(model, simulated + slack + 1) << "trial " << trial << " device " << d;
    }
  }
}

double SimulatedStepS(const Plan& plan, const Cluster& cluster, const ModelSpec& m) {
  Schedule s = LowerPlan(plan, cluster, m).value();
  CostModel costs(cluster, m, nullptr, plan.seq_len, plan.precision, plan.activation_checkpointing);
  SimResult r = Simulate(s, cluster, costs).value();
  EXPECT_TRUE(r.fits_memory) << r.oom_message;
  return r.step_time_s;
}

TEST(PoplarPlanner, BeatsTheEvenSplitOnTheEmulatedCluster) {
  // Two devices 3x slower: Poplar gives them less work. The default job's batch: 32 x 128 tokens.
  Cluster cluster = LoadCluster("local-emulated").value();
  ModelSpec m = *FindModelPreset("llama-1m");
  CostModel costs(cluster, m, nullptr, 128, Precision::kFp32, true);
  for (int stage : {0, 1, 2, 3}) {
    PoplarRequest req;
    req.global_batch_sequences = 32;
    req.seq_len = 128;
    req.precision = Precision::kFp32;
    req.zero_stage = stage;
    PoplarPlan pp = PlanPoplar(cluster, m, costs, req).value();
    ASSERT_TRUE(ValidatePlan(pp.plan, cluster, m).ok());
    EXPECT_EQ(pp.plan.global_batch_sequences(), 32);
    EXPECT_EQ(pp.plan.zero_stage, stage);
    // The slow devices get fewer sequences.
    EXPECT_LT(pp.plan.groups[0].devices[2].sequences(), pp.plan.groups[0].devices[0].sequences());
    Plan even = pp.plan;
    for (auto& d : even.groups[0].devices) d = {d.device, 2, 4, 0};  // 8 each in microbatches of 2
    const double poplar = SimulatedStepS(pp.plan, cluster, m), baseline = SimulatedStepS(even, cluster, m);
    EXPECT_GT(baseline / poplar, 1.3) << "ZeRO-" << stage << ": " << pp.explain;
  }
}

TEST(PoplarPlanner, RaisesTheZeroStageWhenOneSequenceDoesNotFit) {
  // 1.2 GiB devices: llama-100m's fp32 state (16 bytes a parameter, 1.9 GiB) fits only sharded.
  Cluster cluster = ParseClusterToml(R"(
[device_types.small]
memory = "1.2GiB"
memory_bandwidth = "100GB/s"
fp16_flops = "10TFLOPS"
fp32_flops = "10TFLOPS"
host_link = "10GB/s"
[[nodes]]
name = "n"
device = "small"
count = 4
)",
                                     "c.toml")
                        .value();
  ModelSpec m = *FindModelPreset("llama-100m");
  CostModel costs(cluster, m, nullptr, 256, Precision::kFp32, true);
  PoplarRequest req;
  req.global_batch_sequences = 16;
  req.seq_len = 256;
  req.precision = Precision::kFp32;
  req.zero_stage = 0;
  PoplarPlan pp = PlanPoplar(cluster, m, costs, req).value();
  EXPECT_GE(pp.plan.zero_stage, 2);
  EXPECT_NE(pp.explain.find("raised from ZeRO-0"), std::string::npos) << pp.explain;
  Schedule s = LowerPlan(pp.plan, cluster, m).value();
  EXPECT_TRUE(Simulate(s, cluster, costs).value().fits_memory);
  // A model far too large for any stage is a clear error.
  ModelSpec huge = *FindModelPreset("llama-7b");
  CostModel huge_costs(cluster, huge, nullptr, 256, Precision::kFp32, true);
  Result<PoplarPlan> none = PlanPoplar(cluster, huge, huge_costs, req);
  ASSERT_FALSE(none.ok());
  EXPECT_NE(none.status().message().find("no ZeRO stage fits a microbatch of 1 sequence"), std::string::npos);
}

}  // namespace
}  // namespace motley
