#include "cost/straggler_detector.h"

#include <gtest/gtest.h>

namespace motley {
namespace {

TEST(StragglerDetector, SeveralStragglersAreServedHeaviestSkewFirst) {
  const auto s = StragglersBySkew({1, 4, 1, 2, 1, 1, 1, 1}, 0.05);  // average 1.5
  ASSERT_EQ(s.size(), 2u);
  EXPECT_EQ(s[0].first, 1);
  EXPECT_DOUBLE_EQ(s[0].second, 4 / 1.5);
  EXPECT_EQ(s[1].first, 3);
  EXPECT_TRUE(StragglersBySkew({1, 1, 1, 1}, 0.05).empty());
}

TEST(StragglerDetector, SemiJudgesByTheFastestRankResizingByTheAverage) {
  // Average 1.3: only rank 3 is 5% beyond it; the fastest is 1.0: ranks 1 (1.1) and 3 (2.0) are.
  const std::vector<double> t = {1.0, 1.1, 1.04, 2.0};
  const auto avg = StragglersBySkew(t, 0.05, StragglerReference::kAverage);
  ASSERT_EQ(avg.size(), 1u);
  EXPECT_EQ(avg[0].first, 3);
  EXPECT_NEAR(avg[0].second, 2.0 / 1.285, 1e-12);
  const auto fastest = StragglersBySkew(t, 0.05, StragglerReference::kFastest);
  ASSERT_EQ(fastest.size(), 2u);
  EXPECT_EQ(fastest[0].first, 3);
  EXPECT_DOUBLE_EQ(fastest[0].second, 2.0);
  EXPECT_EQ(fastest[1].first, 1);
  EXPECT_DOUBLE_EQ(ReferenceTime(t, StragglerReference::kFastest), 1.0);
}

}  // namespace
}  // namespace motley
