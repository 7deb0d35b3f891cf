// Islands in two regions: the outer round's ops (plan/outer_round.h) — each rank exchanges the piece it
// updates, once — and the simulated period, against the formulas.
#include "sim/islands_sim.h"

#include <algorithm>
#include <iostream>

#include <gtest/gtest.h>

#include "core/cluster_parse.h"
#include "plan/lower.h"
#include "plan/outer_round.h"
#include "sim/region_traffic.h"
#include "sim/test_models.h"

namespace motley {
namespace {

// Two nodes of two devices, one node in each region, a slow link between them.
Cluster TwoRegions() {
  return ParseClusterToml(R"(
[network]
inter_region_bandwidth = "1Gbps"
[[nodes]]
name = "e"
device = "a100-80gb"
count = 2
nic_bandwidth = "100Gbps"
region = "east"
[[nodes]]
name = "w"
device = "a100-80gb"
count = 2
nic_bandwidth = "100Gbps"
region = "west"
)",
                          "two.toml")
      .value();
}

// Data parallelism over `devices`, `sequences` each a step, at ZeRO stage `zero`.
Plan DataParallel(std::vector<int> devices, int zero, int64_t sequences) {
  Plan p;
  p.seq_len = 128;
  p.zero_stage = zero;
  GroupPlan g;
  g.ministages = {{0, 2}, {2, 4}};
  for (int d : devices) g.devices.push_back({d, sequences, 1, 0});
  p.groups.push_back(g);
  return p;
}

struct Islands {
  std::vector<Schedule> steps;
  std::vector<const Schedule*> pointers() const {
    std::vector<const Schedule*> out;
    for (const Schedule& s : steps) out.push_back(&s);
    return out;
  }
};

Islands EastAndWest(const ModelSpec& m, const Cluster& c, int zero) {
  Islands out;
  out.steps.push_back(LowerPlan(DataParallel({0, 1}, zero, 4), c, m).value());
  out.steps.push_back(LowerPlan(DataParallel({2, 3}, zero, 4), c, m).value());
  return out;
}

TEST(OuterRound, EachRankExchangesThePieceItUpdatesWithTheSameRankOfTheOtherIsland) {
  const ModelSpec m = test::LayerHeavyModel(4);
  const Cluster c = TwoRegions();
  const double total = static_cast<double>(TotalParams(m));
  for (int zero : {0, 2, 3}) {
    SCOPED_TRACE(zero);
    const Islands islands = EastAndWest(m, c, zero);
    const Schedule round = LowerOuterRound(islands.pointers(), {"none", 4}).value();
    ASSERT_EQ(round.programs.size(), 4u);
    for (int island = 0; island < 2; ++island) {
      double exchanged = 0;
      for (int local = 0; local < 2; ++local) {
        const Program& p = round.programs[static_cast<size_t>(RoundRank(island, local, 2))];
        EXPECT_EQ(p.device, 2 * island + local);
        double pieces = 0;
        int gathers = 0;
        for (const Op& op : p.ops) {
          if (op.kind == OpKind::kOuterReduce) {
            const Collective& col = round.collectives[static_cast<size_t>(op.collective)];
            EXPECT_EQ(col.ranks, (std::vector<int32_t>{local, 2 + local}));  // the same rank of each island
            EXPECT_DOUBLE_EQ(col.bytes, op.params * 4);                      // in the master precision
            pieces += op.params;
          }
          if (op.kind == OpKind::kAllGather) ++gathers;
        }
        // Half the model a rank: each value once an island, whatever its ZeRO stage.
        EXPECT_NEAR(pieces, total / 2, 1e-9 * total);
        EXPECT_DOUBLE_EQ(p.static_device_bytes, 2 * pieces * 4);  // the anchor and the momentum
        // Replicas that keep the full parameters gather the new pieces (one a ministage); ZeRO-3's do not.
        EXPECT_EQ(gathers, zero == 3 ? 0 : 2);
        exchanged += pieces;
      }
      EXPECT_NEAR(exchanged, total, 1e-9 * total);
    }
    // Compressed, each island's piece crosses as fp16 and is gathered.
    const Schedule fp16 = LowerOuterRound(islands.pointers(), {"fp16", 4}).value();
    for (const Op& op : fp16.programs[0].ops)
      if (op.kind == OpKind::kOuterReduce) {
        const Collective& col = fp16.collectives[static_cast<size_t>(op.collective)];
        EXPECT_TRUE(col.gathers);
        EXPECT_DOUBLE_EQ(col.bytes, 2 * op.params * 2);  // both islands' pieces, 2 bytes a value
      }
  }
}

TEST(OuterRound, IslandsOfUnlikeShapesExchangeEachFragmentWholeThroughOneLeadAnIsland) {
  const ModelSpec m = test::LayerHeavyModel(4);
  const Cluster c = TwoRegions();
  Islands islands;
  islands.steps.push_back(LowerPlan(DataParallel({0, 1}, 2, 4), c, m).value());
  islands.steps.push_back(LowerPlan(DataParallel({2}, 0, 8), c, m).value());
  // Without the model's sizes the fragments cannot be sized: one error saying so.
  const Result<Schedule> unsized = LowerOuterRound(islands.pointers(), {});
  ASSERT_FALSE(unsized.ok());
  EXPECT_NE(unsized.status().message().find("SetFragmentSizes"), std::string::npos);
  OuterRoundOptions options{"none", 4};
  SetFragmentSizes(m, options);
  OuterRoundLayout where;
  const Schedule round = LowerOuterRound(islands.pointers(), options, &where).value();
  EXPECT_TRUE(where.whole_fragments);
  EXPECT_EQ(where.first_rank, (std::vector<int32_t>{0, 2}));
  EXPECT_EQ(where.first_ministage, (std::vector<int32_t>{0, 2}));
  ASSERT_EQ(round.programs.size(), 3u);
  // Every value crosses between the islands once: a fragment an outer reduce, between one lead of each
  // island; the leads of island 0 alternate between its two ranks.
  double crossing = 0;
  std::vector<int> led(2, 0);
  for (const Collective& col : round.collectives)
    if (col.kind == OpKind::kOuterReduce) {
      crossing += col.bytes;
      ASSERT_EQ(col.ranks.size(), 2u);
      EXPECT_EQ(col.ranks[1], 2);
      ++led.at(static_cast<size_t>(col.ranks[0]));
    }
  EXPECT_DOUBLE_EQ(crossing, 4.0 * static_cast<double>(TotalParams(m)));
  EXPECT_EQ(led[0] + led[1], 6);  // the embedding, 4 layers, the head
  EXPECT_EQ(led[0], 3);
  // Each rank steps each piece it updates once; island 0's ranks sum and take back each fragment
  // (two all-reduces a fragment), island 1's one rank none.
  for (size_t r = 0; r < 3; ++r) {
    int steps = 0, sums = 0;
    for (const Op& op : round.programs[r].ops) {
      steps += op.kind == OpKind::kOuterStep;
      sums += op.kind == OpKind::kAllReduce;
    }
    EXPECT_EQ(steps, 2) << r;
    EXPECT_EQ(sums, r < 2 ? 12 : 0) << r;
  }
  // Two islands on the same devices are not two islands.
  islands.steps[1] = LowerPlan(DataParallel({1, 0}, 2, 4), c, m).value();
  const Result<Schedule> shared = LowerOuterRound(islands.pointers(), {});
  ASSERT_FALSE(shared.ok());
  EXPECT_NE(shared.status().message().find("give each island devices of its own"), std::string::npos);
}

TEST(IslandsSim, TheSlowLinkCarriesOnlyTheRoundAndThePeriodIsTheSlowestIslandsStepsThenTheRound) {
  const ModelSpec m = test::LayerHeavyModel(4);
  const Cluster c = TwoRegions();
  const double total = static_cast<double>(TotalParams(m));
  const Profile profile = test::FlatProfile(m, 128);
  CostModel costs(c, m, &profile, 128, Precision::kBf16, true);
  const Islands islands = EastAndWest(m, c, 2);
  const Schedule round = LowerOuterRound(islands.pointers(), {"none", 4}).value();
  const int64_t h = 10;
  const IslandsSimResult r = SimulateIslands(islands.pointers(), {h, h}, round, c, costs).value();
  ASSERT_EQ(r.islands.size(), 2u);
  EXPECT_NEAR(r.period_s,
              h * std::max(r.islands[0].step_time_s, r.islands[1].step_time_s) + r.round.step_time_s, 1e-12);
  EXPECT_GT(r.round.step_time_s, 0);
  EXPECT_DOUBLE_EQ(r.tokens_per_period, 2.0 * h * 8 * 128);
  // Across the link: each rank's half-model piece in fp32, all-reduced by a ring of two whose both
  // hops cross (2 x (n - 1) / n = 1 piece a hop).
  const double across = 2 * 2 * (total / 2 * 4);
  EXPECT_NEAR(r.cross_region_bytes_per_token * r.tokens_per_period, across, 1e-6 * across);
  // The ranks' exchanges share the one link: the round takes at least each direction's bytes over it.
  EXPECT_NEAR(r.round.region_link_bound_s, costs.TransferS(0, 2, across / 2), 1e-9);
  EXPECT_GE(r.round.step_time_s, r.round.region_link_bound_s);
  // The outer state is held through the inner steps.
  const SimResult plain = Simulate(islands.steps[0], c, costs).value();
  EXPECT_NEAR(r.islands[0].devices[0].peak_memory_bytes - plain.devices[0].peak_memory_bytes,
              round.programs[0].static_device_bytes, 1);

  // The same devices synchronously: every step's gradients cross the slow link.
  const Schedule sync = LowerPlan(DataParallel({0, 1, 2, 3}, 2, 4), c, m).value();
  const SimResult s = Simulate(sync, c, costs).value();
  double sync_across = 0;
  for (const RegionBytes& b : RegionTraffic(sync, c)) sync_across += b.bytes;
  const double sync_per_token = sync_across / static_cast<double>(sync.global_batch_tokens);
  EXPECT_GT(sync_per_token / r.cross_region_bytes_per_token, 5.0);
  EXPECT_GT(r.tokens_per_s, s.tokens_per_s);
}

// A round that overlaps the next inner steps costs the period only what its exchange takes beyond them
// and its landing (the outer steps and gathers): less with each step it overlaps, down to the landing.
TEST(IslandsSim, AnOverlappedRoundCostsOnlyWhatItsStepsDoNotHide) {
  const ModelSpec m = test::LayerHeavyModel(4);
  const Cluster c = TwoRegions();
  const Profile profile = test::FlatProfile(m, 128);
  CostModel costs(c, m, &profile, 128, Precision::kBf16, true);
  const Islands islands = EastAndWest(m, c, 2);
  const int64_t h = 2000;  // inner steps about as long as the round
  const Schedule waiting = LowerOuterRound(islands.pointers(), {"none", 4}).value();
  const IslandsSimResult w = SimulateIslands(islands.pointers(), {h, h}, waiting, c, costs).value();
  EXPECT_DOUBLE_EQ(w.round_exposed_s, w.round.step_time_s);
  const double slowest = h * std::max(w.islands[0].step_time_s, w.islands[1].step_time_s);
  double last = w.round_exposed_s;
  for (int64_t overlap : {200, 1000, 1999}) {
    SCOPED_TRACE(overlap);
    OuterRoundOptions options{"none", 4};
    options.overlap_steps = overlap;
    const Schedule round = LowerOuterRound(islands.pointers(), options).value();
    EXPECT_EQ(round.outer_overlap_steps, overlap);
    EXPECT_NE(ScheduleHash(round), ScheduleHash(waiting));
    // Each program sends every piece first; the pseudo-gradient and the value when sent are held on.
    for (size_t r = 0; r < round.programs.size(); ++r) {
      const std::vector<Op>& ops = round.programs[r].ops;
      const auto first_landing = std::find_if(ops.begin(), ops.end(), [](const Op& op) {
        return op.kind == OpKind::kOuterStep || op.kind == OpKind::kAllGather;
      });
      EXPECT_TRUE(std::none_of(first_landing, ops.end(),
                               [](const Op& op) { return op.kind == OpKind::kOuterReduce; }));
      double pieces = 0;
      for (const Op& op : ops)
        if (op.kind == OpKind::kOuterStep) pieces += op.params * 4;
      EXPECT_NEAR(round.programs[r].static_device_bytes - waiting.programs[r].static_device_bytes, 2 * pieces,
                  1e-6);
    }
    const IslandsSimResult o = SimulateIslands(islands.pointers(), {h, h}, round, c, costs).value();
    // The same exchange, the same bytes over the slow link; the islands wait for less of it.
    EXPECT_NEAR(o.round.step_time_s, w.round.step_time_s, 1e-9 * w.round.step_time_s);
    EXPECT_DOUBLE_EQ(o.cross_region_bytes_per_token, w.cross_region_bytes_per_token);
    EXPECT_LE(o.round_exposed_s, last + 1e-12);
    EXPECT_GE(o.round_exposed_s, 0);
    EXPECT_GE(o.round_exposed_s,
              std::max(o.round.step_time_s, o.round.region_link_bound_s) - slowest * overlap / h - 1e-9);
    EXPECT_NEAR(o.period_s, slowest + o.round_exposed_s, 1e-12);
    std::cout << "overlap " << overlap << ": the islands wait " << o.round_exposed_s << " s of a "
              << o.round.step_time_s << " s round (" << slowest << " s of inner steps)\n";
    last = o.round_exposed_s;
  }
  // Overlapping more inner steps than the exchange takes, the islands wait for its landing alone.
  EXPECT_LT(last, 0.1 * w.round_exposed_s);
}

// Streaming fragments: one round a fragment, each on that fragment's values of every piece — together
// the whole round's, each value once — and, overlapping the same tau steps each, the islands wait for
// less of them than of the whole model's round (each carries about half the bytes), holding one
// fragment in flight at a time.
TEST(IslandsSim, StreamedFragmentsSplitTheRoundAndEachHidesBehindItsOwnSteps) {
  const ModelSpec m = test::LayerHeavyModel(4);
  const Cluster c = TwoRegions();
  const Profile profile = test::FlatProfile(m, 128);
  CostModel costs(c, m, &profile, 128, Precision::kBf16, true);
  Islands unlike;
  unlike.steps.push_back(LowerPlan(DataParallel({0, 1}, 2, 4), c, m).value());
  unlike.steps.push_back(LowerPlan(DataParallel({2}, 0, 8), c, m).value());
  for (const Islands& islands : {EastAndWest(m, c, 2), EastAndWest(m, c, 0), unlike}) {
    OuterRoundOptions options{"none", 4};
    SetFragmentSizes(m, options);
    options.overlap_steps = 500;
    const Schedule whole = LowerOuterRound(islands.pointers(), options).value();
    options.fragments = 2;
    const std::vector<Schedule> rounds = LowerOuterRounds(islands.pointers(), options).value();
    ASSERT_EQ(rounds.size(), 2u);
    const auto stepped = [](const Schedule& round, size_t r) {
      double params = 0;
      for (const Op& op : round.programs[r].ops)
        if (op.kind == OpKind::kOuterStep) params += op.params;
      return params;
    };
    for (size_t r = 0; r < whole.programs.size(); ++r) {
      const double all = stepped(whole, r), first = stepped(rounds[0], r), second = stepped(rounds[1], r);
      EXPECT_GT(first, 0);
      EXPECT_GT(second, 0);
      EXPECT_NEAR(first + second, all, 1e-9 * all);
    }
    EXPECT_EQ(rounds[1].outer_fragment, 1);
    EXPECT_NE(SchedulesHash(rounds), ScheduleHash(whole));
    const int64_t h = 2000;  // inner steps about as long as the whole round
    const IslandsSimResult w = SimulateIslands(islands.pointers(), {h, h}, whole, c, costs).value();
    const IslandsSimResult f =
        SimulateIslands(islands.pointers(), {h, h}, {&rounds[0], &rounds[1]}, c, costs).value();
    EXPECT_NEAR(f.cross_region_bytes_per_token, w.cross_region_bytes_per_token,
                1e-9 * w.cross_region_bytes_per_token);
    EXPECT_LT(f.round_exposed_s, w.round_exposed_s);
    EXPECT_NEAR(f.period_s, w.period_s - w.round_exposed_s + f.round_exposed_s, 1e-9 * w.period_s);
    for (size_t i = 0; i < 2; ++i)
      for (size_t d = 0; d < w.islands[i].devices.size(); ++d)
        EXPECT_LT(f.islands[i].devices[d].peak_memory_bytes, w.islands[i].devices[d].peak_memory_bytes);
    std::cout << "2 fragments: the islands wait " << f.round_exposed_s << " s where the whole model's round "
              << w.round_exposed_s << " s\n";
  }
  OuterRoundOptions unsized{"none", 4};
  unsized.fragments = 2;
  EXPECT_FALSE(LowerOuterRounds(EastAndWest(m, c, 2).pointers(), unsized).ok());
}

TEST(IslandsSim, AFasterIslandTakesMoreInnerStepsInTheSameTime) {
  EXPECT_EQ(InnerStepsBySpeed({2.0, 1.0, 0.7}, 10), (std::vector<int64_t>{10, 20, 28}));
  EXPECT_EQ(InnerStepsBySpeed({1.0, 1.0}, 50), (std::vector<int64_t>{50, 50}));
  EXPECT_EQ(InnerStepsBySpeed({1.0, 100.0}, 1), (std::vector<int64_t>{100, 1}));
}

}  // namespace
}  // namespace motley
