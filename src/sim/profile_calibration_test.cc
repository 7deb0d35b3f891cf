#include "sim/profile_calibration.h"

#include <gtest/gtest.h>

#include "core/cluster_parse.h"
#include "plan/lower.h"
#include "sim/cost_model.h"
#include "sim/test_models.h"

namespace motley {
namespace {

// Two device types on one node, links (almost) free: compute alone shapes the step.
Cluster TwoTypes() {
  std::string types;
  for (const char* t : {"a", "b"})
    types += std::string("[device_types.") + t +
             "]\nmemory = \"64GiB\"\nmemory_bandwidth = \"1000TB/s\"\nfp16_flops = \"100TFLOPS\"\n"
             "fp32_flops = \"100TFLOPS\"\nhost_link = \"1000TB/s\"\n";
  std::string nodes;
  for (const char* t : {"a", "b"})
    nodes += std::string("[[nodes]]\nname = \"n") + t + "\"\ndevice = \"" + t +
             "\"\ninterconnect = \"pcie\"\nintra_bandwidth = \"1000TB/s\"\nnic_bandwidth = "
             "\"1000TB/s\"\ncount = 1\n";
  return ParseClusterToml(
             "[network]\nintra_node_latency = \"1ns\"\ninter_node_latency = \"1ns\"\n" + types + nodes,
             "two.toml")
      .value();
}

ModelSpec Model() { return test::LayerHeavyModel(4); }

// 10 ms forward, 20 ms backward per layer at any microbatch, for both types.
Profile Flat(const ModelSpec& m) {
  Profile p;
  for (const char* t : {"a", "b"}) {
    ProfileEntry e;
    e.device_type = t;
    e.model = m.name;
    e.hidden_size = m.hidden_size;
    e.seq_len = 128;
    e.precision = Precision::kBf16;
    e.points = {{1, 10, 20}, {64, 10, 20}};
    e.backward_fit = LinearFit{0, 20};
    e.optimizer_ms_per_mparam = 1;
    p.entries.push_back(e);
  }
  return p;
}

// Two pipeline stages, one per type, four microbatches.
Schedule TwoStages(const Cluster& cluster, const ModelSpec& m) {
  Plan p;
  p.seq_len = 128;
  p.precision = Precision::kBf16;
  p.schedule = PipelineSchedule::kGPipe;
  p.zero_stage = 0;
  for (int g = 0; g < 2; ++g) {
    GroupPlan gp;
    gp.ministages = {{2 * g, 2 * g + 2}};
    gp.devices = {{g, 1, 4, 0}};
    p.groups.push_back(gp);
  }
  return LowerPlan(p, cluster, m).value();
}

SimResult SimulateTwoStages(const Cluster& cluster, const ModelSpec& m, const Profile& profile) {
  CostModel costs(cluster, m, &profile, 128, Precision::kBf16, true);
  return Simulate(TwoStages(cluster, m), cluster, costs).value();
}

TEST(CalibrateProfile, ScalesEachTypeByWhatItsRanksMeasured) {
  const Cluster cluster = TwoTypes();
  const ModelSpec m = Model();
  Profile profile = Flat(m);
  const SimResult before = SimulateTwoStages(cluster, m, profile);
  // The run: type a's rank took 1.5x its predicted compute, type b's 0.8x.
  const std::vector<double> measured = {1.5 * before.devices[0].compute_busy_s,
                                        0.8 * before.devices[1].compute_busy_s};
  Result<std::vector<TypeCalibration>> c =
      CalibrateProfile(&profile, before, measured, m, 128, Precision::kBf16);
  ASSERT_TRUE(c.ok()) << c.status().message();
  ASSERT_EQ(c->size(), 2u);
  EXPECT_EQ((*c)[0].device_type, "a");
  EXPECT_NEAR((*c)[0].scale, 1.5, 1e-12);
  EXPECT_NEAR((*c)[1].scale, 0.8, 1e-12);
  EXPECT_NEAR(profile.entries[0].points[1].backward_ms, 30, 1e-12);
  EXPECT_NEAR(profile.entries[0].backward_fit->intercept_ms, 30, 1e-12);
  EXPECT_NEAR(profile.entries[1].optimizer_ms_per_mparam, 0.8, 1e-12);
  // Simulated again, the plan's ranks compute what the run measured.
  const SimResult after = SimulateTwoStages(cluster, m, profile);
  EXPECT_NEAR(after.devices[0].compute_busy_s, measured[0], 1e-6 * measured[0]);
  EXPECT_NEAR(after.devices[1].compute_busy_s, measured[1], 1e-6 * measured[1]);
  EXPECT_GT(after.step_time_s, before.step_time_s);
}

TEST(CalibrateProfile, MetricsOfAnotherPlanAreOneClearError) {
  const Cluster cluster = TwoTypes();
  const ModelSpec m = Model();
  Profile profile = Flat(m);
  const SimResult sim = SimulateTwoStages(cluster, m, profile);
  Result<std::vector<TypeCalibration>> ranks =
      CalibrateProfile(&profile, sim, {1.0}, m, 128, Precision::kBf16);
  ASSERT_FALSE(ranks.ok());
  EXPECT_NE(ranks.status().message().find("1 ranks and the plan 2"), std::string::npos)
      << ranks.status().message();
  // Ranks sharing busy cores run several times their profile (MultiHost's 4 ranks on 2 cores measured
  // 5.97x): that is a run of this plan, calibrated.
  Profile shared = profile;
  const std::vector<double> crowded = {6 * sim.devices[0].compute_busy_s, sim.devices[1].compute_busy_s};
  Result<std::vector<TypeCalibration>> slow =
      CalibrateProfile(&shared, sim, crowded, m, 128, Precision::kBf16);
  ASSERT_TRUE(slow.ok()) << slow.status().message();
  EXPECT_NEAR((*slow)[0].scale, 6, 1e-12);
  const std::vector<double> far = {40 * sim.devices[0].compute_busy_s, sim.devices[1].compute_busy_s};
  Result<std::vector<TypeCalibration>> off = CalibrateProfile(&profile, sim, far, m, 128, Precision::kBf16);
  ASSERT_FALSE(off.ok());
  EXPECT_NE(off.status().message().find("not of a run of this plan"), std::string::npos)
      << off.status().message();
  EXPECT_NEAR(profile.entries[0].points[0].forward_ms, 10, 1e-12)
      << "a failed calibration leaves the profile alone";
}

// A data-parallel plan over the two nodes: its gradients' all-reduce crosses their link.
Plan DataParallel() {
  Plan p;
  p.seq_len = 128;
  p.precision = Precision::kBf16;
  p.schedule = PipelineSchedule::kGPipe;
  p.zero_stage = 0;
  GroupPlan gp;
  gp.ministages = {{0, 4}};
  gp.devices = {{0, 1, 4, 0}, {1, 1, 4, 0}};
  p.groups.push_back(gp);
  return p;
}

double MeanComm(const Cluster& cluster, const ModelSpec& m, const Profile& profile) {
  CostModel costs(cluster, m, &profile, 128, Precision::kBf16, true);
  const SimResult sim = Simulate(LowerPlan(DataParallel(), cluster, m).value(), cluster, costs).value();
  return 0.5 * (sim.devices[0].comm_busy_s + sim.devices[1].comm_busy_s);
}

TEST(CalibrateCommunication, TheLinksOverheadMakesThePlansCommunicationTheRuns) {
  const Cluster cluster = TwoTypes();
  const ModelSpec m = Model();
  Profile profile = Flat(m);
  const double before_s = MeanComm(cluster, m, profile);
  // The run spent 40 ms more a step in its collectives than the links' figures say, one rank more
  // than the other (the mean counts).
  const std::vector<double> measured = {before_s + 0.030, before_s + 0.050};
  Result<CommCalibration> c = CalibrateCommunication(&profile, DataParallel(), cluster, m, measured);
  ASSERT_TRUE(c.ok()) << c.status().message();
  EXPECT_NEAR(c->measured_comm_s, before_s + 0.040, 1e-12);
  EXPECT_NEAR(c->simulated_comm_s, before_s, 1e-9);
  EXPECT_EQ(c->links_added, 1);  // na <-> nb, from the cluster (one device a node: no link within)
  ASSERT_EQ(profile.links.size(), 1u);
  EXPECT_GT(c->overhead_added_s, 0);
  EXPECT_FALSE(c->clamped);
  EXPECT_NEAR(c->calibrated_comm_s, c->measured_comm_s, 1e-6);
  EXPECT_NEAR(MeanComm(cluster, m, profile), c->measured_comm_s, 1e-6)
      << "the calibrated profile predicts it";
  // Calibrated again on the same figures: nothing more to add, nothing added twice.
  Result<CommCalibration> again = CalibrateCommunication(&profile, DataParallel(), cluster, m, measured);
  ASSERT_TRUE(again.ok()) << again.status().message();
  EXPECT_EQ(again->links_added, 0);
  EXPECT_NEAR(again->overhead_added_s, 0, 1e-6);
}

TEST(CalibrateCommunication, LessThanTheLinksAllowIsClampedAndNoneIsAnError) {
  const Cluster cluster = TwoTypes();
  const ModelSpec m = Model();
  Profile profile = Flat(m);
  const double before_s = MeanComm(cluster, m, profile);
  ASSERT_GT(before_s, 0);
  Result<CommCalibration> low =
      CalibrateCommunication(&profile, DataParallel(), cluster, m, {before_s / 2, before_s / 2});
  ASSERT_TRUE(low.ok()) << low.status().message();
  EXPECT_TRUE(low->clamped);
  EXPECT_NEAR(low->calibrated_comm_s, before_s, 1e-9) << "the overhead stays >= 0";
  Profile untouched = Flat(m);
  Result<CommCalibration> none = CalibrateCommunication(&untouched, DataParallel(), cluster, m, {0, 0});
  ASSERT_FALSE(none.ok());
  EXPECT_NE(none.status().message().find("no communication"), std::string::npos) << none.status().message();
  Result<CommCalibration> ranks = CalibrateCommunication(&untouched, DataParallel(), cluster, m, {0.1});
  ASSERT_FALSE(ranks.ok());
  EXPECT_NE(ranks.status().message().find("1 ranks and the plan 2"), std::string::npos)
      << ranks.status().message();
  EXPECT_TRUE(untouched.links.empty()) << "a failed calibration leaves the profile alone";
}

}  // namespace
}  // namespace motley
