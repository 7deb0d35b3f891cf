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

// A run checkpointing every 10 s that lost a node after step 14: its restart took from step 14's
// line (t = 150) to the start of the first resumed step (t = 171 - 1 = 170): 20 s; its checkpoints
// 10 s apart before the restart and after it (not across it).
TEST(MetricsFile, ARunsRestartsAndCheckpointsAreMeasuredFromItsTimes) {
  std::string text = "{\"event\":\"start\",\"first_step\":0,\"time_unix_s\":99}\n";
  auto step = [](int n, double t) {
    return "{\"step\":" + std::to_string(n) +
           ",\"loss\":2.0,\"step_time_s\":1.0,\"time_unix_s\":" + std::to_string(t) + "}\n";
  };
  auto checkpoint = [](int n, double t) {
    return "{\"event\":\"checkpoint\",\"step\":" + std::to_string(n) +
           ",\"time_unix_s\":" + std::to_string(t) + "}\n";
  };
  for (int n = 1; n <= 14; ++n) text += step(n, 100 + 3.5 * n);  // step 14 at t = 149
  text += checkpoint(5, 120) + checkpoint(10, 130);
  text += step(15, 150).substr(0, 10) + "}\n";  // (a step line without time or loss: ignored)
  text += "{\"step\":14,\"loss\":2.0,\"time_unix_s\":150}\n";
  text += "{\"event\":\"restart\",\"failed_rank\":2,\"time_unix_s\":155}\n";
  text += "{\"event\":\"start\",\"first_step\":10,\"time_unix_s\":165}\n";
  text += step(11, 171) + step(12, 172) + checkpoint(15, 180) + checkpoint(20, 190) + step(20, 191);
  Result<std::vector<MetricsLine>> lines = ParseMetricsJsonl(text, "run/metrics.jsonl");
  ASSERT_TRUE(lines.ok()) << lines.status().message();
  Result<MeasuredRestarts> m = MeasureRestarts(*lines, "run/metrics.jsonl");
  ASSERT_TRUE(m.ok()) << m.status().message();
  EXPECT_EQ(m->restarts, 1);
  EXPECT_NEAR(m->restart_s, 20.0, 1e-9);
  ASSERT_TRUE(m->checkpoint_interval_s.has_value());
  EXPECT_NEAR(*m->checkpoint_interval_s, 10.0, 1e-9);

  // Without a restart, or without times: one message naming the file and what to do.
  Result<std::vector<MetricsLine>> plain = ParseMetricsJsonl(step(1, 10) + step(2, 11), "m.jsonl");
  ASSERT_TRUE(plain.ok());
  Result<MeasuredRestarts> none = MeasureRestarts(*plain, "m.jsonl");
  ASSERT_FALSE(none.ok());
  EXPECT_NE(none.status().message().find("m.jsonl: the run never restarted"), std::string::npos)
      << none.status().message();
  Result<std::vector<MetricsLine>> old = ParseMetricsJsonl(
      "{\"step\":1,\"loss\":2}\n{\"event\":\"restart\"}\n{\"step\":2,\"loss\":2}\n", "old.jsonl");
  ASSERT_TRUE(old.ok());
  Result<MeasuredRestarts> untimed = MeasureRestarts(*old, "old.jsonl");
  ASSERT_FALSE(untimed.ok());
  EXPECT_NE(untimed.status().message().find("old.jsonl:2:"), std::string::npos) << untimed.status().message();
  EXPECT_NE(untimed.status().message().find("time_unix_s"), std::string::npos);
  // A time that is not one.
  Result<std::vector<MetricsLine>> bad = ParseMetricsJsonl("{\"step\":1,\"time_unix_s\":-4}\n", "m.jsonl");
  ASSERT_FALSE(bad.ok());
  EXPECT_NE(bad.status().message().find("m.jsonl:1: \"time_unix_s\""), std::string::npos);
}

}  // namespace
}  // namespace motley
