#include "plan/island_loss_model.h"

#include <gtest/gtest.h>

namespace motley {
namespace {

// The estimate is the measurement where there is one, between them in log H and the islands' count,
// held at the nearest outside them, and no cost for one island.
TEST(IslandLossModel, InterpolatesTheMeasuredRunsAndHoldsAtTheNearestOutside) {
  EXPECT_EQ(EstimateIslandLoss(1, 50).token_efficiency, 1);
  EXPECT_EQ(EstimateIslandLoss(1, 50).loss_penalty, 0);
  EXPECT_NEAR(EstimateIslandLoss(2, 50).token_efficiency, 0.552, 1e-12);
  EXPECT_NEAR(EstimateIslandLoss(2, 50).loss_penalty, 0.101, 1e-12);
  EXPECT_NEAR(EstimateIslandLoss(4, 10).token_efficiency, 0.263, 1e-12);
  // log H: H = sqrt(10 * 50) is halfway.
  const double mid = EstimateIslandLoss(2, 22).token_efficiency;
  EXPECT_GT(mid, 0.286);
  EXPECT_LT(mid, 0.552);
  EXPECT_NEAR(EstimateIslandLoss(3, 50).token_efficiency, (0.552 + 0.460) / 2, 1e-12);
  // Outside the measured: held, and said so.
  EXPECT_EQ(EstimateIslandLoss(2, 500).token_efficiency, EstimateIslandLoss(2, 50).token_efficiency);
  EXPECT_EQ(EstimateIslandLoss(16, 50).token_efficiency, EstimateIslandLoss(4, 50).token_efficiency);
  EXPECT_NE(EstimateIslandLoss(2, 500).basis.find("held at the nearest measured"), std::string::npos);
  EXPECT_EQ(EstimateIslandLoss(2, 50).basis.find("held at"), std::string::npos);
  EXPECT_NE(EstimateIslandLoss(2, 50).basis.find("an estimate"), std::string::npos);
}

}  // namespace
}  // namespace motley
