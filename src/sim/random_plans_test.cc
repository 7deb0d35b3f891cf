// Random asymmetric plans, lowered and simulated: sound, deadlock-free, in order where NCCL needs
// it, memory back to its static level — and, for a tied model, its copies summed before they are
// reduced.
#include <cstdint>
#include <cstdio>
#include <random>
#include <set>
#include <string>
#include <vector>

#include <gtest/gtest.h>

#include "plan/lower.h"
#include "plan/plan_io.h"
#include "plan/program_walker.h"
#include "plan/transfer_order.h"
#include "sim/plan_evaluator.h"
#include "sim/simulator.h"
#include "sim/test_models.h"

namespace motley {
namespace {

using test::FastCluster;
using test::LayerHeavyModel;
using test::RandomPlan;

TEST(Lowering, FiveHundredRandomAsymmetricPlansAreDeadlockFree) {
  std::mt19937 rng(2026);
  ModelSpec m = LayerHeavyModel(12);
  m.vocab_size = 32;
  Cluster cluster = FastCluster(8);
  int simulated = 0;
  for (int i = 0; i < 600; ++i) {
    Plan p = RandomPlan(rng, 8, m);
    Status valid = ValidatePlan(p, cluster, m);
    ASSERT_TRUE(valid.ok()) << valid.message();
    Result<Schedule> s = LowerPlan(p, cluster, m);
    ASSERT_TRUE(s.ok()) << s.status().message();
    ASSERT_EQ(CheckSchedule(*s), "");
    ASSERT_EQ(CheckScheduleBuffers(*s), "") << "plan " << i << ":\n" << PlanToToml(p);
    CostModel costs(cluster, m, nullptr, p.seq_len, p.precision, p.activation_checkpointing);
    Result<SimResult> r = Simulate(*s, cluster, costs);
    ASSERT_TRUE(r.ok()) << "plan " << i << ": " << r.status().message() << "\n" << PlanToToml(p);
    EXPECT_GT(r->step_time_s, 0);
    EXPECT_EQ(r->num_events, static_cast<int64_t>(s->num_ops()));
    // Every allocation is freed by the end of the step: memory returns to the static level.
    for (const auto& d : r->devices) {
      const Program& prog = s->programs[d.rank];
      ASSERT_NEAR(d.end_memory_bytes, prog.static_device_bytes, 1e-6 * (1 + prog.static_device_bytes))
          << "plan " << i << " rank " << d.rank << "\n"
          << ScheduleListing(*s);
      ASSERT_NEAR(d.end_host_bytes, prog.static_host_bytes, 1e-6 * (1 + prog.static_host_bytes))
          << "plan " << i;
    }
    ++simulated;
  }
  EXPECT_EQ(simulated, 600);
}

// The planner's judging keeps one program a class of alike ranks (LowerOptions::device_class): the
// step it simulates is the one every program gives, figure for figure — on random plans of alike
// devices, and on a plan over two device types of the GPU catalog.
void ExpectTheSameStep(const Plan& p, const Cluster& cluster, const ModelSpec& m, const std::string& what,
                       int* represented) {
  CostModel costs(cluster, m, nullptr, p.seq_len, p.precision, p.activation_checkpointing);
  LowerOptions full_options;
  full_options.check = false;
  LowerOptions classes = full_options;
  classes.device_class = DeviceCostClasses(cluster, costs);
  Result<Schedule> full = LowerPlan(p, cluster, m, full_options);
  Result<Schedule> reduced = LowerPlan(p, cluster, m, classes);
  ASSERT_TRUE(full.ok() && reduced.ok()) << what;
  for (size_t r = 0; r < reduced->represented_by.size(); ++r) {
    const auto q = static_cast<size_t>(reduced->represented_by[r]);
    *represented += q != r ? 1 : 0;
    // Alike as every rank's program is emitted — whether found alike as emitted, or (one group,
    // no tensor parallelism) predicted alike from the plan and never emitted.
    EXPECT_EQ(reduced->represented_by[q], static_cast<int32_t>(q)) << what << " rank " << r;
    if (q != r) {
      EXPECT_TRUE(AlikePrograms(full->programs[r], full->programs[q]))
          << what << " rank " << r << " as " << q;
    }
  }
  Result<SimResult> a = Simulate(*full, cluster, costs, {.check_buffers = false});
  Result<SimResult> b = Simulate(*reduced, cluster, costs, {.check_buffers = false});
  ASSERT_TRUE(a.ok() && b.ok()) << what;
  EXPECT_EQ(a->step_time_s, b->step_time_s) << what;
  EXPECT_EQ(a->fits_memory, b->fits_memory) << what;
  EXPECT_EQ(a->hfu, b->hfu) << what;
  EXPECT_EQ(a->mfu, b->mfu) << what;
  ASSERT_EQ(a->devices.size(), b->devices.size());
  for (size_t r = 0; r < a->devices.size(); ++r) {
    const DeviceSimReport &x = a->devices[r], &y = b->devices[r];
    EXPECT_EQ(x.device, y.device);
    EXPECT_EQ(x.peak_memory_bytes, y.peak_memory_bytes) << what << " rank " << r;
    EXPECT_EQ(x.peak_host_bytes, y.peak_host_bytes) << what << " rank " << r;
    EXPECT_EQ(x.compute_busy_s, y.compute_busy_s) << what << " rank " << r;
    EXPECT_EQ(x.comm_busy_s, y.comm_busy_s) << what << " rank " << r;
    EXPECT_EQ(x.end_memory_bytes, y.end_memory_bytes) << what << " rank " << r;
  }
}

TEST(Lowering, OneProgramAClassOfAlikeRanksSimulatesTheSameStep) {
  std::mt19937 rng(2029);
  ModelSpec m = LayerHeavyModel(12);
  m.vocab_size = 32;
  const Cluster cluster = FastCluster(8);
  int represented = 0;
  for (int i = 0; i < 300; ++i) {
    const Plan p = RandomPlan(rng, 8, m);
    ExpectTheSameStep(p, cluster, m, "plan " + std::to_string(i) + ":\n" + PlanToToml(p), &represented);
  }
  EXPECT_GT(represented, 50) << "alike ranks keep one program between them";

  // Two device types (8 of each), one group at uneven counts by type, its state offloaded between
  // ministage visits (a plan as Zorse's search makes them): a class a type.
  const Cluster mixed = ParseClusterToml(R"(
[[nodes]]
name = "h"
device = "h100-sxm"
count = 8
interconnect = "nvswitch"
nic_bandwidth = "400Gbps"
[[nodes]]
name = "a"
device = "a100-40gb"
count = 8
interconnect = "nvswitch"
nic_bandwidth = "400Gbps"
)",
                                         "mixed.toml")
                            .value();
  Plan p;
  p.seq_len = 16;
  p.precision = Precision::kBf16;
  p.schedule = PipelineSchedule::kInterleaved;
  p.zero_stage = 2;
  p.activation_checkpointing = true;
  p.offload_params = true;
  p.offload_activations = true;
  p.gradient_clipping = true;
  GroupPlan g;
  g.ministages = SplitLayers(0, m.num_layers, 6);
  for (int d = 0; d < 16; ++d) g.devices.push_back({d, 2, d < 8 ? 6 : 3, 0});
  p.groups.push_back(g);
  ASSERT_TRUE(ValidatePlan(p, mixed, m).ok());
  represented = 0;
  ExpectTheSameStep(p, mixed, m, "two types", &represented);
  // Every rank of a type but its first stands for none: the group's first rank's program is alike
  // too (a visit's preparation follows each rank's own first task of the visit before).
  EXPECT_EQ(represented, 14) << "each type's ranks but one";
}

// The planner's evaluator stops a plan early once it knows the step is longer than a bound (from the
// plan alone: compute, a pipeline's fill and drain, its busiest sender; then from the emitted ops;
// then in the simulation): at a bound just above the step it never stops, just below it always does
// — on random plans, over links slow enough that the sends decide some of them.
TEST(Lowering, ThePlannersEarlyExitsStopOnlyPlansLongerThanTheBound) {
  std::mt19937 rng(2031);
  ModelSpec m = LayerHeavyModel(12);
  m.vocab_size = 32;
  int pipelines = 0;
  for (const std::string link : {"1000TB/s", "2GB/s"}) {
    const Cluster cluster = FastCluster(8, "64GiB", link);
    for (int i = 0; i < 150; ++i) {
      const Plan p = RandomPlan(rng, 8, m);
      CostModel plan_costs(cluster, m, nullptr, p.seq_len, p.precision, p.activation_checkpointing);
      const std::string what = "plan " + std::to_string(i) + " over " + link + ":\n" + PlanToToml(p);
      Result<PlanEvaluation> full = SimulationEvaluator(cluster, m, plan_costs)(p, {});
      ASSERT_TRUE(full.ok()) << what;
      ASSERT_FALSE(full->stopped);
      Result<PlanEvaluation> above =
          SimulationEvaluator(cluster, m, plan_costs)(p, {.stop_after_s = full->step_time_s * (1 + 1e-6)});
      ASSERT_TRUE(above.ok()) << what;
      EXPECT_FALSE(above->stopped) << what;
      EXPECT_EQ(above->step_time_s, full->step_time_s) << what;
      Result<PlanEvaluation> below =
          SimulationEvaluator(cluster, m, plan_costs)(p, {.stop_after_s = full->step_time_s * 0.98});
      ASSERT_TRUE(below.ok()) << what;
      EXPECT_TRUE(below->stopped) << what;
      pipelines += p.is_pipeline() ? 1 : 0;
    }
  }
  EXPECT_GT(pipelines, 50);
}

// The passes over the finished programs run a program at a time on several threads
// (LowerOptions::threads, what motley simulate asks for): the schedule is the one one thread lowers,
// field for field — with clipping's hold of the updates and without, every program kept or one a
// class.
TEST(Lowering, PassesOnSeveralThreadsLowerTheSameScheduleAsOne) {
  std::mt19937 rng(2033);
  ModelSpec m = LayerHeavyModel(12);
  m.vocab_size = 32;
  const Cluster cluster = FastCluster(8);
  int clipped = 0;
  for (int i = 0; i < 120; ++i) {
    Plan p = RandomPlan(rng, 8, m);
    p.gradient_clipping = i % 2 == 0;
    clipped += p.gradient_clipping ? 1 : 0;
    const std::string what = "plan " + std::to_string(i) + ":\n" + PlanToToml(p);
    CostModel costs(cluster, m, nullptr, p.seq_len, p.precision, p.activation_checkpointing);
    LowerOptions one;
    if (i % 3 == 0) {  // the planner's judging: one program a class
      one.check = false;
      one.device_class = DeviceCostClasses(cluster, costs);
    }
    LowerOptions several = one;
    several.threads = 3;
    Result<Schedule> a = LowerPlan(p, cluster, m, one);
    Result<Schedule> b = LowerPlan(p, cluster, m, several);
    ASSERT_TRUE(a.ok() && b.ok()) << what;
    ASSERT_GT(a->num_ops(), 0u) << what;
    EXPECT_EQ(ScheduleHash(*b), ScheduleHash(*a)) << what;
  }
  EXPECT_EQ(clipped, 60);
}

TEST(Lowering, RandomAsymmetricPlansRunWhereTransfersMatchInOrder) {
  // What NCCL needs (plan/transfer_order.h): every pair's transfers and every group's collectives
  // issued in the same order on both sides, and no wait that never ends.
  std::mt19937 rng(2026);
  ModelSpec m = LayerHeavyModel(12);
  m.vocab_size = 32;
  Cluster cluster = FastCluster(8);
  for (int i = 0; i < 600; ++i) {
    Plan p = RandomPlan(rng, 8, m);
    Result<Schedule> s = LowerPlan(p, cluster, m);
    ASSERT_TRUE(s.ok()) << s.status().message();
    ASSERT_EQ(CheckTransferOrder(*s), "") << "plan " << i << ":\n" << PlanToToml(p);
  }
}

// A tied model in several ministages: the head's ministage holds a copy of the embedding matrix
// whose gradient is summed with the embedding's before either is reduced (Collective::
// tied_embedding). On random plans: sound, deadlock-free and in order as the untied are; the sum
// comes after each copy's last backward and before its reduction on every rank that holds one;
// one group's ranks sum alone, two groups' ranks with the same vocabulary rows together; and the
// head's ranks hold the copy (static bytes at least the untied model's).
TEST(Lowering, RandomPlansOfATiedModelSumTheCopiesBeforeReducingThem) {
  std::mt19937 rng(2027);
  ModelSpec m = LayerHeavyModel(12);
  m.vocab_size = 32;
  ModelSpec tied = m;
  tied.tie_embeddings = true;
  Cluster cluster = FastCluster(8);
  int lowered = 0, across_groups = 0;
  for (int i = 0; i < 300; ++i) {
    Plan p = RandomPlan(rng, 8, m);
    if (!ValidatePlan(p, cluster, tied).ok()) continue;  // groups that split the vocabulary differently
    Result<Schedule> s = LowerPlan(p, cluster, tied);
    ASSERT_TRUE(s.ok()) << s.status().message();
    ASSERT_EQ(CheckSchedule(*s), "");
    ASSERT_EQ(CheckScheduleBuffers(*s), "") << "plan " << i << ":\n" << PlanToToml(p);
    ASSERT_EQ(CheckTransferOrder(*s), "") << "plan " << i << ":\n" << PlanToToml(p);
    CostModel costs(cluster, tied, nullptr, p.seq_len, p.precision, p.activation_checkpointing);
    Result<SimResult> r = Simulate(*s, cluster, costs);
    ASSERT_TRUE(r.ok()) << "plan " << i << ": " << r.status().message() << "\n" << PlanToToml(p);
    for (const auto& d : r->devices)
      ASSERT_NEAR(d.end_memory_bytes, s->programs[d.rank].static_device_bytes,
                  1e-6 * (1 + s->programs[d.rank].static_device_bytes));
    const int last = static_cast<int>(s->ministages.size()) - 1;
    std::vector<int> ties;
    for (size_t c = 0; c < s->collectives.size(); ++c)
      if (s->collectives[c].tied_embedding) ties.push_back(static_cast<int>(c));
    if (last == 0) {
      EXPECT_TRUE(ties.empty()) << "one ministage holds the one matrix";
      continue;
    }
    ++lowered;
    const int ge = s->ministages[0].group, gh = s->ministages[last].group;
    across_groups += ge != gh ? 1 : 0;
    for (int c : ties) {
      std::set<int> groups;
      for (int rank : s->collectives[c].ranks) groups.insert(s->programs[rank].group);
      if (ge == gh) {
        EXPECT_EQ(s->collectives[c].ranks.size(), 1u) << "one group's ranks sum their own copies";
      } else {
        EXPECT_EQ(groups, (std::set<int>{ge, gh}));
        std::set<int> places;
        for (int rank : s->collectives[c].ranks) places.insert(s->programs[rank].tp_index);
        EXPECT_EQ(places.size(), 1u) << "the members hold the same vocabulary rows";
      }
    }
    Result<Schedule> untied = LowerPlan(p, cluster, m);
    ASSERT_TRUE(untied.ok());
    for (const Program& prog : s->programs) {
      if (prog.group != ge && prog.group != gh) continue;
      if (prog.group == gh) {
        EXPECT_GE(prog.static_device_bytes + prog.static_host_bytes,
                  untied->programs[prog.rank].static_device_bytes +
                      untied->programs[prog.rank].static_host_bytes - 1);
      }
      // Per held copy: its last backward < the sum < its first reduction after the sum.
      int tie = -1;
      for (size_t k = 0; k < prog.ops.size(); ++k)
        if (prog.ops[k].collective >= 0 && s->collectives[prog.ops[k].collective].tied_embedding)
          tie = static_cast<int>(k);
      ASSERT_GE(tie, 0) << "rank " << prog.rank << " holds a copy";
      for (int v : {0, last}) {
        if (s->ministages[v].group != prog.group) continue;
        int last_backward = -1, first_reduce_after = -1;
        for (size_t k = 0; k < prog.ops.size(); ++k) {
          const Op& op = prog.ops[k];
          if (op.kind == OpKind::kBackward && op.ministage == v) last_backward = static_cast<int>(k);
          if ((op.kind == OpKind::kReduceScatter ||
               (op.kind == OpKind::kAllReduce && !s->collectives[op.collective].tied_embedding &&
                !s->collectives[op.collective].tensor_parallel)) &&
              op.ministage == v && static_cast<int>(k) > tie && first_reduce_after < 0)
            first_reduce_after = static_cast<int>(k);
        }
        if (p.zero_stage >= 2 && p.groups.size() == 1 && !p.is_pipeline())
          continue;  // reduced per microbatch
        EXPECT_LT(last_backward, tie) << "plan " << i << " rank " << prog.rank << " ministage " << v;
        EXPECT_GT(first_reduce_after, tie) << "plan " << i << " rank " << prog.rank << " ministage " << v;
      }
    }
  }
  std::printf("%d plans in several ministages, %d with the copies in two groups\n", lowered, across_groups);
  EXPECT_GT(lowered, 100);
  EXPECT_GT(across_groups, 30);
}

}  // namespace
}  // namespace motley
