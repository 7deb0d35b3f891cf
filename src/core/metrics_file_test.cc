#include "core/metrics_file.h"

#include <cmath>
#include <cstdio>
#include <string>

#include <gtest/gtest.h>

namespace motley {
namespace {

TEST(MetricsFile, ReadsStepsAndEventsTyped) {
  const std::string text =
      "{\"event\":\"start\",\"first_step\":4,\"ranks\":2,\"schedule_hash\":\"abc\",\"plan\":\"p.toml\"}\n"
      "\n"
      "{\"step\":5,\"loss\":null,\"step_time_s\":1.5,\"tokens_per_s\":100,\"migrated_units\":3,"
      "\"stragglers\":[{\"rank\":1}],\"ranks\":[{\"rank\":0,\"compute_s\":0.5,\"comm_s\":0.25,"
      "\"peak_memory_bytes\":1024},{\"rank\":1,\"compute_s\":null}],\"lr\":0.001}\n"
      "{\"step\":6,\"val_loss\":2.5}\n"
      "{\"step\":7,\"lo";  // a run still writing this line
  Result<std::vector<MetricsLine>> lines = ParseMetricsJsonl(text, "m.jsonl");
  ASSERT_TRUE(lines.ok()) << lines.status().message();
  ASSERT_EQ(lines->size(), 3u);
  const MetricsLine& start = (*lines)[0];
  EXPECT_EQ(start.event, "start");
  EXPECT_EQ(start.step, 4);  // where its steps begin
  EXPECT_EQ(start.schedule_hash, "abc");
  EXPECT_TRUE(start.ranks.empty());  // a start's "ranks" is the rank count
  const MetricsLine& step = (*lines)[1];
  EXPECT_EQ(step.line, 3);
  EXPECT_EQ(step.step, 5);
  ASSERT_TRUE(step.loss.has_value());
  EXPECT_TRUE(std::isnan(*step.loss));  // the run wrote a non-finite loss as null
  EXPECT_EQ(step.step_time_s, 1.5);
  EXPECT_EQ(step.migrated_units, 3);
  EXPECT_EQ(step.stragglers.size(), 1u);
  ASSERT_EQ(step.ranks.size(), 2u);
  EXPECT_EQ(step.ranks[0].comm_s, 0.25);
  EXPECT_EQ(step.ranks[0].peak_memory_bytes, 1024);
  EXPECT_EQ(step.ranks[1].peak_memory_bytes, -1);
  EXPECT_EQ(step.fields["lr"], 0.001);  // what motley does not read is kept
  EXPECT_EQ((*lines)[2].val_loss, 2.5);
}

TEST(MetricsFile, AFieldOfTheWrongTypeNamesTheLineAndField) {
  const std::vector<std::pair<std::string, std::string>> cases = {
      {"{\"step\":\"one\"}", "m.jsonl:2: \"step\" must be an integer from -1 to"},
      {"{\"step\":18446744073709551615}",
       "\"step\" must be an integer from -1 to 9007199254740992, not 18446744073709551615"},
      {"{\"step\":1,\"loss\":\"low\"}", "m.jsonl:2: \"loss\" must be a number, not \"low\""},
      {"{\"event\":7}", "\"event\" must be a string"},
      {"{\"ranks\":{\"rank\":0}}", "\"ranks\" must be a list"},
      {"{\"ranks\":[{\"compute_s\":1}]}", "\"ranks[0].rank\" is missing"},
      {"{\"ranks\":[{\"rank\":-3}]}", "\"ranks[0].rank\" must be an integer from 0"},
      {"{\"ranks\":[7]}", "\"ranks[0]\" must be an object"},
      {"{\"migrated_units\":-1}", "\"migrated_units\" must be a finite number >= 0"},
      {"{\"stragglers\":3}", "\"stragglers\" must be a list"},
      {"[1,2]", "m.jsonl:2: not a JSON object"},
      {std::string(100, '[') + std::string(100, ']'), "m.jsonl:2: not a JSON object"},
  };
  for (const auto& [line, message] : cases) {
    Result<std::vector<MetricsLine>> r = ParseMetricsJsonl("{\"step\":0}\n" + line + "\n", "m.jsonl");
    ASSERT_FALSE(r.ok()) << line;
    EXPECT_NE(r.status().message().find(message), std::string::npos) << r.status().message();
    EXPECT_NE(r.status().message().find("motley train --metrics"), std::string::npos) << r.status().message();
  }
}

TEST(MetricsFile, ReadsFromAByteOnWithTheFilesLineNumbers) {
  const std::string dir = ::testing::TempDir();
  const std::string path = dir + "/metrics_from_byte.jsonl";
  const std::string first = "{\"step\":1}\n{\"step\":2}\n";
  {
    FILE* f = std::fopen(path.c_str(), "w");
    ASSERT_NE(f, nullptr);
    std::fputs((first + "{\"step\":3}\n{\"step\":true}\n").c_str(), f);
    std::fclose(f);
  }
  Result<std::vector<MetricsLine>> all = ReadMetricsFile(path);
  ASSERT_FALSE(all.ok());
  EXPECT_NE(all.status().message().find(path + ":4: \"step\""), std::string::npos) << all.status().message();
  Result<std::vector<MetricsLine>> none = ReadMetricsFile("/dev/zero");
  ASSERT_FALSE(none.ok());
  EXPECT_NE(none.status().message().find("/dev/zero"), std::string::npos);
}

}  // namespace
}  // namespace motley
