#include "plan/strategy.h"

#include <gtest/gtest.h>

#include "core/job.h"

namespace motley {
namespace {

TEST(Strategy, EveryNameJobsAcceptHasAnEntryAndNoOther) {
  const auto& names = StrategyNames();
  ASSERT_EQ(Strategies().size(), names.size());
  for (size_t i = 0; i < names.size(); ++i) {
    EXPECT_EQ(Strategies()[i].name, names[i]);
    EXPECT_FALSE(Strategies()[i].summary.empty()) << names[i];
  }
}

}  // namespace
}  // namespace motley
