#include "runtime/flextp/straggler_detector.h"

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

}  // namespace
}  // namespace motley
