#include "core/suggest.h"

#include <gtest/gtest.h>

namespace motley {
namespace {

TEST(Suggest, EditDistanceCountsTyposIncludingSwaps) {
  EXPECT_EQ(EditDistance("bandwidth", "bandwidth"), 0u);
  EXPECT_EQ(EditDistance("bandwith", "bandwidth"), 1u);
  EXPECT_EQ(EditDistance("cuont", "count"), 1u);  // adjacent swap
  EXPECT_EQ(EditDistance("", "abc"), 3u);
}

TEST(Suggest, NearestNameOnlyWhenPlausible) {
  std::vector<std::string> keys = {"name", "device", "count", "interconnect", "nic_bandwidth"};
  EXPECT_EQ(NearestName("devcie", keys), "device");
  EXPECT_EQ(NearestName("nic_bw", keys), std::nullopt);
  EXPECT_EQ(NearestName("nic_bandwith", keys), "nic_bandwidth");
  EXPECT_EQ(NearestName("zzzzzzzz", keys), std::nullopt);
  EXPECT_EQ(DidYouMean("cont", keys), "; did you mean 'count'?");
  EXPECT_EQ(DidYouMeanOrPeriod("qqqqqq", keys), ".");
}

}  // namespace
}  // namespace motley
