// `motley simulate --island-plan P0 --island-plan P1`: each island's step, the outer round that
// `motley train --island-plan` runs, the period and what crosses between regions — and the errors.
#include <algorithm>
#include <fstream>
#include <iterator>
#include <string>
#include <utility>

#include <fmt/format.h>
#include <fmt/ranges.h>
#include <gtest/gtest.h>
#include <nlohmann/json.hpp>

#include "cli/cli_helpers.h"
#include "cli/equivalence_model.h"
#include "core/units.h"

namespace {

using namespace motley_test;

// Two nodes of two devices, in two regions joined by a slow link.
const std::string kTwoRegions = std::string("name = \"two-regions\"\n") + kCpuType + R"([network]
inter_region_bandwidth = "100Mbps"
[[nodes]]
name = "east"
device = "cpu"
count = 2
region = "east"
nic_bandwidth = "10Gbps"
[[nodes]]
name = "west"
device = "cpu"
count = 2
region = "west"
nic_bandwidth = "10Gbps"
)";

std::string DataParallelPlan(const std::string& devices) {
  return PlanHeader("fp32") +
         "schedule = \"gpipe\"\nzero_stage = 2\n[[groups]]\nministages = [[0, 2], [2, 4]]\ndevices = " +
         devices + "\nmicrobatch_size = [2, 2]\nnum_microbatches = [2, 2]\n";
}

TEST(IslandsSimulate, EachIslandsStepTheRoundAndTheBytesOverTheSlowLink) {
  TempDir dir;
  dir.Write("cluster.toml", kTwoRegions);
  dir.Write("model.toml", kModel);
  dir.Write("east.toml", DataParallelPlan("[0, 1]"));
  dir.Write("west.toml", DataParallelPlan("[2, 3]"));
  const std::string islands = "simulate --island-plan east.toml --island-plan west.toml --inner-steps 10 ";
  CliRun text = Motley(islands, false, dir.path().string());
  ASSERT_EQ(text.exit_code, 0) << text.output;
  EXPECT_CONTAINS(text.output, "2 islands on cluster two-regions");
  EXPECT_CONTAINS(text.output, "outer round");
  EXPECT_CONTAINS(text.output, "east -> west");

  auto simulate = [&](const std::string& extra) {
    CliRun r = Motley(islands + "--json " + extra, false, dir.path().string());
    EXPECT_EQ(r.exit_code, 0) << r.output;
    return nlohmann::json::parse(r.output);
  };
  const nlohmann::json none = simulate("");
  ASSERT_EQ(none["islands"].size(), 2u);
  double slowest = 0;
  for (const auto& island : none["islands"]) {
    EXPECT_EQ(island["inner_steps"], 10);
    slowest = std::max(slowest, island["step_time_s"].get<double>());
  }
  EXPECT_NEAR(none["period_s"].get<double>(), 10 * slowest + none["round_s"].get<double>(), 1e-12);
  EXPECT_GT(none["round_s"].get<double>(), 0);
  EXPECT_EQ(none["tokens_per_period"].get<double>(), 2 * 10 * 8 * 16);  // 8 sequences of 16 an island
  ASSERT_EQ(none["traffic_between_regions"].size(), 2u);                // both ways: a ring of two
  // The model's parameters cross once each way a round, in fp32 (both ring hops cross).
  const double params =
      none["cross_region_bytes_per_token"].get<double>() * none["tokens_per_period"].get<double>();
  EXPECT_GT(params, 0);
  // int8 sends a byte a value where fp32 sends four (gathered, not summed: the same bytes a hop here).
  const nlohmann::json int8 = simulate("--compression int8");
  EXPECT_NEAR(
      none["cross_region_bytes_per_token"].get<double>() / int8["cross_region_bytes_per_token"].get<double>(),
      4.0, 1e-9);
  EXPECT_LT(int8["round_s"].get<double>(), none["round_s"].get<double>());
  // int4: two values a byte and an fp32 scale a block of 128, 4.25 bits a value.
  const nlohmann::json int4 = simulate("--compression int4");
  EXPECT_NEAR(
      int4["cross_region_bytes_per_token"].get<double>() / int8["cross_region_bytes_per_token"].get<double>(),
      4.25 / 8, 1e-9);
  EXPECT_LT(int4["round_s"].get<double>(), int8["round_s"].get<double>());
  // The faster island takes more steps when asked (the islands here are alike: the same).
  const nlohmann::json by_speed = simulate("--inner-steps-by-speed");
  EXPECT_EQ(by_speed["islands"][0]["inner_steps"], 10);
  EXPECT_EQ(by_speed["islands"][1]["inner_steps"], 10);
  // Each island its own H (a job's inner_steps_per_island): the period is the longer island's steps.
  CliRun each_run =
      Motley("simulate --island-plan east.toml --island-plan west.toml --json --inner-steps 10,5", false,
             dir.path().string());
  ASSERT_EQ(each_run.exit_code, 0) << each_run.output;
  const nlohmann::json each = nlohmann::json::parse(each_run.output);
  EXPECT_EQ(each["islands"][1]["inner_steps"], 5);
  EXPECT_NEAR(each["period_s"].get<double>(),
              std::max(10 * each["islands"][0]["step_time_s"].get<double>(),
                       5 * each["islands"][1]["step_time_s"].get<double>()) +
                  each["round_s"].get<double>(),
              1e-12);
  EXPECT_EQ(each["tokens_per_period"].get<double>(), (10 + 5) * 8 * 16);
  CliRun three = Motley("simulate --island-plan east.toml --island-plan west.toml --inner-steps 10,5,5",
                        false, dir.path().string());
  EXPECT_EQ(three.exit_code, 1) << three.output;
  EXPECT_CONTAINS(three.output, "3 values for 2 islands");
  // The round's schedule is the one the runtime prints.
  EXPECT_EQ(none["round_schedule_hash"].get<std::string>().size(), 16u);
  // A round that overlaps the next inner steps: the same round, sent first and landed later, costs the
  // period only what the steps do not hide — less with each step it overlaps.
  EXPECT_EQ(none["round_exposed_s"].get<double>(), none["round_s"].get<double>());
  double last = none["period_s"].get<double>();
  for (int overlap : {1, 5, 9}) {
    const nlohmann::json o = simulate(fmt::format("--overlap-steps {}", overlap));
    EXPECT_EQ(o["overlap_steps"], overlap);
    EXPECT_NE(o["round_schedule_hash"], none["round_schedule_hash"]);
    EXPECT_LT(o["round_exposed_s"].get<double>(), none["round_s"].get<double>());
    EXPECT_NEAR(o["period_s"].get<double>(), 10 * slowest + o["round_exposed_s"].get<double>(), 1e-12);
    EXPECT_LE(o["period_s"].get<double>(), last);
    EXPECT_DOUBLE_EQ(o["cross_region_bytes_per_token"].get<double>(),
                     none["cross_region_bytes_per_token"].get<double>());
    last = o["period_s"].get<double>();
  }
}

// The report page draws islands: each island's step and inner steps, the period island by island and
// the outer round's ops device by device, with the figures `motley simulate --island-plan` gives.
TEST(IslandsSimulate, TheReportPageDrawsThePeriodAndTheRound) {
  TempDir dir;
  dir.Write("cluster.toml", kTwoRegions);
  dir.Write("model.toml", kModel);
  dir.Write("east.toml", DataParallelPlan("[0, 1]"));
  dir.Write("west.toml", DataParallelPlan("[2, 3]"));
  const std::string islands = " --island-plan east.toml --island-plan west.toml --inner-steps 10,5";
  CliRun r = Motley("report -o islands.html" + islands, false, dir.path().string());
  ASSERT_EQ(r.exit_code, 0) << r.output;
  CliRun simulated = Motley("simulate --json" + islands, false, dir.path().string());
  ASSERT_EQ(simulated.exit_code, 0) << simulated.output;
  const nlohmann::json j = nlohmann::json::parse(simulated.output);
  std::ifstream in(dir.Join("islands.html"));
  const std::string page((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
  EXPECT_CONTAINS(page, "Islands: inner steps and the outer round");
  EXPECT_CONTAINS(page, "period of " + motley::FormatDuration(j["period_s"].get<double>()));
  EXPECT_CONTAINS(page, "island 1 · 5 inner steps");
  EXPECT_CONTAINS(page, "<td class=\"num\">5</td>");
  // Both charts, each with a drawn span: the period's inner steps and the round's ops.
  for (const std::string id : {"islands-period", "islands-round"}) {
    const size_t at = page.find("<svg id=\"" + id + "\"");
    ASSERT_NE(at, std::string::npos) << id;
    const std::string chart = page.substr(at, page.find("</svg>", at) - at);
    EXPECT_NE(chart.find(id == "islands-period" ? "inner_steps x1</title>" : "outer_reduce x"),
              std::string::npos)
        << chart.substr(0, 2000);
  }
  // An overlapped round: the page says what the islands wait for, and the period is that much shorter.
  CliRun o = Motley("report -o overlap.html --overlap-steps 4" + islands, false, dir.path().string());
  ASSERT_EQ(o.exit_code, 0) << o.output;
  CliRun o_sim = Motley("simulate --json --overlap-steps 4" + islands, false, dir.path().string());
  ASSERT_EQ(o_sim.exit_code, 0) << o_sim.output;
  const nlohmann::json oj = nlohmann::json::parse(o_sim.output);
  std::ifstream o_in(dir.Join("overlap.html"));
  const std::string o_page((std::istreambuf_iterator<char>(o_in)), std::istreambuf_iterator<char>());
  EXPECT_CONTAINS(o_page, "period of " + motley::FormatDuration(oj["period_s"].get<double>()));
  EXPECT_CONTAINS(o_page, "it overlaps the next 4 inner steps, and they wait " +
                              motley::FormatDuration(oj["round_exposed_s"].get<double>()));
  EXPECT_LT(oj["period_s"].get<double>(), j["period_s"].get<double>());
  // Streamed in 5 fragments overlapping a step each: the page says so, with the period simulate gives.
  CliRun f = Motley("report -o fragments.html --overlap-steps 1 --fragments 5" + islands, false,
                    dir.path().string());
  ASSERT_EQ(f.exit_code, 0) << f.output;
  CliRun f_sim =
      Motley("simulate --json --overlap-steps 1 --fragments 5" + islands, false, dir.path().string());
  ASSERT_EQ(f_sim.exit_code, 0) << f_sim.output;
  std::ifstream f_in(dir.Join("fragments.html"));
  const std::string f_page((std::istreambuf_iterator<char>(f_in)), std::istreambuf_iterator<char>());
  EXPECT_CONTAINS(f_page, "in 5 streaming fragments");
  EXPECT_CONTAINS(f_page, "period of " + motley::FormatDuration(
                                             nlohmann::json::parse(f_sim.output)["period_s"].get<double>()));
}

TEST(IslandsSimulate, MismatchedIslandsAndFlagsAreOneClearError) {
  TempDir dir;
  dir.Write("cluster.toml", kTwoRegions);
  dir.Write("model.toml", kModel);
  dir.Write("east.toml", DataParallelPlan("[0, 1]"));
  const auto one_device = [&](int device) {
    return dir.Write("one.toml",
                     PlanHeader("fp32") +
                         "schedule = \"gpipe\"\nzero_stage = 2\n[[groups]]\nministages = [[0, 2], [2, 4]]\n"
                         "devices = [" +
                         std::to_string(device) + "]\nmicrobatch_size = [2]\nnum_microbatches = [4]\n");
  };
  // Islands of unlike shapes are timed (their round exchanges whole fragments); on shared devices, refused.
  one_device(2);
  CliRun shapes =
      Motley("simulate --island-plan east.toml --island-plan one.toml --json", false, dir.path().string());
  EXPECT_EQ(shapes.exit_code, 0) << shapes.output;
  one_device(1);
  CliRun shared =
      Motley("simulate --island-plan east.toml --island-plan one.toml", false, dir.path().string());
  EXPECT_EQ(shared.exit_code, 1) << shared.output;
  EXPECT_CONTAINS(shared.output, "give each island devices of its own");
  CliRun both = Motley("simulate --plan east.toml --island-plan east.toml", false, dir.path().string());
  EXPECT_EQ(both.exit_code, 2) << both.output;
  EXPECT_CONTAINS(both.output, "give --plan P, or --island-plan P for each island");
}

TEST(IslandsSimulate, PlanCompareListsIslandsOneARegionAndWritesTheirPlans) {
  TempDir dir;
  dir.Write("cluster.toml", kTwoRegions);
  dir.Write("model.toml", kModel);
  const std::string plan =
      "plan --cluster cluster.toml --model model.toml --seq-len 16 --global-batch-tokens 256 --compare ";
  CliRun text = Motley(plan + "-o p.toml", false, dir.path().string());
  ASSERT_EQ(text.exit_code, 0) << text.output;
  EXPECT_CONTAINS(text.output, "islands: 2 x ");
  EXPECT_CONTAINS(text.output, "to the same loss");
  EXPECT_CONTAINS(text.output, "--island-plan p.island0.toml --island-plan p.island1.toml");
  CliRun json = Motley(plan + "--json", false, dir.path().string());
  ASSERT_EQ(json.exit_code, 0) << json.output;
  const nlohmann::json answer = nlohmann::json::parse(json.output), islands = answer["islands"];
  // Chosen exactly when they reach the same loss sooner: their tokens/s times the estimated token
  // efficiency (less than 1: islands need more tokens) against the synchronous plan's tokens/s.
  const double efficiency = islands["token_efficiency"].get<double>();
  EXPECT_GT(efficiency, 0.2);
  EXPECT_LT(efficiency, 1);
  EXPECT_GT(islands["loss_penalty"].get<double>(), 0);
  EXPECT_EQ(islands["chosen"].get<bool>(),
            islands["tokens_per_s"].get<double>() * efficiency > answer["tokens_per_s"].get<double>());
  EXPECT_CONTAINS(islands["why"].get<std::string>(), "an estimate");
  // --islands 2 takes them whatever the estimate; off considers none; 3 is not one a region.
  const nlohmann::json forced =
      nlohmann::json::parse(Motley(plan + "--json --islands 2", false, dir.path().string()).output);
  EXPECT_TRUE(forced["islands"]["chosen"].get<bool>());
  EXPECT_CONTAINS(forced["islands"]["why"].get<std::string>(), "chosen (--islands)");
  const nlohmann::json off =
      nlohmann::json::parse(Motley(plan + "--json --islands off", false, dir.path().string()).output);
  EXPECT_FALSE(off.contains("islands"));
  CliRun three = Motley(plan + "--islands 3", false, dir.path().string());
  EXPECT_EQ(three.exit_code, 1) << three.output;
  EXPECT_CONTAINS(three.output, "--islands 3: islands are one a region so far and the cluster");
  CliRun one_region = Motley(
      "plan --cluster local-emulated --model llama-1m --seq-len 16 --global-batch-tokens 256 "
      "--islands 2",
      false, dir.path().string());
  EXPECT_EQ(one_region.exit_code, 1) << one_region.output;
  EXPECT_CONTAINS(one_region.output, "is one region, and islands are one a region so far: give auto or off");
  // One island a region, on as many devices each: east's are 0 and 1, west's 2 and 3.
  ASSERT_EQ(islands["devices"].size(), 2u);
  EXPECT_EQ(islands["devices"][0].size(), islands["devices"][1].size());
  for (int d : islands["devices"][0]) EXPECT_LT(d, 2);
  for (int d : islands["devices"][1]) EXPECT_GE(d, 2);
  // The written plans simulate as the comparison says.
  CliRun simulated = Motley(
      "simulate --island-plan p.island0.toml --island-plan p.island1.toml --json --compression int8 "
      "--inner-steps " +
          std::to_string(islands["inner_steps"].get<int64_t>()) + " --overlap-steps " +
          std::to_string(islands["overlap_steps"].get<int64_t>()) + " --fragments " +
          std::to_string(islands["fragments"].get<int64_t>()),
      false, dir.path().string());
  ASSERT_EQ(simulated.exit_code, 0) << simulated.output;
  EXPECT_NEAR(nlohmann::json::parse(simulated.output)["tokens_per_s"].get<double>(),
              islands["tokens_per_s"].get<double>(), 1e-9 * islands["tokens_per_s"].get<double>());
  // Regions of unlike nodes (2 devices and 1): each region's island its own plan, of its own shape —
  // the round exchanges whole fragments — and the written plans simulate as the comparison says.
  std::string unlike = kTwoRegions;
  unlike.replace(unlike.rfind("count = 2"), 9, "count = 1");
  dir.Write("unlike.toml", unlike);
  CliRun offered = Motley(
      "plan --cluster unlike.toml --model model.toml --seq-len 16 --global-batch-tokens 256 --compare --json "
      "--islands 2 -o u.toml",
      false, dir.path().string());
  ASSERT_EQ(offered.exit_code, 0) << offered.output;
  const nlohmann::json two = nlohmann::json::parse(offered.output)["islands"];
  ASSERT_EQ(two["devices"].size(), 2u) << two.dump();
  EXPECT_EQ(two["devices"][0].size() + two["devices"][1].size(), 3u) << two.dump();
  CliRun unlike_sim = Motley(
      "simulate --cluster unlike.toml --island-plan u.island0.toml --island-plan u.island1.toml "
      "--json --compression int8 --inner-steps " +
          fmt::format("{} --overlap-steps {} --fragments {}",
                      fmt::join(two["inner_steps_per_island"].get<std::vector<int64_t>>(), ","),
                      two["overlap_steps"].get<int64_t>(), two["fragments"].get<int64_t>()),
      false, dir.path().string());
  ASSERT_EQ(unlike_sim.exit_code, 0) << unlike_sim.output;
  EXPECT_NEAR(nlohmann::json::parse(unlike_sim.output)["tokens_per_s"].get<double>(),
              two["tokens_per_s"].get<double>(), 1e-9 * two["tokens_per_s"].get<double>());
}

// `motley plan --islands 2` of the test model (16k tokens a step) over the two regions linked at `rate`,
// in `dir`: the command (its output flags to add) and the islands it offers (null: it failed).
std::pair<std::string, nlohmann::json> IslandsOverALinkOf(TempDir& dir, const std::string& rate) {
  std::string cluster = kTwoRegions;
  cluster.replace(cluster.find("100Mbps"), 7, rate);
  dir.Write("cluster.toml", cluster);
  dir.Write("model.toml", kModel);
  const std::string plan =
      "plan --cluster cluster.toml --model model.toml --seq-len 16 --global-batch-tokens 16384 --islands 2 ";
  CliRun json = Motley(plan + "--json", false, dir.path().string());
  EXPECT_EQ(json.exit_code, 0) << json.output;
  return {plan, json.exit_code == 0 ? nlohmann::json::parse(json.output)["islands"] : nlohmann::json()};
}

// Over a link slow enough that the islands would wait for more than a tenth of the period at the fewest
// inner steps, the planner overlaps the round with the next inner steps rather than meeting less often:
// the written plans, simulated with that overlap, give the speed the comparison says.
TEST(IslandsSimulate, OverASlowLinkThePlannerOverlapsTheRoundRatherThanMeetLessOften) {
  TempDir dir;
  const auto [plan, islands] = IslandsOverALinkOf(dir, "5Mbps");
  ASSERT_FALSE(islands.is_null());
  const int64_t h = islands["inner_steps"], overlap = islands["overlap_steps"];
  EXPECT_GT(overlap, 0) << islands.dump();
  EXPECT_LT(overlap, h);
  EXPECT_LE(islands["round_exposed_s"].get<double>(), 0.1 * islands["period_s"].get<double>());
  // The loss estimate it is judged by counts what overlapping cost when measured.
  EXPECT_CONTAINS(islands["why"].get<std::string>(), "rounds overlapping");
  CliRun text = Motley(plan + "-o p.toml", false, dir.path().string());
  ASSERT_EQ(text.exit_code, 0) << text.output;
  EXPECT_CONTAINS(text.output, fmt::format("inner_steps = {}, overlap_steps = {}", h, overlap));
  const std::string simulate =
      "simulate --island-plan p.island0.toml --island-plan p.island1.toml --json "
      "--compression int8 --inner-steps " +
      std::to_string(h);
  EXPECT_EQ(islands["fragments"].get<int64_t>(), 1) << islands.dump();  // the whole model's round suffices
  CliRun with = Motley(simulate + " --overlap-steps " + std::to_string(overlap), false, dir.path().string());
  ASSERT_EQ(with.exit_code, 0) << with.output;
  const nlohmann::json w = nlohmann::json::parse(with.output);
  EXPECT_NEAR(w["tokens_per_s"].get<double>(), islands["tokens_per_s"].get<double>(),
              1e-9 * islands["tokens_per_s"].get<double>());
  // Without the overlap, the same H waits for more than a tenth of its period: why it overlaps.
  CliRun without = Motley(simulate, false, dir.path().string());
  ASSERT_EQ(without.exit_code, 0) << without.output;
  const nlohmann::json wo = nlohmann::json::parse(without.output);
  EXPECT_GT(wo["round_exposed_s"].get<double>(), 0.1 * wo["period_s"].get<double>());
  EXPECT_LT(w["period_s"].get<double>(), wo["period_s"].get<double>());
}

// Regions shaped alike but of unlike devices (west's half as fast, with half the memory): each region's
// island its own plan, the faster island first, each taking inner steps by its predicted speed — what
// `motley simulate` of the written plans times alike.
TEST(IslandsSimulate, RegionsOfUnlikeDevicesTakeInnerStepsByTheirSpeed) {
  TempDir dir;
  std::string cluster = kTwoRegions;
  cluster.replace(cluster.rfind("device = \"cpu\""), 14, "device = \"slow\"");
  std::string slow = kCpuType;
  slow.replace(slow.find("[device_types.cpu]"), 18, "[device_types.slow]");
  slow.replace(slow.find("2GiB"), 4, "1GiB");
  for (const std::string flops : {"fp16_flops", "fp32_flops"})
    slow.replace(slow.find(flops + " = \"50GFLOPS\""), flops.size() + 13, flops + " = \"25GFLOPS\"");
  cluster.insert(cluster.find("[network]"), slow);
  dir.Write("cluster.toml", cluster);
  dir.Write("model.toml", kModel);
  const std::string plan =
      "plan --cluster cluster.toml --model model.toml --seq-len 16 --global-batch-tokens 256 --islands 2 ";
  CliRun json = Motley(plan + "--json", false, dir.path().string());
  ASSERT_EQ(json.exit_code, 0) << json.output;
  const nlohmann::json islands = nlohmann::json::parse(json.output)["islands"];
  ASSERT_EQ(islands["devices"].size(), 2u);
  for (int d : islands["devices"][0]) EXPECT_LT(d, 2);  // east's, the faster, first
  for (int d : islands["devices"][1]) EXPECT_GE(d, 2);
  const std::vector<int64_t> inner = islands["inner_steps_per_island"];
  ASSERT_EQ(inner.size(), 2u);
  EXPECT_EQ(inner[0], islands["inner_steps"].get<int64_t>());
  EXPECT_GT(inner[0], inner[1]);
  CliRun text = Motley(plan + "-o p.toml", false, dir.path().string());
  ASSERT_EQ(text.exit_code, 0) << text.output;
  const std::string each = std::to_string(inner[0]) + ", " + std::to_string(inner[1]);
  EXPECT_CONTAINS(text.output, "H = " + each + " (island by island, by speed)");
  EXPECT_CONTAINS(text.output, "inner_steps_per_island = [" + each + "]");
  CliRun simulated = Motley(
      "simulate --island-plan p.island0.toml --island-plan p.island1.toml --json --compression int8 "
      "--inner-steps " +
          std::to_string(inner[0]) + "," + std::to_string(inner[1]),
      false, dir.path().string());
  ASSERT_EQ(simulated.exit_code, 0) << simulated.output;
  const nlohmann::json sim = nlohmann::json::parse(simulated.output);
  EXPECT_NEAR(sim["tokens_per_s"].get<double>(), islands["tokens_per_s"].get<double>(),
              1e-9 * islands["tokens_per_s"].get<double>());
  // The slower island's steps take about as long as the faster's: neither waits much for the other.
  const double fast_s = inner[0] * sim["islands"][0]["step_time_s"].get<double>(),
               slow_s = inner[1] * sim["islands"][1]["step_time_s"].get<double>();
  EXPECT_NEAR(fast_s / slow_s, 1.0, 0.2) << fast_s << " " << slow_s;
}

// Three regions, one of devices too small for the model: the islands are the other two regions', and
// the third is left out, named with the reason — as a synchronous plan leaves out devices.
TEST(IslandsSimulate, ARegionNoPlanFitsIsLeftOutOfTheIslandsNamingWhy) {
  TempDir dir;
  std::string cluster = kTwoRegions;
  std::string tiny = kCpuType;
  tiny.replace(tiny.find("[device_types.cpu]"), 18, "[device_types.tiny]");
  tiny.replace(tiny.find("2GiB"), 4, "16KiB");
  cluster.insert(cluster.find("[network]"), tiny);
  cluster +=
      "[[nodes]]\nname = \"lab\"\ndevice = \"tiny\"\ncount = 2\nregion = \"lab\"\nnic_bandwidth = "
      "\"10Gbps\"\n";
  dir.Write("cluster.toml", cluster);
  dir.Write("model.toml", kModel);
  CliRun r = Motley(
      "plan --cluster cluster.toml --model model.toml --seq-len 16 --global-batch-tokens 384 --islands 3 "
      "--json",
      false, dir.path().string());
  ASSERT_EQ(r.exit_code, 0) << r.output;
  const nlohmann::json islands = nlohmann::json::parse(r.output)["islands"];
  ASSERT_EQ(islands["devices"].size(), 2u) << islands.dump();
  for (const auto& devices : islands["devices"])
    for (int d : devices) EXPECT_LT(d, 4);
  EXPECT_CONTAINS(islands["left_out"].get<std::string>(), "no plan for region lab alone");
}

// Over a slower link, where overlapping the whole model's round by a step still leaves the islands waiting
// at the fewest inner steps, the planner streams the round in fragments (each exchange a fragment's,
// hidden behind the same step) rather than meeting less often: the written plans, simulated in those
// fragments, give the speed the comparison says, and the job it prints says so.
TEST(IslandsSimulate, OverASlowerLinkThePlannerStreamsFragmentsRatherThanMeetLessOften) {
  TempDir dir;
  const auto [plan, islands] = IslandsOverALinkOf(dir, "2Mbps");
  ASSERT_FALSE(islands.is_null());
  const int64_t h = islands["inner_steps"], overlap = islands["overlap_steps"], f = islands["fragments"];
  EXPECT_EQ(h, int64_t{10}) << islands.dump();
  EXPECT_GT(f, 1) << islands.dump();
  EXPECT_EQ(h % f, 0);
  EXPECT_LT(overlap, h / f);
  EXPECT_LE(islands["round_exposed_s"].get<double>(), 0.1 * islands["period_s"].get<double>());
  EXPECT_CONTAINS(islands["why"].get<std::string>(), "streaming fragments");
  CliRun text = Motley(plan + "-o p.toml", false, dir.path().string());
  ASSERT_EQ(text.exit_code, 0) << text.output;
  EXPECT_CONTAINS(text.output,
                  fmt::format("inner_steps = {}, overlap_steps = {}, fragments = {}", h, overlap, f));
  const std::string simulate = fmt::format(
      "simulate --island-plan p.island0.toml --island-plan p.island1.toml --json --compression int8 "
      "--inner-steps {} --overlap-steps {}",
      h, overlap);
  CliRun streamed = Motley(simulate + fmt::format(" --fragments {}", f), false, dir.path().string());
  ASSERT_EQ(streamed.exit_code, 0) << streamed.output;
  const nlohmann::json s = nlohmann::json::parse(streamed.output);
  EXPECT_NEAR(s["tokens_per_s"].get<double>(), islands["tokens_per_s"].get<double>(),
              1e-9 * islands["tokens_per_s"].get<double>());
  EXPECT_EQ(s["fragments"].get<int64_t>(), f);
  // The whole model's round overlapping as many steps: the islands wait for more than a tenth of it.
  CliRun whole = Motley(simulate, false, dir.path().string());
  ASSERT_EQ(whole.exit_code, 0) << whole.output;
  const nlohmann::json w = nlohmann::json::parse(whole.output);
  EXPECT_GT(w["round_exposed_s"].get<double>(), 0.1 * w["period_s"].get<double>());
  EXPECT_NEAR(w["cross_region_bytes_per_token"].get<double>(),
              s["cross_region_bytes_per_token"].get<double>(),
              1e-9 * w["cross_region_bytes_per_token"].get<double>());
}

}  // namespace
