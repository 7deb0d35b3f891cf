#include "runtime/train/straggler_monitor.h"

#include <gtest/gtest.h>

namespace motley {
namespace {

TEST(StragglerMonitor, NamesARankSlowerThanItsOwnNormAndItsRecovery) {
  StragglerDetectionConfig c;  // 30%, a norm of 3 steps, 3 steps to say it
  StragglerMonitor m(c, 3);
  // Ranks of different speeds (a slow device is not a straggler), a warm-up step.
  const std::vector<double> normal = {1.0, 2.5, 0.4};
  EXPECT_TRUE(m.Observe({5.0, 9.0, 3.0}).empty());  // warm-up: ignored
  for (int i = 0; i < 3; ++i) EXPECT_TRUE(m.Observe(normal).empty());
  EXPECT_TRUE(m.has_norm());
  // Rank 1 three times slower: said on the third step, not before; a one-step blip of rank 2 never.
  EXPECT_TRUE(m.Observe({1.0, 7.5, 0.8}).empty());
  EXPECT_TRUE(m.Observe({1.0, 7.5, 0.4}).empty());
  EXPECT_FALSE(m.straggling(1));
  const auto began = m.Observe({1.05, 7.5, 0.4});
  ASSERT_EQ(began.size(), 1u);
  EXPECT_EQ(began[0].rank, 1);
  EXPECT_TRUE(began[0].straggling);
  EXPECT_NEAR(began[0].slowdown, 3.0, 1e-12);
  EXPECT_TRUE(m.straggling(1));
  EXPECT_FALSE(m.straggling(2));
  EXPECT_NEAR(m.slowdown(0), 1.05, 1e-12);
  // Back to normal: recovered after three steps within the threshold.
  EXPECT_TRUE(m.Observe(normal).empty());
  EXPECT_TRUE(m.Observe({1.0, 7.0, 0.4}).empty());  // slow again: the count starts over
  EXPECT_TRUE(m.Observe(normal).empty());
  EXPECT_TRUE(m.Observe(normal).empty());
  const auto recovered = m.Observe(normal);
  ASSERT_EQ(recovered.size(), 1u);
  EXPECT_EQ(recovered[0].rank, 1);
  EXPECT_FALSE(recovered[0].straggling);
  EXPECT_FALSE(m.straggling(1));
}

TEST(StragglerMonitor, WithinTheThresholdIsNotStraggling) {
  StragglerDetectionConfig c;
  c.threshold = 0.5;
  c.persist_steps = 1;
  StragglerMonitor m(c, 2);
  m.Observe({1, 1});
  for (int i = 0; i < 3; ++i) m.Observe({1, 1});
  EXPECT_TRUE(
      m.Observe({1.45, 0.0}).empty());  // 45% slower: within 50%; a rank that stopped computing: not slow
  const auto c2 = m.Observe({1.6, 1});
  ASSERT_EQ(c2.size(), 1u);
  EXPECT_EQ(c2[0].rank, 0);
}

// After a rebalance the norms are measured again; the rank the new plan was made slow for stays
// straggling until it runs faster than its new norm by the threshold, said with its speed-up.
TEST(StragglerMonitor, AfterARestartASlowRankRecoversWhenItSpeedsUp) {
  StragglerDetectionConfig c;
  StragglerMonitor m(c, 2);
  m.Restart({false, true});
  EXPECT_TRUE(m.straggling(1));
  EXPECT_TRUE(m.Observe({9.0, 9.0}).empty());  // warm-up
  for (int i = 0; i < 3; ++i) EXPECT_TRUE(m.Observe({1.0, 2.0}).empty());
  EXPECT_TRUE(m.Observe({1.0, 1.7}).empty());  // 15% faster: within the threshold
  EXPECT_TRUE(m.Observe({1.0, 0.7}).empty());
  EXPECT_TRUE(m.Observe({1.0, 0.65}).empty());
  const auto recovered = m.Observe({1.0, 0.7});
  ASSERT_EQ(recovered.size(), 1u);
  EXPECT_EQ(recovered[0].rank, 1);
  EXPECT_FALSE(recovered[0].straggling);
  EXPECT_NEAR(recovered[0].slowdown, 0.35, 1e-12);  // the median of the three steps that said it
  EXPECT_FALSE(m.straggling(1));
  EXPECT_FALSE(m.straggling(0));
}

}  // namespace
}  // namespace motley
