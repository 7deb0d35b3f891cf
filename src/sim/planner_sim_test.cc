// Planners checked against the simulator: the memory model against simulated peaks, and plans
// against the baselines they should beat.
#include <cmath>
#include <cstdint>
#include <cstdio>
#include <map>
#include <random>
#include <set>

#include "plan/plan_io.h"

#include <fmt/format.h>
#include <gtest/gtest.h>

#include "core/cluster_parse.h"
#include "plan/baselines.h"
#include "plan/cephalo_planner.h"
#include "plan/lower.h"
#include "plan/memory_model.h"
#include "plan/poplar_planner.h"
#include "plan/zorse_planner.h"
#include "sim/plan_evaluator.h"
#include "sim/routing_costs.h"
#include "sim/simulator.h"

namespace motley {
namespace {

// Every ZeRO stage, with even state shares and (every other trial from ZeRO-1, from a generator
// of its own) uneven ones.
TEST(MemoryModel, BoundsTheSimulatedPeakOfDataParallelPlans) {
  Cluster cluster = LoadCluster("local-emulated").value();
  ModelSpec m = *FindModelPreset("llama-1m");
  std::mt19937 rng(5), shares_rng(11);
  int uneven = 0;
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
    if (p.zero_stage >= 1 && n >= 2 && trial % 2 == 1) {
      double sum = 0;
      for (int d = 0; d < n; ++d)
        sum += g.state_shares.emplace_back(1.0 + static_cast<double>(shares_rng() % 5));
      for (double& x : g.state_shares) x /= sum;
      ++uneven;
    }
    p.groups = {g};
    Schedule s = LowerPlan(p, cluster, m).value();
    CostModel costs(cluster, m, nullptr, p.seq_len, p.precision, p.activation_checkpointing);
    Result<SimResult> simulated = Simulate(s, cluster, costs);
    ASSERT_TRUE(simulated.ok()) << simulated.status().message() << "\n" << PlanToToml(p);
    const SimResult& r = *simulated;
    const double unit =
        per_layer ? static_cast<double>(ParamsPerLayer(m) + std::max(EmbeddingParams(m), HeadParams(m)))
                  : static_cast<double>(TotalParams(m));
    DataParallelMemoryInput in{&m,   p.precision,        p.zero_stage,
                               n,    p.seq_len,          p.activation_checkpointing,
                               unit, cluster.emulated(), -1};
    const StateBytesPerParam sb = StateBytes(p.precision);
    const double act =
        64.0 * 6 * m.hidden_size * BytesPerElement(p.precision);  // the largest microbatch's boundary
    for (int d = 0; d < n; ++d) {
      const double share = g.state_shares.empty() ? 1.0 / n : g.state_shares[d];
      in.state_share = g.state_shares.empty() ? -1 : share;
      const double slack =
          2 * unit * ((p.zero_stage >= 2 ? sb.grads : 0) + (p.zero_stage == 3 ? sb.params : 0)) +
          (p.zero_stage >= 1 ? n * share * unit * sb.grads : 0) +
          (p.zero_stage >= 1 && n >= 2 ? unit * sb.grads * share : 0) + (m.num_layers + 2) * act;
      const double model = DataParallelPeakBytes(in, g.devices[d].microbatch_size);
      const double simulated = r.devices[d].peak_memory_bytes;
      EXPECT_NEAR(DataParallelStaticBytes(in), s.programs[d].static_device_bytes,
                  1e-12 * s.programs[d].static_device_bytes)
          << "trial " << trial;
      EXPECT_GE(model, simulated * (1 - 1e-12))
          << "trial " << trial << " device " << d << " zero " << p.zero_stage << " ckpt "
          << p.activation_checkpointing << " prec " << (int)p.precision << " n " << n;
      // Loose by at most the gathered and gradient buffers the model assumes in flight.
      EXPECT_LE(model, simulated + slack + 1) << "trial " << trial << " device " << d;
    }
  }
  EXPECT_GT(uneven, 10);
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

TEST(PoplarPlanner, UsesTheProfilesMeasuredLimitsAndSaysWhereTheyDifferFromTheMemoryModel) {
  Cluster cluster =
      LoadCluster("local-emulated").value();  // devices 2 and 3 have 512 MiB, 0 and 1 have 1 GiB
  ModelSpec m = *FindModelPreset("llama-1m");
  Profile profile;
  ProfileEntry e;
  e.device_type = cluster.spec(2).name;
  e.hidden_size = m.hidden_size;
  e.seq_len = 128;
  e.precision = Precision::kFp32;
  e.points = {{1, 1.0, 3.0}, {8, 6.0, 18.0}};
  MeasuredLimits limits;
  limits.dp_degree = 4;
  limits.num_layers = m.num_layers;
  limits.total_params = static_cast<double>(TotalParams(m));
  limits.capacity_bytes = static_cast<int64_t>(cluster.memory_bytes(2));
  // As if the allocator fitted no sequence below ZeRO-2 and 3 from ZeRO-2 (the model says ~200).
  limits.max_microbatch_by_zero = {0, 0, 3, 3};
  e.limits = limits;
  profile.entries.push_back(e);
  CostModel costs(cluster, m, &profile, 128, Precision::kFp32, true);
  EXPECT_EQ(costs.MeasuredMaxMicrobatch(2, 2, 4), 3);
  EXPECT_EQ(costs.MeasuredMaxMicrobatch(0, 2, 4), std::nullopt);  // measured for 512 MiB, not 1 GiB
  EXPECT_EQ(costs.MeasuredMaxMicrobatch(2, 2, 3), std::nullopt);  // for 4 devices, not 3
  PoplarRequest req;
  req.global_batch_sequences = 32;
  req.seq_len = 128;
  req.precision = Precision::kFp32;
  req.zero_stage = 0;
  PoplarPlan pp = PlanPoplar(cluster, m, costs, req).value();
  EXPECT_EQ(pp.plan.zero_stage, 2) << pp.explain;
  EXPECT_NE(pp.explain.find("fits no sequence at ZeRO-0 (measured)"), std::string::npos) << pp.explain;
  EXPECT_NE(pp.explain.find("at most 3 sequences a microbatch (measured; the memory model says"),
            std::string::npos)
      << pp.explain;
  EXPECT_EQ(pp.max_microbatch[2], 3);
  EXPECT_GT(pp.max_microbatch[0], 3);  // the memory model's, for the 1 GiB devices
  for (const DevicePlan& d : pp.plan.groups[0].devices) {
    if (d.device >= 2) {
      EXPECT_LE(d.microbatch_size, 3) << pp.explain;
    }
  }
  EXPECT_EQ(pp.plan.global_batch_sequences(), 32);

  // Zorse's search: where a candidate is the step the probe ran (one group of every device, one
  // ministage per layer, ZeRO-2 in place), the measured limit decides; elsewhere the memory model.
  ZorseRequest zr;
  zr.global_batch_sequences = 32;
  zr.seq_len = 128;
  zr.precision = Precision::kFp32;
  zr.offload = false;
  bool measured_case = false, modelled_case = false;
  for (const ZorseCandidate& c : ZorseCandidatesForGroups(cluster, m, costs, zr, {{0, 1, 2, 3}})) {
    const GroupPlan& g = c.plan.groups[0];
    const int64_t b = g.devices[2].microbatch_size;
    if (g.num_ministages() == m.num_layers) {
      EXPECT_LE(b, 3) << c.why;  // the model alone would take every size up to 32
      measured_case = true;
    } else if (b > 3) {
      modelled_case = true;
    }
  }
  EXPECT_TRUE(measured_case);
  EXPECT_TRUE(modelled_case);
}

}  // namespace
}  // namespace motley

namespace motley {
namespace {

PlanEvaluator SimulatorEvaluator(const Cluster& cluster, const ModelSpec& m, const CostModel& costs) {
  return SimulationEvaluator(cluster, m, costs);
}

// Four nodes of two GPUs of three kinds, joined by 25-100 Gbps.
Cluster MixedEightGpus() {
  return ParseClusterToml(R"(
[[nodes]]
name = "a100-a"
device = "a100-40gb"
count = 2
nic_bandwidth = "100Gbps"
[[nodes]]
name = "a100-b"
device = "a100-40gb"
count = 2
nic_bandwidth = "100Gbps"
[[nodes]]
name = "v100"
device = "v100-16gb"
count = 2
nic_bandwidth = "25Gbps"
[[nodes]]
name = "t4"
device = "t4"
count = 2
nic_bandwidth = "50Gbps"
)",
                          "mixed.toml")
      .value();
}

TEST(ZorsePlanner, PlansThatFitAndBeatEvenDataParallelism) {
  Cluster cluster = LoadCluster("local-emulated").value();
  ModelSpec m = *FindModelPreset("llama-1m");
  CostModel costs(cluster, m, nullptr, 128, Precision::kFp32, true);
  ZorseRequest req;
  req.global_batch_sequences = 32;
  req.seq_len = 128;
  req.precision = Precision::kFp32;
  ZorsePlan zp = PlanZorse(cluster, m, costs, req, SimulatorEvaluator(cluster, m, costs)).value();
  ASSERT_TRUE(ValidatePlan(zp.plan, cluster, m).ok());
  EXPECT_EQ(zp.plan.global_batch_sequences(), 32);
  EXPECT_FALSE(zp.explain.empty());
  EXPECT_FALSE(zp.considered.empty());
  Plan even;
  even.seq_len = 128;
  even.precision = Precision::kFp32;
  even.zero_stage = 2;
  even.groups = {GroupPlan{{{0, 4}}, 1, {{0, 2, 4, 0}, {1, 2, 4, 0}, {2, 2, 4, 0}, {3, 2, 4, 0}}, {}, {}}};
  EXPECT_LT(zp.predicted_step_s, SimulatedStepS(even, cluster, m)) << zp.explain;
}

// Every way to group the nodes (set partitions), every candidate of each, by the simulator.
double ExhaustiveBestS(const Cluster& cluster, const ModelSpec& m, const CostModel& costs,
                       const ZorseRequest& req) {
  const int n = static_cast<int>(cluster.nodes.size());
  std::vector<int> part(n, 0);
  double best = std::numeric_limits<double>::infinity();
  std::function<void(int, int)> visit = [&](int node, int used) {
    if (node == n) {
      std::vector<std::vector<int>> groups(used);
      int d = 0;
      for (int i = 0; i < n; ++i)
        for (int k = 0; k < cluster.nodes[i].num_devices; ++k) groups[part[i]].push_back(d++);
      const PlanEvaluator evaluate = SimulationEvaluator(cluster, m, costs);
      for (const auto& c : ZorseCandidatesForGroups(cluster, m, costs, req, groups)) {
        PlanEvaluation e = evaluate(c.plan, {}).value();
        if (e.fits_memory) best = std::min(best, e.step_time_s);
      }
      return;
    }
    for (int p = 0; p <= used; ++p) {
      part[node] = p;
      visit(node + 1, std::max(used, p + 1));
    }
  };
  visit(0, 0);
  return best;
}

// The search the exhaustive comparisons run: Llama-7B, 32 sequences of 1,024, microbatches up to 8.
ZorseRequest Llama7bOnAFewGpus() {
  ZorseRequest req;
  req.global_batch_sequences = 32;
  req.seq_len = 1024;
  req.precision = Precision::kFp16;
  req.max_microbatch = 8;
  return req;
}

TEST(ZorsePlanner, WithinFivePercentOfExhaustiveSearchOnEightGpus) {
  Cluster cluster = MixedEightGpus();
  ModelSpec m = *FindModelPreset("llama-7b");
  CostModel costs(cluster, m, nullptr, 1024, Precision::kFp16, true);
  const ZorseRequest req = Llama7bOnAFewGpus();
  ZorsePlan zp = PlanZorse(cluster, m, costs, req, SimulatorEvaluator(cluster, m, costs)).value();
  const double exhaustive = ExhaustiveBestS(cluster, m, costs, req);
  std::printf("zorse planner %.4f s, exhaustive best %.4f s (%s)\n", zp.predicted_step_s, exhaustive,
              zp.explain.c_str());
  EXPECT_LE(zp.predicted_step_s, 1.05 * exhaustive) << zp.explain;
}

// Random clusters of 3-4 nodes of 1-4 GPUs (up to 16) of four kinds, NICs of 10-100 Gbps.
Cluster RandomCluster(std::mt19937& rng) {
  const char* types[] = {"a100-40gb", "v100-32gb", "a10g", "t4"};
  auto pick = [&](int lo, int hi) { return std::uniform_int_distribution<int>(lo, hi)(rng); };
  std::string text;
  const int nodes = pick(3, 4);
  for (int n = 0; n < nodes; ++n)
    text +=
        fmt::format("[[nodes]]\nname = \"n{}\"\ndevice = \"{}\"\ncount = {}\nnic_bandwidth = \"{}Gbps\"\n", n,
                    types[pick(0, 3)], pick(1, 4), 10 * pick(1, 10));
  return ParseClusterToml(text, "random.toml").value();
}

// Issue #24: within 1% of exhaustive search (every grouping of the nodes, every candidate, by the
// simulator) on random clusters of up to 16 GPUs.
TEST(ZorsePlanner, RegretAgainstExhaustiveSearchOnRandomClusters) {
  std::mt19937 rng(11);
  ModelSpec m = *FindModelPreset("llama-7b");
  double worst = 0;
  for (int trial = 0; trial < 20; ++trial) {
    Cluster cluster = RandomCluster(rng);
    CostModel costs(cluster, m, nullptr, 1024, Precision::kFp16, true);
    const ZorseRequest req = Llama7bOnAFewGpus();
    Result<ZorsePlan> zp = PlanZorse(cluster, m, costs, req, SimulatorEvaluator(cluster, m, costs));
    const double exhaustive = ExhaustiveBestS(cluster, m, costs, req);
    if (!zp.ok()) {
      EXPECT_FALSE(std::isfinite(exhaustive)) << zp.status().message();
      continue;
    }
    const double regret = zp->predicted_step_s / exhaustive - 1;
    worst = std::max(worst, regret);
    std::printf("trial %d: %d GPUs, planner %.4f s, exhaustive %.4f s, regret %.2f%% (%s)\n", trial,
                cluster.num_devices(), zp->predicted_step_s, exhaustive, 100 * regret, zp->explain.c_str());
  }
  EXPECT_LE(worst, 0.01);  // 0.38% at most when written (SPLIT's cuts alone: 32%)
}

}  // namespace
}  // namespace motley

namespace motley {
namespace {

// The search HexiScale and TorchTitan-Het share with Zorse's: plain stages, 1F1B, no offload.
ZorseRequest PipelineBaselineRequest(int64_t sequences, int64_t seq_len, Precision precision) {
  ZorseRequest z;
  z.global_batch_sequences = sequences;
  z.seq_len = seq_len;
  z.precision = precision;
  z.offload = false;
  z.max_ministages = 1;
  z.schedule = PipelineSchedule::k1F1B;
  return z;
}

// #24 part 4 / #26 part 3: tensor parallelism of width 2, 4 and 8 where a run of that many devices
// shares an NVLink or NVSwitch node — per group (each group the widest its nodes allow, up to the
// width), or one width everywhere (TorchTitan's symmetric mesh).
TEST(Baselines, TensorParallelWidthsUpToEightInsideFastNodes) {
  Cluster cluster = LoadCluster("zorse-a").value();  // 2 nodes of 2 H100-NVL (NVLink), 2 of 8 A100 (NVSwitch)
  ModelSpec m = *FindModelPreset("llama-7b");
  CostModel costs(cluster, m, nullptr, 1024, Precision::kFp16, true);
  ZorseRequest z = PipelineBaselineRequest(64, 1024, Precision::kFp16);
  z.try_tensor_parallel = true;
  // Each width's per-group degrees, as the candidates carry them.
  auto degrees = [&](std::vector<std::vector<int>> groups) {
    std::map<int, std::set<std::vector<int>>> out;
    for (const ZorseCandidate& c : ZorseCandidatesForGroups(cluster, m, costs, z, groups)) {
      std::vector<int> tp;
      for (const GroupPlan& g : c.plan.groups) tp.push_back(g.tp_degree);
      out[c.tp_degree].insert(tp);
    }
    return out;
  };
  using Degrees = std::map<int, std::set<std::vector<int>>>;
  const std::vector<std::vector<int>> a100s = {{4, 5, 6, 7, 8, 9, 10, 11}, {12, 13, 14, 15, 16, 17, 18, 19}};
  const std::vector<std::vector<int>> mixed = {{0, 1, 2, 3},
                                               {4, 5, 6, 7, 8, 9, 10, 11, 12, 13, 14, 15, 16, 17, 18, 19}};
  // The A100 nodes: runs of 2, 4 or 8 inside each, in both groups.
  EXPECT_EQ(degrees(a100s), (Degrees{{1, {{1, 1}}}, {2, {{2, 2}}}, {4, {{4, 4}}}, {8, {{8, 8}}}}));
  // The H100-NVL pairs cap their group at 2 (a run of 4 would cross nodes); the A100 group (first:
  // groups are ordered by their links, §4.3.3) goes on.
  EXPECT_EQ(degrees(mixed), (Degrees{{1, {{1, 1}}}, {2, {{2, 2}}}, {4, {{4, 2}}}, {8, {{8, 2}}}}));
  // A symmetric mesh: only the widths every group allows.
  z.uniform_tensor_parallel = true;
  EXPECT_EQ(degrees(mixed), (Degrees{{1, {{1, 1}}}, {2, {{2, 2}}}}));
  z.uniform_tensor_parallel = false;
  z.max_tensor_parallel = 2;
  EXPECT_EQ(degrees(a100s), (Degrees{{1, {{1, 1}}}, {2, {{2, 2}}}}));
}

TEST(Baselines, HexiscaleSplitsNodesIntoStagesAndJudgesEveryKind) {
  Cluster cluster = LoadCluster("zorse-a").value();
  ModelSpec m = *FindModelPreset("tinyllama-1.1b");
  CostModel costs(cluster, m, nullptr, 1024, Precision::kBf16, true);
  const PlanEvaluator evaluate = SimulationEvaluator(cluster, m, costs);
  ZorseRequest z = PipelineBaselineRequest(64, 1024, Precision::kBf16);
  z.candidates_to_evaluate = 2;
  z.split_nodes_up_to = 8;
  ZorsePlan p = PlanZorse(cluster, m, costs, z, evaluate).value();
  // Judged: plans of whole nodes and plans of more stages than the cluster's 4 nodes.
  bool whole = false, split = false;
  for (const ZorseCandidate& c : p.considered) {
    whole = whole || c.plan.groups.size() <= 4;
    split = split || c.plan.groups.size() > 4;
    if (c.plan.groups.size() > 4) {
      EXPECT_NE(c.why.find("nodes split in"), std::string::npos) << c.why;
    }
  }
  EXPECT_TRUE(whole);
  EXPECT_TRUE(split);
  // Without splitting, no plan has more stages than nodes.
  z.split_nodes_up_to = 1;
  // (The result is kept: a range-for over a member of a temporary's value() would read it after
  // the temporary is gone — AddressSanitizer's stack-use-after-scope, scripts/sanitize.sh.)
  const ZorsePlan whole_nodes = PlanZorse(cluster, m, costs, z, evaluate).value();
  for (const ZorseCandidate& c : whole_nodes.considered) EXPECT_LE(c.plan.groups.size(), 4u);
}

// #24 part 3: on more nodes than every grouping is tried on, the latency model climbs from SPLIT's
// cuts to other groupings, and the simulator judges the best of them; on Zorse's cluster C (16
// nodes, 4 classes) with the published timings that finds a plan SPLIT's cuts miss (24.5 s ->
// 21.5 s for Llama-13B at 512 tokens, bench/reports/zorse_search_quality.md).
TEST(ZorsePlanner, ClimbsPastSplitsCutsOnManyNodes) {
  Cluster cluster = LoadCluster("zorse-c").value();
  ModelSpec m = *FindModelPreset("llama-13b");
  CostModel costs(cluster, m, nullptr, 512, Precision::kFp16, true);
  const PlanEvaluator evaluate = SimulationEvaluator(cluster, m, costs);
  ZorseRequest z;
  z.global_batch_sequences = 2048;
  z.seq_len = 512;
  z.precision = Precision::kFp16;
  const ZorsePlan climbed = PlanZorse(cluster, m, costs, z, evaluate).value();
  z.grouping_climb_rounds = 0;
  const ZorsePlan cuts = PlanZorse(cluster, m, costs, z, evaluate).value();
  bool judged_climbed = false;
  for (const ZorseCandidate& c : climbed.considered)
    judged_climbed = judged_climbed || c.why.starts_with("climbed by the latency model");
  EXPECT_TRUE(judged_climbed);
  for (const ZorseCandidate& c : cuts.considered) EXPECT_FALSE(c.why.starts_with("climbed")) << c.why;
  // (Whether a climbed grouping wins depends on the timings: on the published ones it does on C;
  // bench/zorse_search_quality measures it. Here only that both searches end with a plan.)
  EXPECT_GT(climbed.predicted_step_s, 0);
  EXPECT_GT(cuts.predicted_step_s, 0);
}

TEST(CephaloPlanner, FillsStateSharesAsEvenlyAsTheRoomsAllow) {
  EXPECT_EQ(FillStateShares({1, 1, 1, 1}), (std::vector<double>{0.25, 0.25, 0.25, 0.25}));
  const std::vector<double> s = FillStateShares({0.1, 1, 0.6});
  ASSERT_EQ(s.size(), 3u);
  EXPECT_DOUBLE_EQ(s[0], 0.1);  // full
  EXPECT_DOUBLE_EQ(s[1], 0.45);
  EXPECT_DOUBLE_EQ(s[2], 0.45);
  EXPECT_EQ(FillStateShares({0.25, 0.25, 0.5}), (std::vector<double>{0.25, 0.25, 0.5})) << "every room full";
  EXPECT_TRUE(FillStateShares({0.2, 0.3, 0.4}).empty()) << "the rooms hold less than the state";
}

// #24 part 4: Cephalo places the state by memory. On Zorse's cluster B, Llama-33B at 2,048 tokens:
// a V100-16GB cannot hold an even 1/64 of the state beside one sequence at any ZeRO stage, so
// Poplar (even shards) finds no plan; Cephalo gives those GPUs less state and the others more, and
// the plan fits in the simulator's memory.
TEST(CephaloPlanner, PlacesStateByMemoryWhereEvenShardsDoNotFit) {
  Cluster cluster = LoadCluster("zorse-b").value();
  ModelSpec m = *FindModelPreset("llama-33b");
  CostModel costs(cluster, m, nullptr, 2048, Precision::kBf16, true);
  const PlanEvaluator evaluate = SimulationEvaluator(cluster, m, costs);
  PlanRequest req;
  req.global_batch_sequences = 512;
  req.seq_len = 2048;
  req.leave_devices_out = false;
  const StrategyOutcome poplar = PlanWithStrategy("poplar", cluster, m, costs, req, evaluate);
  EXPECT_FALSE(poplar.status.ok());
  const StrategyOutcome cephalo = PlanWithStrategy("cephalo", cluster, m, costs, req, evaluate);
  ASSERT_TRUE(cephalo.status.ok()) << cephalo.status.message();
  EXPECT_TRUE(ValidatePlan(cephalo.plan, cluster, m).ok());
  const GroupPlan& g = cephalo.plan.groups.at(0);
  ASSERT_EQ(g.state_shares.size(), g.devices.size());
  const double even = 1.0 / static_cast<double>(g.devices.size());
  int smaller = 0, larger = 0;
  for (size_t i = 0; i < g.devices.size(); ++i) {
    const double memory = cluster.memory_bytes(g.devices[i].device);
    if (memory <= 16.0 * (1 << 30)) {
      EXPECT_LT(g.state_shares[i], even) << "device " << g.devices[i].device;
      ++smaller;
    } else if (g.state_shares[i] > even) {
      ++larger;
    }
  }
  EXPECT_GT(smaller, 0);
  EXPECT_GT(larger, 0);
  EXPECT_TRUE(cephalo.evaluation.fits_memory) << cephalo.evaluation.oom;
  EXPECT_NE(cephalo.explain.find("state by memory: shares"), std::string::npos) << cephalo.explain;
}

// Where every device has room for an even shard, Cephalo's best plan keeps them even (an uneven
// gather is paced by its largest piece).
TEST(CephaloPlanner, KeepsEvenShardsWhereEveryDeviceHasRoom) {
  Cluster cluster = LoadCluster("local-emulated").value();
  ModelSpec m = *FindModelPreset("llama-1m");
  CostModel costs(cluster, m, nullptr, 128, Precision::kFp32, true);
  PlanRequest req;
  req.global_batch_sequences = 32;
  req.seq_len = 128;
  req.precision = Precision::kFp32;
  const StrategyOutcome o =
      PlanWithStrategy("cephalo", cluster, m, costs, req, SimulationEvaluator(cluster, m, costs));
  ASSERT_TRUE(o.status.ok()) << o.status.message();
  EXPECT_EQ(o.plan.zero_stage, 3);
  EXPECT_TRUE(o.plan.groups.at(0).state_shares.empty());
  EXPECT_NE(o.explain.find("even shards"), std::string::npos) << o.explain;
}

TEST(Strategies, EveryPlanFitsItsMemoryModelLowersAndRunsToTheEnd) {
  struct Case {
    const char* cluster;
    const char* model;
    int64_t seq_len, sequences;
    Precision precision;
  } cases[] = {{"local-emulated", "llama-1m", 128, 32, Precision::kFp32},
               {"poplar-b", "llama-100m", 512, 64, Precision::kFp16},
               {"zorse-a", "tinyllama-1.1b", 1024, 64, Precision::kBf16}};
  for (const auto& k : cases) {
    Cluster cluster = LoadCluster(k.cluster).value();
    ModelSpec m = *FindModelPreset(k.model);
    CostModel costs(cluster, m, nullptr, k.seq_len, k.precision, true);
    const PlanEvaluator evaluate = SimulationEvaluator(cluster, m, costs);
    PlanRequest req;
    req.global_batch_sequences = k.sequences;
    req.seq_len = k.seq_len;
    req.precision = k.precision;
    int planned = 0;
    for (const auto& o : PlanEveryStrategy(cluster, m, costs, req, evaluate)) {
      if (o.plan.groups.empty()) continue;  // a strategy may find nothing; it must say why
      ++planned;
      SCOPED_TRACE(std::string(k.cluster) + " " + o.strategy);
      EXPECT_TRUE(o.status.ok()) << o.status.message();
      EXPECT_TRUE(ValidatePlan(o.plan, cluster, m).ok());
      EXPECT_EQ(o.plan.global_batch_sequences(), k.sequences);
      Plan routed = o.plan;
      FillZorseRouting(&routed, costs);
      Schedule s = LowerPlan(routed, cluster, m).value();
      EXPECT_EQ(CheckSchedule(s), "");
      SimResult r = Simulate(s, cluster, costs).value();
      EXPECT_TRUE(r.fits_memory) << r.oom_message;
      EXPECT_DOUBLE_EQ(r.step_time_s, o.evaluation.step_time_s);
    }
    EXPECT_GE(planned, 5) << k.cluster;
    // auto is the fastest of them.
    StrategyOutcome best = PlanWithStrategy("auto", cluster, m, costs, req, evaluate);
    ASSERT_TRUE(best.status.ok()) << best.status.message();
    for (const auto& o : PlanEveryStrategy(cluster, m, costs, req, evaluate)) {
      if (o.status.ok()) {
        EXPECT_LE(best.evaluation.step_time_s, o.evaluation.step_time_s) << o.strategy;
      }
    }
  }
}

}  // namespace
}  // namespace motley
