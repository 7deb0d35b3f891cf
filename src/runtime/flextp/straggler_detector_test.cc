#include "runtime/flextp/straggler_detector.h"

#include <gtest/gtest.h>

namespace motley {
namespace {

TEST(StragglerDetector, NoStragglerMeansNothingToPrune) {
  for (int me = 0; me < 4; ++me) {
    StragglerDetector each;
    const StragglerVerdict v = each.Observe({1.00, 1.02, 0.99, 1.01}, me, 0.8);
    EXPECT_FALSE(v.straggler) << me;
    EXPECT_EQ(v.prune_ratio, 0) << me;
  }
}

TEST(StragglerDetector, ASlowRankPrunesWhatClosesItsGap) {
  // Rank 3 takes 2 s, the others 1 s: the reference is 1.25 s, the gap 0.75 s; with 1.5 s of its
  // time in matrix multiplications it prunes half of them (Eq. 1: 0.75 / 1.5).
  StragglerDetector slow;
  StragglerVerdict v = slow.Observe({1, 1, 1, 2}, 3, 1.5);
  EXPECT_TRUE(v.straggler);
  EXPECT_DOUBLE_EQ(v.reference_s, 1.25);
  EXPECT_DOUBLE_EQ(v.gap_s, 0.75);
  EXPECT_DOUBLE_EQ(v.prune_ratio, 0.5);
  StragglerDetector fast;
  EXPECT_FALSE(fast.Observe({1, 1, 1, 2}, 0, 0.8).straggler);
  // The ratio is capped.
  StragglerDetector capped(StragglerConfig{0.05, 0.10, 0.3});
  EXPECT_DOUBLE_EQ(capped.Observe({1, 1, 1, 2}, 3, 1.5).prune_ratio, 0.3);
}

TEST(StragglerDetector, ARankRechecksOnlyWhenItsOwnTimeMovesByMoreThanTenPercent) {
  StragglerDetector d;
  ASSERT_TRUE(d.Observe({1, 1, 1, 2}, 3, 1.5).straggler);
  // 5% faster: the verdict stands (no re-check), even though the others sped up too.
  StragglerVerdict v = d.Observe({0.5, 0.5, 0.5, 1.9}, 3, 1.5);
  EXPECT_FALSE(v.rechecked);
  EXPECT_TRUE(v.straggler);
  EXPECT_DOUBLE_EQ(v.prune_ratio, 0.5);
  // Back to the others' speed (a 47% change): it re-checks and stops pruning.
  v = d.Observe({1, 1, 1, 1.0}, 3, 0.8);
  EXPECT_TRUE(v.rechecked);
  EXPECT_FALSE(v.straggler);
  EXPECT_EQ(v.prune_ratio, 0);
}

TEST(StragglerDetector, SeveralStragglersAreServedHeaviestSkewFirst) {
  const auto s = StragglersBySkew({1, 4, 1, 2, 1, 1, 1, 1}, 0.05);  // average 1.5
  ASSERT_EQ(s.size(), 2u);
  EXPECT_EQ(s[0].first, 1);
  EXPECT_DOUBLE_EQ(s[0].second, 4 / 1.5);
  EXPECT_EQ(s[1].first, 3);
  EXPECT_TRUE(StragglersBySkew({1, 1, 1, 1}, 0.05).empty());
}

}  // namespace
}  // namespace motley
