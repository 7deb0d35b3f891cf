// State shares apart from batch shares (Cephalo): the split every rank applies, the plan format,
// validation, and what the lowering makes of them.
#include "plan/state_shares.h"

#include <functional>
#include <numeric>

#include <gtest/gtest.h>

#include "core/cluster_parse.h"
#include "plan/lower.h"
#include "plan/plan.h"
#include "plan/plan_io.h"

namespace motley {
namespace {

TEST(StateShares, EvenSharesPadAsZeroAlwaysDid) {
  const StateSplit s = SplitState(10, 3, {});
  EXPECT_TRUE(s.even);
  EXPECT_EQ(s.begin, (std::vector<int64_t>{0, 4, 8}));
  EXPECT_EQ(s.numel, (std::vector<int64_t>{4, 4, 4}));
  EXPECT_EQ(s.padded_numel, 12);
}

TEST(StateShares, UnevenSharesSplitEveryElementOnceWithoutPadding) {
  const StateSplit s = SplitState(1000, 3, {0.6, 0.1, 0.3});
  EXPECT_FALSE(s.even);
  EXPECT_EQ(s.begin, (std::vector<int64_t>{0, 600, 700}));
  EXPECT_EQ(s.numel, (std::vector<int64_t>{600, 100, 300}));
  EXPECT_EQ(s.padded_numel, 1000);
  // Shares that do not divide the elements: rounded at the cumulative boundaries, nothing lost.
  for (int64_t n : {1, 2, 7, 99, 12345}) {
    const StateSplit t = SplitState(n, 4, {0.37, 0.21, 0.05, 0.37});
    EXPECT_EQ(std::accumulate(t.numel.begin(), t.numel.end(), int64_t{0}), n);
    for (int i = 1; i < 4; ++i) EXPECT_EQ(t.begin[i], t.begin[i - 1] + t.numel[i - 1]);
  }
  // Shares that do not sum to 1 are taken relative to their sum.
  EXPECT_EQ(SplitState(100, 2, {3, 1}).numel, (std::vector<int64_t>{75, 25}));
}

TEST(StateShares, AnUnevenCollectiveIsPacedByItsLargestPiece) {
  EXPECT_DOUBLE_EQ(UnevenCollectiveFactor({}), 1);
  EXPECT_DOUBLE_EQ(UnevenCollectiveFactor({0.25, 0.25, 0.25, 0.25}), 1);
  EXPECT_DOUBLE_EQ(UnevenCollectiveFactor({0.6, 0.1, 0.3}), 1.8);
}

Plan CephaloPlan() {
  Plan p;
  p.seq_len = 64;
  p.precision = Precision::kFp32;
  p.zero_stage = 3;
  GroupPlan g;
  g.ministages = {{0, 1}, {1, 2}};
  g.devices = {{0, 2, 2, 0}, {1, 1, 2, 0}, {2, 1, 2, 0}};
  g.state_shares = {0.5, 0.3, 0.2};
  p.groups = {g};
  return p;
}

TEST(StateShares, TheirPlanFormatRoundTripsAndTeamsCountOnce) {
  Plan p = CephaloPlan();
  const std::string toml = PlanToToml(p);
  EXPECT_NE(toml.find("state_shares = [0.5, 0.3, 0.2]"), std::string::npos) << toml;
  EXPECT_EQ(ParsePlanToml(toml, "p.toml").value(), p);
  EXPECT_EQ(ParsePlanJson(PlanToJson(p).dump(), "p.json").value(), p);
  EXPECT_EQ(ReplicaStateShares(p.groups[0]), (std::vector<double>{0.5, 0.3, 0.2}));
  GroupPlan teams;
  teams.tp_degree = 2;
  teams.state_shares = {0.25, 0.25, 0.75, 0.75};
  EXPECT_EQ(ReplicaStateShares(teams), (std::vector<double>{0.25, 0.75}));
  // A plan without them writes none (and reads back even).
  p.groups[0].state_shares.clear();
  EXPECT_EQ(PlanToToml(p).find("state_shares"), std::string::npos);
  // Their reader names the file, the key and what it expects.
  Result<Plan> bad = ParsePlanToml(
      "seq_len = 64\n[[groups]]\nministages = [[0, 2]]\ndevices = [0, 1]\nmicrobatch_size = [1, 1]\n"
      "num_microbatches = [1, 1]\nstate_shares = [0.5, \"half\"]\n",
      "bad.toml");
  ASSERT_FALSE(bad.ok());
  EXPECT_NE(bad.status().message().find("bad.toml:7"), std::string::npos) << bad.status().message();
  EXPECT_NE(bad.status().message().find("state_shares"), std::string::npos) << bad.status().message();
  EXPECT_NE(bad.status().message().find("expected an array of numbers between 0 and 1"), std::string::npos)
      << bad.status().message();
}

TEST(StateShares, ValidationNamesTheGroupTheSumAndTheFix) {
  Cluster c = LoadCluster("local-emulated").value();
  ModelSpec m = *FindModelPreset("llama-tiny");
  EXPECT_TRUE(ValidatePlan(CephaloPlan(), c, m).ok()) << ValidatePlan(CephaloPlan(), c, m).message();
  auto message = [&](auto&& change) {
    Plan p = CephaloPlan();
    change(p);
    Status s = ValidatePlan(p, c, m);
    return s.ok() ? std::string("ok") : s.message();
  };
  EXPECT_NE(message([](Plan& p) {
              p.groups[0].state_shares = {0.5, 0.3, 0.3};
            }).find("groups[0]: state_shares of the group's 3 devices sum to 1.1; they must sum to 1"),
            std::string::npos);
  EXPECT_NE(message([](Plan& p) {
              p.groups[0].state_shares = {0.5, 0.5};
            }).find("groups[0]: state_shares has 2 entries but devices has 3"),
            std::string::npos);
  EXPECT_NE(message([](Plan& p) { p.zero_stage = 0; }).find("zero_stage = 0 keeps all of it on every device"),
            std::string::npos);
  EXPECT_NE(message([](Plan& p) {
              p.groups[0].state_shares = {0.5, 0.5, 0};
            }).find("every state share must be > 0"),
            std::string::npos);
  const std::string team = message([](Plan& p) {
    p.groups[0].tp_degree = 2;
    p.groups[0].devices = {{0, 2, 2, 0}, {1, 2, 2, 0}};
    p.groups[0].state_shares = {0.5, 0.4};
  });
  EXPECT_NE(team.find("groups[0].state_shares[1]: a tensor-parallel team of 2 devices holds one share"),
            std::string::npos)
      << team;
}

TEST(StateShares, TheLoweringSizesEachRanksStateAndTheCollectivesByThem) {
  Cluster c = LoadCluster("local-emulated").value();
  ModelSpec m = *FindModelPreset("llama-tiny");
  const Plan uneven = CephaloPlan();
  Plan even = uneven;
  even.groups[0].state_shares.clear();
  const Schedule su = LowerPlan(uneven, c, m).value(), se = LowerPlan(even, c, m).value();
  ASSERT_EQ(su.programs.size(), 3u);
  // ZeRO-3 holds only shards between steps: each rank's static state is its share of the whole.
  double total = 0;
  for (const Program& p : se.programs) total += p.static_device_bytes;
  const double shares[] = {0.5, 0.3, 0.2};
  for (int r = 0; r < 3; ++r)
    EXPECT_NEAR(su.programs[r].static_device_bytes, shares[r] * total, 1e-6 * total);
  // The optimizer step of a ministage updates the rank's share of its parameters.
  for (int r = 0; r < 3; ++r) {
    double updated = 0, updated_even = 0;
    for (const Op& op : su.programs[r].ops)
      if (op.kind == OpKind::kOptimizerStep) updated += op.params;
    for (const Op& op : se.programs[r].ops)
      if (op.kind == OpKind::kOptimizerStep) updated_even += op.params;
    EXPECT_NEAR(updated, 3 * shares[r] * updated_even, 1e-6 * updated_even);
  }
  // Gathers and reduce-scatters carry the largest piece's factor; the schedule carries the shares.
  int uneven_collectives = 0;
  for (const Collective& col : su.collectives) {
    if (col.kind == OpKind::kAllGather || col.kind == OpKind::kReduceScatter) {
      EXPECT_DOUBLE_EQ(col.uneven_factor, 1.5);
      ++uneven_collectives;
    }
  }
  EXPECT_GT(uneven_collectives, 0);
  for (const ScheduleMinistage& ms : su.ministages)
    EXPECT_EQ(ms.state_shares, (std::vector<double>{0.5, 0.3, 0.2}));
  for (const ScheduleMinistage& ms : se.ministages) EXPECT_TRUE(ms.state_shares.empty());
  EXPECT_NE(ScheduleHash(su), ScheduleHash(se));
}

TEST(ScheduleHash, EveryFieldOfTheScheduleMovesIt) {
  Schedule s;
  s.seq_len = 64;
  Program p;
  Op op;
  op.kind = OpKind::kSend;
  op.reads.push_back({BufferKind::kInput, 0, 1});
  p.ops.push_back(op);
  s.programs.push_back(p);
  s.collectives.push_back({});
  const std::string base = ScheduleHash(s);
  EXPECT_EQ(ScheduleHash(Schedule(s)), base);  // a copy: the same
  const std::vector<std::function<void(Schedule&)>> changes = {
      [](Schedule& x) { x.seq_len = 65; },
      [](Schedule& x) { x.loss_scaling = true; },
      [](Schedule& x) { x.flextp_mode = "migrate"; },
      [](Schedule& x) { x.programs[0].device = 3; },
      [](Schedule& x) { x.programs[0].ops[0].tag = 7; },
      [](Schedule& x) { x.programs[0].ops[0].bytes = 1; },
      [](Schedule& x) { x.programs[0].ops[0].deps.push_back(0); },
      [](Schedule& x) { x.programs[0].ops[0].reads[0].microbatch = 2; },
      [](Schedule& x) {
        x.programs[0].ops[0].frees.push_back({BufferKind::kInput, 0, 1});
      },
      [](Schedule& x) { x.programs[0].ops[0].host_free_bytes = 1; },
      [](Schedule& x) { x.collectives[0].uneven_factor = 2; },
      [](Schedule& x) { x.collectives[0].ranks.push_back(0); },
      // The same values in another place: a read moved to the writes.
      [](Schedule& x) { std::swap(x.programs[0].ops[0].reads, x.programs[0].ops[0].writes); },
  };
  for (size_t i = 0; i < changes.size(); ++i) {
    Schedule changed = s;
    changes[i](changed);
    EXPECT_NE(ScheduleHash(changed), base) << "change " << i;
  }
}

}  // namespace
}  // namespace motley
