#include "core/units.h"

#include <gtest/gtest.h>

namespace motley {
namespace {

TEST(Units, ParsesTheIssueExamples) {
  EXPECT_DOUBLE_EQ(*ParseBytes("80GiB"), 80.0 * 1024 * 1024 * 1024);
  EXPECT_DOUBLE_EQ(*ParseBandwidth("50Gbps"), 50e9 / 8);
  EXPECT_DOUBLE_EQ(*ParseBandwidth("900GB/s"), 900e9);
  EXPECT_DOUBLE_EQ(*ParseFlops("312TFLOPS"), 312e12);
  EXPECT_DOUBLE_EQ(*ParseDuration("5us"), 5e-6);
}

TEST(Units, AcceptsSpacesDecimalsAndOtherUnits) {
  EXPECT_DOUBLE_EQ(*ParseBytes("16 GB"), 16e9);
  EXPECT_DOUBLE_EQ(*ParseBytes("1.5TiB"), 1.5 * 1024.0 * 1024 * 1024 * 1024);
  EXPECT_DOUBLE_EQ(*ParseBytes("512MiB"), 512.0 * 1024 * 1024);
  EXPECT_DOUBLE_EQ(*ParseBandwidth("25 GiB/s"), 25.0 * 1024 * 1024 * 1024);
  EXPECT_DOUBLE_EQ(*ParseBandwidth("100Mbps"), 100e6 / 8);
  EXPECT_DOUBLE_EQ(*ParseFlops("19.5 TFLOP/s"), 19.5e12);
  EXPECT_DOUBLE_EQ(*ParseDuration("1.5ms"), 1.5e-3);
  EXPECT_DOUBLE_EQ(*ParseDuration("2s"), 2.0);
  EXPECT_DOUBLE_EQ(*ParseDuration("100ns"), 100e-9);
}

TEST(Units, RejectsWithAMessageNamingTheTextAndAnExample) {
  Result<double> no_unit = ParseBytes("80");
  ASSERT_FALSE(no_unit.ok());
  EXPECT_NE(no_unit.status().message().find("has no unit"), std::string::npos);
  EXPECT_NE(no_unit.status().message().find("80GiB"), std::string::npos);

  Result<double> bad_unit = ParseBandwidth("50Gbs");
  ASSERT_FALSE(bad_unit.ok());
  EXPECT_NE(bad_unit.status().message().find("unknown unit \"Gbs\""), std::string::npos);

  EXPECT_FALSE(ParseBytes("GiB").ok());
  EXPECT_FALSE(ParseBytes("").ok());
  EXPECT_FALSE(ParseBytes("1e400GiB").ok());  // not finite
  EXPECT_FALSE(ParseFlops("312 TB/s").ok());  // a bandwidth unit is not a FLOP rate
  EXPECT_FALSE(ParseDuration("5 parsecs").ok());
}

TEST(Units, NegativeNumbersParseSoCallersCanRejectThemByName) {
  // The TOML reader turns <= 0 into "must be greater than zero" with the key's position.
  EXPECT_DOUBLE_EQ(*ParseBytes("-1GiB"), -1.0 * 1024 * 1024 * 1024);
}

TEST(Units, FormatsForReports) {
  EXPECT_EQ(FormatBytes(80.0 * 1024 * 1024 * 1024), "80.0 GiB");
  EXPECT_EQ(FormatBandwidth(50e9 / 8), "50.0 Gbps");
  EXPECT_EQ(FormatBandwidth(900e9), "900 GB/s");
  EXPECT_EQ(FormatFlops(312e12), "312 TFLOPS");
  EXPECT_EQ(FormatDuration(5e-6), "5.00 us");
  EXPECT_EQ(FormatCount(6.74e9), "6.74 B");
}

}  // namespace
}  // namespace motley
