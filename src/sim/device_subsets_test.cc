// Leaving devices out (plan/device_subsets.h): the subsets nest as clusters do, their lower
// bounds hold against the simulator, and the planner is monotone in resources on nested clusters.
#include <atomic>
#include <string>

#include <fmt/format.h>
#include <gtest/gtest.h>

#include "core/cluster_parse.h"
#include "plan/baselines.h"
#include "plan/device_subsets.h"
#include "plan/evaluate_all.h"
#include "sim/plan_evaluator.h"

namespace motley {
namespace {

// A small mixed cluster over two regions, with every class of node `times` times as many.
// `slower` adds a node of P100s, slower than anything else in it.
Cluster Mixed(int times, bool slower = false) {
  std::string text = fmt::format(R"(
[network]
inter_region_bandwidth = "10Gbps"
[[nodes]]
name = "a100"
replicas = {}
device = "a100-40gb"
count = 2
interconnect = "nvlink"
nic_bandwidth = "100Gbps"
[[nodes]]
name = "t4"
replicas = {}
device = "t4"
count = 2
nic_bandwidth = "25Gbps"
)",
                                 times, 2 * times);
  if (slower)
    text += "[[nodes]]\nname = \"p100\"\ndevice = \"p100\"\ncount = 2\nnic_bandwidth = \"10Gbps\"\n";
  return ParseClusterToml(text, fmt::format("mixed-x{}{}", times, slower ? "-p100" : "")).value();
}

SubsetWork Work() { return {64, 256, Precision::kBf16, 256, 2}; }

TEST(DeviceSubsets, EachRegionAloneIsASubsetAndThePlannerTakesItOverASlowLink) {
  const ModelSpec m = *FindModelPreset("llama-100m");
  const Cluster c = ParseClusterToml(R"(
[network]
inter_region_bandwidth = "100Mbps"
[[nodes]]
name = "east"
device = "a100-40gb"
count = 2
nic_bandwidth = "100Gbps"
region = "east"
[[nodes]]
name = "west"
device = "a100-40gb"
count = 2
nic_bandwidth = "100Gbps"
region = "west"
)",
                                     "two-regions.toml")
                        .value();
  const CostModel costs(c, m, nullptr, 256, Precision::kBf16, true);
  std::vector<std::vector<int>> regions;
  for (const DeviceSubset& s : DeviceSubsets(c, m, costs, Work()))
    if (s.description.find("alone") != std::string::npos) regions.push_back(s.devices);
  EXPECT_EQ(regions, (std::vector<std::vector<int>>{{0, 1}, {2, 3}}));
  // Over 100 Mbit/s every step across the regions waits for the link: one region's devices win.
  PlanRequest request;
  request.seq_len = 256;
  request.global_batch_sequences = 64;
  const PlanEvaluator evaluate = SimulationEvaluator(c, m, costs);
  const StrategyOutcome best = PlanWithStrategy("poplar", c, m, costs, request, evaluate);
  ASSERT_TRUE(best.status.ok()) << best.status.message();
  EXPECT_EQ(best.plan.devices().size(), 2u);
}

TEST(DeviceSubsets, ADoubledClusterHoldsTheClusterAndASlowerNodeAddedLeavesItAsTheFirstThreshold) {
  const ModelSpec m = *FindModelPreset("llama-100m");
  const Cluster one = Mixed(1), two = Mixed(2), with_p100 = Mixed(1, true);
  const CostModel c1(one, m, nullptr, 256, Precision::kBf16, true),
      c2(two, m, nullptr, 256, Precision::kBf16, true),
      cp(with_p100, m, nullptr, 256, Precision::kBf16, true);
  const auto of_one = DeviceSubsets(one, m, c1, Work());
  const auto of_two = DeviceSubsets(two, m, c2, Work());
  const auto of_p100 = DeviceSubsets(with_p100, m, cp, Work());
  ASSERT_EQ(of_one.front().devices.size(), 6u);
  EXPECT_EQ(of_one.front().description, "all 6 devices");
  // The doubled cluster's half: its first a100 node and its first two t4 nodes, the lower bound
  // of the whole smaller cluster.
  bool found = false;
  for (const auto& s : of_two)
    if (s.devices == std::vector<int>{0, 1, 4, 5, 6, 7}) {
      found = true;
      EXPECT_DOUBLE_EQ(s.lower_bound_s, of_one.front().lower_bound_s);
      EXPECT_NE(s.description.find("1/2 of every kind of node"), std::string::npos) << s.description;
    }
  EXPECT_TRUE(found);
  // Every subset of the smaller cluster is among the larger's (device ids of the same nodes).
  auto devices_of = [](const std::vector<DeviceSubset>& all) {
    std::vector<std::vector<int>> out;
    for (const auto& s : all) out.push_back(s.devices);
    return out;
  };
  const auto with_p100_sets = devices_of(of_p100);
  for (const auto& s : of_one)
    EXPECT_NE(std::find(with_p100_sets.begin(), with_p100_sets.end(), s.devices), with_p100_sets.end())
        << s.description;
  // Sorted: the whole cluster, then by bound.
  for (size_t i = 2; i < of_two.size(); ++i) EXPECT_LE(of_two[i - 1].lower_bound_s, of_two[i].lower_bound_s);
}

TEST(DeviceSubsets, NoPlanOnASubsetStepsFasterThanItsLowerBound) {
  const ModelSpec m = *FindModelPreset("llama-100m");
  const Cluster cluster = Mixed(2, true);
  const CostModel costs(cluster, m, nullptr, 256, Precision::kBf16, true);
  const PlanEvaluator evaluate = SimulationEvaluator(cluster, m, costs);
  int checked = 0;
  for (const DeviceSubset& s : DeviceSubsets(cluster, m, costs, Work())) {
    PlanRequest r;
    r.global_batch_sequences = 64;
    r.seq_len = 256;
    r.devices = s.devices;
    for (const StrategyOutcome& o : PlanEveryStrategy(cluster, m, costs, r, evaluate)) {
      if (!o.status.ok()) continue;
      ++checked;
      EXPECT_GE(o.evaluation.step_time_s, s.lower_bound_s) << o.strategy << " on " << s.description;
      EXPECT_LE(o.plan.num_devices(), static_cast<int>(s.devices.size()))
          << o.strategy << " on " << s.description;
    }
  }
  EXPECT_GT(checked, 20);
}

TEST(Planner, MoreDevicesNeverGiveASlowerPlan) {
  // A fixed batch over more and more devices: past some size the extra devices cost more in
  // communication than they add, and the planner leaves them out.
  const ModelSpec m = *FindModelPreset("llama-100m");
  PlanRequest r;
  r.global_batch_sequences = 64;
  r.seq_len = 256;
  const std::vector<std::vector<Cluster>> chains = {{Mixed(1), Mixed(2), Mixed(4)},
                                                    {Mixed(1), Mixed(1, true)}};
  int left_out = 0;
  for (const auto& chain : chains)
    for (const std::string strategy : {"auto", "zorse", "poplar"}) {
      double previous_s = 0;
      for (const Cluster& cluster : chain) {
        const CostModel costs(cluster, m, nullptr, 256, Precision::kBf16, true);
        const StrategyOutcome o =
            PlanWithStrategy(strategy, cluster, m, costs, r, SimulationEvaluator(cluster, m, costs));
        ASSERT_TRUE(o.status.ok()) << strategy << " on " << cluster.name << ": " << o.status.message();
        if (previous_s > 0) {
          EXPECT_LE(o.evaluation.step_time_s, previous_s * (1 + 1e-9)) << strategy << " on " << cluster.name;
        }
        previous_s = o.evaluation.step_time_s;
        if (o.plan.num_devices() < cluster.num_devices()) {
          ++left_out;
          EXPECT_NE(o.explain.find(" devices out ("), std::string::npos) << o.explain;
        }
      }
    }
  EXPECT_GT(left_out, 0) << "no plan left a device out: the chains do not test it";
}

TEST(EvaluateAll, AnswersEveryPlanOnceInItsOrder) {
  std::vector<Plan> plans(37);
  for (size_t i = 0; i < plans.size(); ++i) plans[i].seq_len = static_cast<int64_t>(i + 1);
  std::atomic<int> calls{0};
  const PlanEvaluator evaluate = [&](const Plan& p, const EvaluateBound&) -> Result<PlanEvaluation> {
    ++calls;
    if (p.seq_len == 5) return Status::InvalidArgument("five");
    PlanEvaluation e;
    e.step_time_s = static_cast<double>(p.seq_len) * 2;
    return e;
  };
  const auto answers = EvaluateAll(plans, evaluate);
  EXPECT_EQ(calls.load(), 37);
  ASSERT_EQ(answers.size(), plans.size());
  for (size_t i = 0; i < plans.size(); ++i) {
    if (i == 4) {
      EXPECT_FALSE(answers[i].ok());
      continue;
    }
    ASSERT_TRUE(answers[i].ok());
    EXPECT_EQ(answers[i]->step_time_s, 2.0 * static_cast<double>(i + 1));
  }
}

TEST(SimulationEvaluator, SimulatesAPlanOnceWhicheverStrategyMadeIt) {
  const ModelSpec m = *FindModelPreset("llama-100m");
  const Cluster cluster = Mixed(1);
  const CostModel costs(cluster, m, nullptr, 256, Precision::kBf16, true);
  EvaluationStats stats;
  const PlanEvaluator evaluate = SimulationEvaluator(cluster, m, costs, &stats);
  PlanRequest r;
  r.global_batch_sequences = 64;
  r.seq_len = 256;
  const StrategyOutcome poplar = PlanWithStrategy("poplar", cluster, m, costs, r, evaluate);
  ASSERT_TRUE(poplar.status.ok()) << poplar.status.message();
  const int simulated = stats.evaluations;
  Plan same = poplar.plan;
  same.strategy = "someone-else";
  const PlanEvaluation again = evaluate(same, {}).value();
  EXPECT_EQ(stats.evaluations, simulated);
  EXPECT_GE(stats.cached, 1);
  EXPECT_EQ(again.step_time_s, poplar.evaluation.step_time_s);
  same.groups[0].devices[0].num_microbatches += 1;  // a different plan is simulated
  (void)evaluate(same, {});
  EXPECT_EQ(stats.evaluations, simulated + 1);
}

}  // namespace
}  // namespace motley
