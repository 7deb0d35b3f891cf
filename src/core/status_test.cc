#include "core/status.h"

#include <gtest/gtest.h>

namespace motley {
namespace {

Result<int> Half(int x) {
  if (x % 2 != 0) return Status::InvalidArgument("odd: " + std::to_string(x));
  return x / 2;
}

Result<int> Quarter(int x) {
  MOTLEY_ASSIGN_OR_RETURN(int h, Half(x));
  MOTLEY_ASSIGN_OR_RETURN(int q, Half(h));
  return q;
}

Status CheckEven(int x) {
  MOTLEY_RETURN_IF_ERROR(Half(x).status());
  return Status::Ok();
}

TEST(Status, ResultCarriesValueOrError) {
  EXPECT_EQ(*Quarter(8), 2);
  Result<int> r = Quarter(6);  // 6 -> 3 -> odd
  ASSERT_FALSE(r.ok());
  EXPECT_EQ(r.status().code(), StatusCode::kInvalidArgument);
  EXPECT_EQ(r.status().message(), "odd: 3");
  EXPECT_TRUE(CheckEven(4).ok());
  EXPECT_FALSE(CheckEven(5).ok());
}

TEST(Status, PrefixAddsContextOnlyToErrors) {
  EXPECT_EQ(Status::NotFound("x").WithPrefix("a.toml: ").message(), "a.toml: x");
  EXPECT_TRUE(Status::Ok().WithPrefix("a.toml: ").message().empty());
}

TEST(CheckDeathTest, PrintsBothValuesAndTheLocation) {
  int a = 3, b = 4;
  EXPECT_DEATH(MOTLEY_CHECK_EQ(a, b), "status_test.cc:[0-9]+: a == b \\(3 vs 4\\)");
  EXPECT_DEATH((void)Half(3).value(), "odd: 3");
}

}  // namespace
}  // namespace motley
