#include "core/json_read.h"

#include <cstdint>
#include <string>

#include <gtest/gtest.h>

namespace motley {
namespace {

TEST(ParseJson, ReadsWhatAConfigurationHolds) {
  Result<nlohmann::json> j = ParseJson(R"({"a": {"b": [1, 2, {"c": true}]}, "d": "x"})", "f.json");
  ASSERT_TRUE(j.ok()) << j.status().message();
  EXPECT_EQ((*j)["a"]["b"][2]["c"], true);
  // The same key in different objects is fine.
  EXPECT_TRUE(ParseJson(R"({"x": {"n": 1}, "y": {"n": 2}})", "f.json").ok());
}

TEST(ParseJson, RefusesARepeatedKeyNamingItAndWhereItIs) {
  Result<nlohmann::json> top = ParseJson(R"({"hidden_size": 64, "hidden_size": 128})", "config.json");
  ASSERT_FALSE(top.ok());
  EXPECT_EQ(top.status().message(),
            "config.json: error: key \"hidden_size\" appears twice in one object (the second would silently "
            "replace "
            "the first); keep one");
  Result<nlohmann::json> inner = ParseJson(R"({"groups": {"first": {"n": 1, "n": 2}}, "z": 0})", "plan.json");
  ASSERT_FALSE(inner.ok());
  EXPECT_NE(
      inner.status().message().find("key \"n\" appears twice in one object (under \"groups\" > \"first\")"),
      std::string::npos)
      << inner.status().message();
}

TEST(ParseJson, RefusesDeepNestingBeforeBuildingIt) {
  const std::string deep = std::string(50000, '[') + std::string(50000, ']');
  Result<nlohmann::json> j = ParseJson(deep, "plan.json");
  ASSERT_FALSE(j.ok());
  EXPECT_NE(j.status().message().find("plan.json: error: nested more than 64 levels deep"), std::string::npos)
      << j.status().message();
  EXPECT_TRUE(ParseJson(std::string(60, '[') + std::string(60, ']'), "ok.json").ok());
}

TEST(ParseJson, SyntaxErrorsAtLineAndColumn) {
  Result<nlohmann::json> j = ParseJson("{\n  \"a\": 1,\n  \"b\": }\n", "f.json");
  ASSERT_FALSE(j.ok());
  EXPECT_NE(j.status().message().find("f.json:3:"), std::string::npos) << j.status().message();
  // What nlohmann says, without its tag: "[json.exception.parse_error.101] parse error at line ...".
  EXPECT_EQ(j.status().message().find("json.exception"), std::string::npos) << j.status().message();
  EXPECT_EQ(j.status().message().find("parse error at"), std::string::npos) << j.status().message();
}

TEST(JsonInt64, AnIntegerBeyondInt64IsNotOne) {
  EXPECT_EQ(JsonInt64(nlohmann::json::parse("9223372036854775807")), INT64_MAX);
  EXPECT_EQ(JsonInt64(nlohmann::json::parse("-9223372036854775808")), INT64_MIN);
  // nlohmann would read these as -9223372036854775808 and -1.
  EXPECT_EQ(JsonInt64(nlohmann::json::parse("9223372036854775808")), std::nullopt);
  EXPECT_EQ(JsonInt64(nlohmann::json::parse("18446744073709551615")), std::nullopt);
  EXPECT_EQ(JsonInt64(nlohmann::json::parse("1.0")), std::nullopt);
  EXPECT_EQ(JsonInt64(nlohmann::json::parse("\"1\"")), std::nullopt);
}

TEST(JsonErrorText, DropsTheLibrarysTag) {
  try {
    (void)nlohmann::json::parse("[1]").at(0).get<std::string>();
    FAIL();
  } catch (const nlohmann::json::exception& e) {
    EXPECT_EQ(JsonErrorText(e), "type must be string, but is number");
  }
  try {
    (void)nlohmann::json::parse("{}").at("device_type");
    FAIL();
  } catch (const nlohmann::json::exception& e) {
    EXPECT_EQ(JsonErrorText(e), "\"device_type\" is missing");
  }
  try {
    (void)nlohmann::json::parse("\"ab\"").at(0);
    FAIL();
  } catch (const nlohmann::json::exception& e) {
    EXPECT_EQ(JsonErrorText(e), "an object or a list was expected, not a string");
  }
}

}  // namespace
}  // namespace motley
