// The runtime against the simulator on memory: each rank's measured peak (the memory ledger counts
// every byte of its tensors) beside the simulator's prediction for the same schedule, as
// `motley train --plan` prints them. A plan the planner judged to fit must not run out of memory.
#include <regex>
#include <string>
#include <vector>

#include <gtest/gtest.h>

#include "cli_helpers.h"

namespace motley_test {
namespace {

double Mib(const std::string& number, const std::string& unit) {
  const double x = std::stod(number);
  return unit == "KiB" ? x / 1024 : unit == "GiB" ? x * 1024 : x;
}

// (measured, predicted) MiB per rank, from the per-rank table.
std::vector<std::pair<double, double>> PeakMemories(const std::string& output) {
  static const std::regex row(R"(rank \d+ .* ([0-9.]+) (KiB|MiB|GiB) \(([0-9.]+) (KiB|MiB|GiB)\)\n)");
  std::vector<std::pair<double, double>> out;
  for (auto it = std::sregex_iterator(output.begin(), output.end(), row); it != std::sregex_iterator(); ++it)
    out.emplace_back(Mib((*it)[1], (*it)[2]), Mib((*it)[3], (*it)[4]));
  return out;
}

// Pipelines with checkpointing keep each layer's input and recompute one layer at a time, as the
// simulator counts them (before: the runtime recomputed a whole ministage at once and used 31% more
// than predicted on this plan).
TEST(MemoryPrediction, EachRanksPeakIsWithinAFewPercentOfTheSimulatorsForAPipeline) {
  for (const std::string plan : {"local-zorse", "local-even-dp"}) {
    CliRun r = Motley("launch --nproc 4 -- " + std::string(MOTLEY_BIN) + " train default --plan " +
                      Example("plans/" + plan + ".toml") + " --steps 2 --no-checkpoint --no-validation");
    ASSERT_EQ(r.exit_code, 0) << r.output;
    const auto peaks = PeakMemories(r.output);
    ASSERT_EQ(peaks.size(), 4u) << r.output;
    for (const auto& [measured, predicted] : peaks) {
      EXPECT_LE(measured, 1.10 * predicted) << plan << "\n" << r.output;
      EXPECT_GE(measured, 0.80 * predicted) << plan << "\n" << r.output;
    }
  }
}

}  // namespace
}  // namespace motley_test
