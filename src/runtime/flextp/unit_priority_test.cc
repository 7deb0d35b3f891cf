#include "runtime/flextp/unit_priority.h"

#include <gtest/gtest.h>

namespace motley {
namespace {

// Four units of two weights each (a [4, 2] "UnitRows"), moved by hand between refreshes.
torch::Tensor Rows(std::vector<double> values) { return torch::tensor(values, torch::kFloat64).view({4, 2}); }

TEST(UnitPriority, PrunesTheUnitsThatMovedLeastFirst) {
  UnitPriority p;
  p.Refresh(Rows({0, 0, 0, 0, 0, 0, 0, 0}), 0);
  // Mean |change| per unit: 0.5, 0.05, 2.0, 0.2.
  p.Refresh(Rows({0.5, -0.5, 0.1, 0.0, 2.0, 2.0, 0.2, -0.2}), 4);
  EXPECT_EQ(p.refreshed_step(), 4);
  EXPECT_NEAR(p.variation()[1].item<double>(), 0.05, 1e-15);
  EXPECT_NEAR(p.mean_variation(), (0.5 + 0.05 + 2.0 + 0.2) / 4, 1e-15);
  // Two pruned: units 1 and 3; the lineage lists the kept ones, in order.
  EXPECT_EQ(p.Keep(4, 2, 5), (std::vector<int64_t>{0, 2}));
  EXPECT_TRUE(p.pruned_since_refresh(1));
  EXPECT_TRUE(p.pruned_since_refresh(3));
  EXPECT_FALSE(p.pruned_since_refresh(0));
  // Unit 3 computed elsewhere this step (own = 3): of units 0-2, the one that moved least.
  EXPECT_EQ(p.Keep(3, 1, 6), (std::vector<int64_t>{0, 2}));
  EXPECT_EQ(p.Keep(4, 0, 6), (std::vector<int64_t>{0, 1, 2, 3}));
}

// The paper's endless loop, avoided: units pruned since the last refresh had zeros imputed for
// their gradients and did not move; measured afresh they would look idle and be pruned forever.
// They keep their variation (and their snapshot, so the next change counts from before they were
// pruned); the units that really did not move are pruned next.
TEST(UnitPriority, AUnitPrunedSinceTheLastRefreshKeepsItsVariation) {
  UnitPriority p;
  p.Refresh(Rows({0, 0, 0, 0, 0, 0, 0, 0}), 0);
  p.Refresh(Rows({1, 1, 0.1, 0.1, 3, 3, 0.3, 0.3}), 1);         // variations 1, 0.1, 3, 0.3
  EXPECT_EQ(p.Keep(4, 1, 2), (std::vector<int64_t>{0, 2, 3}));  // unit 1 pruned
  // Unit 1 (pruned) did not move; unit 3 did not move either; units 0 and 2 moved by 1.
  p.Refresh(Rows({2, 2, 0.1, 0.1, 4, 4, 0.3, 0.3}), 2);
  EXPECT_NEAR(p.variation()[1].item<double>(), 0.1, 1e-15) << "kept from before it was pruned";
  EXPECT_NEAR(p.variation()[3].item<double>(), 0.0, 1e-15);
  EXPECT_NEAR(p.variation()[0].item<double>(), 1.0, 1e-15);
  EXPECT_FALSE(p.pruned_since_refresh(1)) << "a refresh starts the record again";
  EXPECT_EQ(p.Keep(4, 1, 3), (std::vector<int64_t>{0, 1, 2})) << "unit 3 now, not unit 1 again";
  // Unit 1's snapshot is still the one before its pruning: its change counts from there.
  p.Refresh(Rows({2, 2, 0.6, 0.6, 4, 4, 0.3, 0.3}), 3);
  EXPECT_NEAR(p.variation()[1].item<double>(), 0.5, 1e-15);
  EXPECT_NEAR(p.variation()[3].item<double>(), 0.0, 1e-15) << "pruned: kept";
}

// Equal variations (before any change is measured): the pruned units take turns as the steps go.
TEST(UnitPriority, TiesTakeTurns) {
  UnitPriority p;
  p.Refresh(Rows({0, 0, 0, 0, 0, 0, 0, 0}), 0);
  std::vector<int> times_pruned(4, 0);
  for (int64_t step = 0; step < 8; ++step) {
    const std::vector<int64_t> keep = p.Keep(4, 1, step);
    ASSERT_EQ(keep.size(), 3u);
    for (int64_t u = 0; u < 4; ++u)
      if (std::find(keep.begin(), keep.end(), u) == keep.end()) ++times_pruned[u];
  }
  EXPECT_EQ(times_pruned, (std::vector<int>{2, 2, 2, 2}));
}

}  // namespace
}  // namespace motley
