#include "core/trace_file.h"

#include <string>

#include <gtest/gtest.h>

namespace motley {
namespace {

TEST(TraceFile, ReadsTheCompleteSpans) {
  Result<std::vector<TraceSpan>> spans = ParseTraceJson(
      R"({"traceEvents":[{"name":"process_name","ph":"M","pid":0,"args":{"name":"rank 0"}},
          {"name":"forward mb0","cat":"forward","ph":"X","pid":1,"tid":0,"ts":10.5,"dur":2,"args":{"op":3}},
          {"name":"mark","ph":"i","pid":"not read","ts":"not read"},
          {"ph":"X","pid":0,"ts":4}],"displayTimeUnit":"ms"})",
      "trace.json");
  ASSERT_TRUE(spans.ok()) << spans.status().message();
  ASSERT_EQ(spans->size(), 2u);
  EXPECT_EQ((*spans)[0].rank, 1);
  EXPECT_EQ((*spans)[0].start_us, 10.5);
  EXPECT_EQ((*spans)[0].duration_us, 2);
  EXPECT_EQ((*spans)[0].category, "forward");
  EXPECT_EQ((*spans)[0].name, "forward mb0");
  EXPECT_EQ((*spans)[1].duration_us, 0);
  // A bare list of events is a trace too.
  EXPECT_EQ(ParseTraceJson(R"([{"ph":"X","pid":2,"ts":0,"dur":1}])", "t.json")->size(), 1u);
}

TEST(TraceFile, AFieldOfTheWrongTypeNamesTheEvent) {
  const std::vector<std::pair<std::string, std::string>> cases = {
      {R"({"traceEvents":[{"ph":"X","pid":"zero","ts":1}]})", "event 0: \"pid\""},
      {R"({"traceEvents":[{"ph":"X","pid":18446744073709551615,"ts":1}]})", "event 0: \"pid\""},
      {R"({"traceEvents":[{"ph":"X","pid":0,"ts":1},{"ph":"X","pid":0}]})", "event 1: \"ts\""},
      {R"({"traceEvents":[{"ph":"X","pid":0,"ts":1,"dur":-5}]})", "event 0: \"dur\""},
      {R"({"traceEvents":[{"ph":"X","pid":0,"ts":1,"cat":3}]})", "event 0: \"cat\""},
      {R"({"traceEvents":[3]})", "event 0 is not an object"},
      {R"({"traceEvents":{}})", "\"traceEvents\" must be a list"},
      {R"({"events":[]})", "no \"traceEvents\" list"},
      {"{", "t.json:1:"},
  };
  for (const auto& [text, message] : cases) {
    Result<std::vector<TraceSpan>> r = ParseTraceJson(text, "t.json");
    ASSERT_FALSE(r.ok()) << text;
    EXPECT_NE(r.status().message().find(message), std::string::npos) << r.status().message();
  }
}

}  // namespace
}  // namespace motley
