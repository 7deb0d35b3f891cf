// The planning commands from the command line: simulate, calibrate, schedule, plan (compare,
// explain, write, FlexTP modes), their flags' ranges and what they say when no plan exists.
#include <sys/wait.h>
#include <unistd.h>
#include <cstdint>

#include <cstdio>
#include <filesystem>
#include <fstream>
#include <string>
#include <vector>

#include <gtest/gtest.h>
#include <nlohmann/json.hpp>

#include "cli/cli_helpers.h"
#include "core/file_io.h"
#include "core/units.h"

namespace {

using namespace motley_test;

TEST(Cli, SimulateReportsTheIssueFields) {
  TempDir dir;
  const std::string trace = dir.Write("trace.json", "");
  CliRun r =
      Motley("simulate --plan " + Example("plans/local-zorse.toml") + " --json --trace " + trace, true);
  ASSERT_EQ(r.exit_code, 0) << r.output;
  auto j = nlohmann::json::parse(r.output);
  for (const char* key : {"step_time_s", "tokens_per_s", "tflops", "hfu", "fits_memory"})
    EXPECT_TRUE(j.contains(key)) << key;
  EXPECT_GT(j["step_time_s"].get<double>(), 0);
  EXPECT_DOUBLE_EQ(j["tokens_per_s"].get<double>() * j["step_time_s"].get<double>(), 32 * 128);
  ASSERT_EQ(j["devices"].size(), 4u);
  for (const auto& d : j["devices"]) {
    EXPECT_GT(d["peak_memory_bytes"].get<double>(), 0);
    EXPECT_GT(d["busy_fraction"].get<double>(), 0);
    EXPECT_LE(d["busy_fraction"].get<double>(), 1);
  }
  std::ifstream in(trace);
  auto t = nlohmann::json::parse(in);
  EXPECT_GT(t["traceEvents"].size(), 100u);
  // The Poplar-style plan beats the even split on the emulated cluster (two devices 3x slower).
  auto step = [&](const std::string& plan) {
    CliRun p = Motley("simulate --plan " + Example("plans/" + plan) + " --json", true);
    EXPECT_EQ(p.exit_code, 0) << plan;
    return nlohmann::json::parse(p.output)["step_time_s"].get<double>();
  };
  EXPECT_LT(step("local-poplar.toml") * 1.5, step("local-even-dp.toml"));
}

// Online profiling: a run's measured compute, against the plan's simulation with a profile,
// scales the profile per device type, and its communication sets the links' per-call overhead;
// the calibrated profile then predicts both.
TEST(Cli, CalibrateScalesTheProfileToTheRun) {
  TempDir dir;
  const std::string plan = Example("plans/local-even-dp.toml");
  const std::string profile =
      dir.Write("profile.json",
                R"({"format": "motley-profile-1", "entries": [{"device_type": "emu-cpu", "model": "llama-1m",
          "hidden_size": 128, "seq_len": 128, "precision": "fp32",
          "points": [{"microbatch": 1, "forward_ms": 1.0, "backward_ms": 3.0},
                     {"microbatch": 8, "forward_ms": 6.0, "backward_ms": 18.0}],
          "optimizer_ms_per_mparam": 2.0}]})");
  auto simulate = [&](const std::string& p) {
    CliRun r = Motley("simulate --plan " + plan + " --profile " + p + " --json", true);
    EXPECT_EQ(r.exit_code, 0) << r.output;
    return nlohmann::json::parse(r.output);
  };
  const nlohmann::json before = simulate(profile);
  // A run whose ranks all computed 1.4x the prediction (steps 1-2 are warm-up, twice as slow).
  std::string metrics;
  for (int step = 1; step <= 5; ++step) {
    nlohmann::json ranks = nlohmann::json::array();
    for (const auto& d : before["devices"])
      ranks.push_back({{"rank", d["rank"]},
                       {"compute_s", (step < 3 ? 2.8 : 1.4) * d["compute_busy_s"].get<double>()},
                       // its waits for the others' compute 1.4x too, and 50 ms more in its collectives
                       {"comm_s", 1.4 * d["comm_busy_s"].get<double>() + 0.05}});
    metrics += nlohmann::json{{"step", step}, {"step_time_s", 1.0}, {"ranks", ranks}}.dump() + "\n";
  }
  dir.Write("run.jsonl", metrics);
  CliRun c = Motley("calibrate --profile " + profile + " --plan " + plan + " --metrics " +
                    dir.Join("run.jsonl") + " -o " + dir.Join("calibrated.json"));
  ASSERT_EQ(c.exit_code, 0) << c.output;
  EXPECT_CONTAINS(c.output, "emu-cpu");
  EXPECT_CONTAINS(c.output, "1.4");
  const nlohmann::json after = simulate(dir.Join("calibrated.json"));
  for (size_t r = 0; r < before["devices"].size(); ++r)
    EXPECT_NEAR(after["devices"][r]["compute_busy_s"].get<double>(),
                1.4 * before["devices"][r]["compute_busy_s"].get<double>(),
                1e-3 * before["devices"][r]["compute_busy_s"].get<double>());
  // ... and its links: the ranks' communication, on the mean, is what the run measured.
  EXPECT_CONTAINS(c.output, "communication: measured");
  double comm_before = 0, comm_after = 0;
  for (size_t r = 0; r < before["devices"].size(); ++r) {
    comm_before += before["devices"][r]["comm_busy_s"].get<double>();
    comm_after += after["devices"][r]["comm_busy_s"].get<double>();
  }
  const double ranks = static_cast<double>(before["devices"].size());
  EXPECT_NEAR(comm_after / ranks, 1.4 * comm_before / ranks + 0.05, 1e-3);
  EXPECT_EQ(c.output.find("no lower"), std::string::npos) << c.output;
  // Metrics of another plan (one rank): one clear error, no file written.
  dir.Write("other.jsonl", R"({"step": 3, "ranks": [{"rank": 0, "compute_s": 0.1}]})"
                           "\n");
  CliRun bad = Motley("calibrate --profile " + profile + " --plan " + plan + " --metrics " +
                      dir.Join("other.jsonl") + " -o " + dir.Join("bad.json"));
  EXPECT_EQ(bad.exit_code, 1);
  EXPECT_CONTAINS(bad.output, "other.jsonl");
  EXPECT_CONTAINS(bad.output, "not of this plan");
  EXPECT_FALSE(fs::exists(dir.Join("bad.json")));

  // Several runs of the plan: their steps are pooled. Alone, the first says 1.0x and the second
  // 1.6x; together the median of their seven steps is 1.3x.
  auto run = [&](const std::string& name, const std::vector<double>& scales) {
    std::string text;
    for (size_t i = 0; i < scales.size(); ++i) {
      nlohmann::json ranks = nlohmann::json::array();
      for (const auto& d : before["devices"])
        ranks.push_back({{"rank", d["rank"]}, {"compute_s", scales[i] * d["compute_busy_s"].get<double>()}});
      text += nlohmann::json{{"step", 3 + i}, {"step_time_s", 1.0}, {"ranks", ranks}}.dump() + "\n";
    }
    return dir.Write(name, text);
  };
  const std::string first = run("first.jsonl", {1.0, 1.0, 1.3}),
                    second = run("second.jsonl", {1.3, 1.6, 1.6, 1.6});
  for (const auto& [files, scale] : std::vector<std::pair<std::string, double>>{
           {first, 1.0}, {second, 1.6}, {first + " --metrics " + second, 1.3}}) {
    CliRun p = Motley("calibrate --profile " + profile + " --plan " + plan + " --metrics " + files + " -o " +
                      dir.Join("pooled.json"));
    ASSERT_EQ(p.exit_code, 0) << p.output;
    const nlohmann::json pooled = simulate(dir.Join("pooled.json"));
    EXPECT_NEAR(pooled["devices"][0]["compute_busy_s"].get<double>(),
                scale * before["devices"][0]["compute_busy_s"].get<double>(),
                1e-3 * before["devices"][0]["compute_busy_s"].get<double>())
        << files;
  }
  // A run of another plan among them: one error naming both files, nothing written.
  CliRun mixed = Motley("calibrate --profile " + profile + " --plan " + plan + " --metrics " + first +
                        " --metrics " + dir.Join("other.jsonl") + " -o " + dir.Join("mixed.json"));
  EXPECT_EQ(mixed.exit_code, 1);
  EXPECT_CONTAINS(mixed.output, "other.jsonl: 1 rank(s), but");
  EXPECT_CONTAINS(mixed.output, "first.jsonl");
  EXPECT_FALSE(fs::exists(dir.Join("mixed.json")));
  // The metrics name the schedule their steps ran (#48): another plan's with as many ranks — which
  // the count cannot tell — is refused naming both schedules; and of a run that rebalanced onto
  // this plan's schedule only the steps after the switch count (before it: 5x, left out).
  const std::string hash = before["schedule_hash"].get<std::string>();
  const std::string first_steps = motley::ReadFileToString(first).value();
  dir.Write("another-schedule.jsonl",
            std::string(R"({"event": "start", "schedule_hash": "0123456789abcdef"})") + "\n" + first_steps);
  CliRun foreign = Motley("calibrate --profile " + profile + " --plan " + plan + " --metrics " +
                          dir.Join("another-schedule.jsonl") + " -o " + dir.Join("foreign.json"));
  EXPECT_EQ(foreign.exit_code, 1);
  EXPECT_CONTAINS(foreign.output, "ran schedule 0123456789abcdef, but the plan lowers to schedule " + hash);
  EXPECT_FALSE(fs::exists(dir.Join("foreign.json")));
  const std::string slow_steps = motley::ReadFileToString(run("slow.jsonl", {5.0, 5.0, 5.0})).value();
  dir.Write("rebalanced.jsonl",
            std::string(R"({"event": "start", "schedule_hash": "0123456789abcdef"})") + "\n" + slow_steps +
                nlohmann::json{{"event", "rebalance"}, {"schedule_hash", hash}}.dump() + "\n" + first_steps);
  CliRun switched = Motley("calibrate --profile " + profile + " --plan " + plan + " --metrics " +
                           dir.Join("rebalanced.jsonl") + " -o " + dir.Join("switched.json"));
  ASSERT_EQ(switched.exit_code, 0) << switched.output;
  EXPECT_NEAR(simulate(dir.Join("switched.json"))["devices"][0]["compute_busy_s"].get<double>(),
              before["devices"][0]["compute_busy_s"].get<double>(),
              1e-3 * before["devices"][0]["compute_busy_s"].get<double>());
}

TEST(Cli, ScheduleListsEveryRankAndBadPlansSayWhy) {
  CliRun r = Motley("schedule --plan " + Example("plans/local-poplar.toml") + " --json", true);
  ASSERT_EQ(r.exit_code, 0);
  auto j = nlohmann::json::parse(r.output);
  EXPECT_EQ(j["programs"].size(), 4u);
  EXPECT_EQ(j["global_batch_tokens"], 32 * 128);
  CliRun text = Motley("schedule --plan " + Example("plans/local-zorse.toml"));
  EXPECT_CONTAINS(text.output, "rank 3 (device 3)");
  EXPECT_CONTAINS(text.output, "param_prefetch");
  TempDir dir;
  std::string bad = dir.Write("p.toml",
                              "model = \"llama-1m\"\ncluster = \"local-emulated\"\nseq_len = 128\n"
                              "[[groups]]\nministages = [[0, 3]]\ndevices = [0, 9]\n"
                              "microbatch_size = [1, 1]\nnum_microbatches = [1, 1]\n");
  CliRun e = Motley("simulate --plan " + bad);
  EXPECT_EQ(e.exit_code, 1);
  EXPECT_CONTAINS(e.output, "groups[0].devices[1] (device 9): no such device; the cluster has devices 0..3");
  EXPECT_CONTAINS(e.output, "layer 3 of model 'llama-1m' (4 layers) is in 0 ministages");
}

// A plan written elsewhere names the cluster and model files it was planned for as its own
// folder sees them (a plan file's relative paths are relative to its folder), so it reads back.
TEST(Cli, APlanWrittenToAnotherFolderFindsItsClusterFile) {
  TempDir dir;
  const std::string out = dir.Join("elsewhere.toml");
  CliRun r = Motley(
      "plan --cluster examples/clusters/local-emulated.toml --model llama-1m --seq-len 128 "
      "--global-batch-tokens 4096 --precision fp32 --strategy poplar -o " +
          out,
      false, MOTLEY_SOURCE_DIR);
  ASSERT_EQ(r.exit_code, 0) << r.output;
  CliRun sim = Motley("simulate --plan " + out);
  EXPECT_EQ(sim.exit_code, 0) << sim.output;
  EXPECT_CONTAINS(sim.output, "on cluster local-emulated");
}

// `motley simulate --straggler D=F [--flextp-mode M]`: a straggler in a tensor-parallel team, off
// (the team waits for it) and as FlexTP's migration balances it (sim/flextp_prediction.h).
TEST(Cli, SimulatePredictsAStragglingTeamUnderEachFlexTpMode) {
  TempDir dir;
  const std::string plan = dir.Write("tp.toml", R"(model = "llama-1m"
cluster = "local-emulated"
seq_len = 128
precision = "fp32"
schedule = "gpipe"
zero_stage = 0
[[groups]]
ministages = [[0, 4]]
tp_degree = 2
devices = [0, 1]
microbatch_size = [2, 2]
num_microbatches = [16, 16]
)");
  auto step = [&](const std::string& flags, const std::string& mode) {
    CliRun r = Motley("simulate --plan " + plan + " --json " + flags, true);
    EXPECT_EQ(r.exit_code, 0) << r.output;
    const auto j = nlohmann::json::parse(r.output);
    EXPECT_EQ(j["flextp_mode"], mode) << flags;
    return j["step_time_s"].get<double>();
  };
  const double even = step("", "off");
  const double off = step("--straggler 1=4", "off");
  const double migrate = step("--straggler 1=4 --flextp-mode migrate", "migrate");
  EXPECT_GT(off, 2 * even);
  EXPECT_LT(migrate, 0.8 * off);
  EXPECT_GT(migrate, even);
  EXPECT_NEAR(step("--flextp-mode semi", "semi"), even, 1e-9 * even);  // nothing to balance
  // The balance the prediction rests on, per rank: under migration the straggler gives, the other
  // takes what it gives, and the team's compute is below the straggler's alone; resizing prunes
  // on the straggler alone and moves nothing.
  auto team = [&](const std::string& mode) {
    CliRun r = Motley("simulate --plan " + plan + " --json --straggler 1=4 --flextp-mode " + mode, true);
    EXPECT_EQ(r.exit_code, 0) << r.output;
    const auto teams = nlohmann::json::parse(r.output)["flextp_teams"];
    EXPECT_EQ(teams.size(), 1u) << r.output;
    return teams.empty() ? nlohmann::json() : teams[0];
  };
  const auto migrated = team("migrate");
  ASSERT_EQ(migrated["ranks"].size(), 2u);
  const auto &fast = migrated["ranks"][0], &slow = migrated["ranks"][1];
  EXPECT_EQ(slow["rank"], 1);
  EXPECT_GT(slow["units_given"].get<int64_t>(), 0);
  EXPECT_EQ(fast["units_received"], slow["units_given"]);
  EXPECT_EQ(fast["heads_received"], slow["heads_given"]);
  EXPECT_EQ(fast["units_given"].get<int64_t>() + slow["units_received"].get<int64_t>(), 0);
  EXPECT_NEAR(slow["alone_compute_s"].get<double>(), 4 * fast["alone_compute_s"].get<double>(),
              1e-6 * slow["alone_compute_s"].get<double>());
  EXPECT_LT(migrated["team_compute_s"].get<double>(), 0.8 * slow["alone_compute_s"].get<double>());
  EXPECT_EQ(slow["prune_ratio"], 0);
  const auto resized = team("resize");
  EXPECT_GT(resized["ranks"][1]["prune_ratio"].get<double>(), 0);
  EXPECT_EQ(resized["ranks"][0]["prune_ratio"], 0);
  EXPECT_EQ(resized["ranks"][1]["units_given"], 0);
  {  // mode off: no team balanced
    CliRun r = Motley("simulate --plan " + plan + " --json --straggler 1=4", true);
    EXPECT_TRUE(nlohmann::json::parse(r.output)["flextp_teams"].empty());
  }
  CliRun text = Motley("simulate --plan " + plan + " --straggler 1=4 --flextp-mode semi");
  EXPECT_EQ(text.exit_code, 0);
  EXPECT_CONTAINS(text.output, "stragglers: device 1 4x slower; FlexTP in tensor-parallel teams: semi");
  EXPECT_CONTAINS(text.output, "FlexTP semi in the team of ranks 0, 1:");
  EXPECT_CONTAINS(text.output, "units given");
  CliRun bad = Motley("simulate --plan " + plan + " --straggler 7=4");
  EXPECT_NE(bad.exit_code, 0);
  EXPECT_CONTAINS(bad.output,
                  "--straggler 7=4: give DEVICE=FACTOR, a device of cluster local-emulated (0..3)");
}

// #26 part 3: on a cluster of NVLink/NVSwitch nodes the pipeline searches split layers per group in
// teams, each plan with a team names its FlexTP mode — chosen by the simulator with a straggler —
// and the written plan carries it.
TEST(Cli, PlanCompareShowsTensorParallelPlansWithTheirFlexTpMode) {
  TempDir dir;
  const std::string base =
      "plan --cluster zorse-a --model llama-13b --seq-len 2048 --global-batch-tokens 131072 ";
  CliRun r = Motley(base + "--compare --json", true);
  ASSERT_EQ(r.exit_code, 0) << r.output;
  const auto j = nlohmann::json::parse(r.output);
  int with_teams = 0;
  for (const auto& c : j["candidates"]) {
    if (c["groups"].empty()) continue;
    bool teams = false;
    for (const auto& g : c["groups"]) teams = teams || g["tp_degree"].get<int>() > 1;
    EXPECT_EQ(c.contains("flextp_mode"), teams) << c["strategy"];
    EXPECT_EQ(c.contains("straggler"), teams) << c["strategy"];
    if (!teams) continue;
    ++with_teams;
    const auto& s = c["straggler"];
    const double off = s["step_time_s_by_mode"]["off"], migrate = s["step_time_s_by_mode"]["migrate"];
    EXPECT_EQ(c["flextp_mode"], migrate < 0.99 * off ? "migrate" : "off") << c["strategy"];
    EXPECT_GT(off, c["step_time_s"].get<double>()) << c["strategy"];  // a 2x straggler slows the team
  }
  EXPECT_GE(with_teams, 1) << r.output;
  CliRun table = Motley(base + "--compare --straggler 0=3 --flextp-mode semi");
  ASSERT_EQ(table.exit_code, 0) << table.output;
  EXPECT_CONTAINS(table.output, "FlexTP");
  EXPECT_CONTAINS(table.output, "semi");
  EXPECT_CONTAINS(table.output, "(device 0 3x)");
  // One strategy that splits layers: why, its mode, and the mode in the plan it writes.
  const std::string out = dir.Join("tp.toml");
  CliRun hexiscale = Motley(base + "--strategy hexiscale --straggler 4=2 -o " + out);
  ASSERT_EQ(hexiscale.exit_code, 0) << hexiscale.output;
  EXPECT_CONTAINS(hexiscale.output, "(hexiscale's search chose it); FlexTP ");
  EXPECT_CONTAINS(hexiscale.output, "with device 4 2x slower");
  motley::Result<std::string> written = motley::ReadFileToString(out);
  ASSERT_TRUE(written.ok());
  EXPECT_CONTAINS(*written, "flextp_mode = ");
  CliRun sim = Motley("simulate --plan " + out + " --json", true);
  ASSERT_EQ(sim.exit_code, 0) << sim.output;
  const std::string simulated = nlohmann::json::parse(sim.output)["flextp_mode"].get<std::string>();
  EXPECT_CONTAINS(*written, "flextp_mode = \"" + simulated + "\"");
  CliRun bad = Motley(base + "--straggler 20=2");
  EXPECT_NE(bad.exit_code, 0);
  EXPECT_CONTAINS(bad.output, "--straggler 20=2: give DEVICE=FACTOR, a device of cluster zorse-a (0..19)");
}

TEST(Cli, PlanChoosesComparesAndWritesAPlanThatSimulatesUnchanged) {
  TempDir dir;
  const std::string out = dir.Write("plan.toml", "");
  const std::string base =
      "plan --cluster local-emulated --model llama-1m --seq-len 128 --global-batch-tokens 4096 "
      "--precision fp32";
  CliRun r = Motley(base + " --compare --json -o " + out, true);
  ASSERT_EQ(r.exit_code, 0) << r.output;
  auto j = nlohmann::json::parse(r.output);
  for (const char* key :
       {"strategy", "step_time_s", "tokens_per_s", "tflops", "hfu", "fits_memory", "groups"})
    EXPECT_TRUE(j.contains(key)) << key;
  EXPECT_TRUE(j["fits_memory"].get<bool>());
  ASSERT_FALSE(j["groups"].empty());
  for (const char* key : {"devices", "layers", "ministages", "microbatches_per_device"})
    EXPECT_TRUE(j["groups"][0].contains(key)) << key;
  ASSERT_EQ(j["candidates"].size(), 7u);
  double best = 1e30, even = 0;
  for (const auto& c : j["candidates"]) {
    if (c["fits_memory"].get<bool>()) best = std::min(best, c["step_time_s"].get<double>());
    if (c["strategy"] == "deepspeed-even") even = c["step_time_s"].get<double>();
  }
  EXPECT_DOUBLE_EQ(j["step_time_s"].get<double>(), best);  // auto takes the fastest that fits
  EXPECT_GT(even / best, 1.5);                             // and beats the even split
  // The written plan runs unchanged in the simulator, with the predicted step time.
  CliRun sim = Motley("simulate --plan " + out + " --json", true);
  ASSERT_EQ(sim.exit_code, 0) << sim.output;
  EXPECT_NEAR(nlohmann::json::parse(sim.output)["step_time_s"].get<double>(), best, best * 1e-9);
  // One strategy, explained.
  CliRun zorse = Motley(base + " --strategy zorse --explain");
  EXPECT_EQ(zorse.exit_code, 0) << zorse.output;
  EXPECT_CONTAINS(zorse.output, "why: cut into");
  // What clipping costs the plan; planned without it, the plan says so and its schedule differs.
  EXPECT_CONTAINS(zorse.output,
                  "gradient clipping: on (with it every update waits for the global norm): step ");
  const std::string unclipped = out + ".unclipped.toml";
  CliRun off = Motley(base + " --strategy zorse --no-gradient-clipping --explain -o " + unclipped);
  EXPECT_EQ(off.exit_code, 0) << off.output;
  EXPECT_CONTAINS(off.output, "gradient clipping: off (--no-gradient-clipping)");
  motley::Result<std::string> written = motley::ReadFileToString(unclipped);
  ASSERT_TRUE(written.ok()) << off.output;
  EXPECT_CONTAINS(*written, "gradient_clipping = false");
  CliRun bad =
      Motley("plan --cluster local-emulated --model llama-1m --seq-len 128 --global-batch-tokens 4000");
  EXPECT_EQ(bad.exit_code, 2);
  EXPECT_CONTAINS(bad.output, "--global-batch-tokens (4000) is not a multiple of --seq-len (128)");
}

// #48: a sequence no device can run even one layer of says so — not "can step faster than inf s".
TEST(Cli, ASequenceNoDeviceCanHoldIsNamedNotAnInfiniteTime) {
  TempDir dir;
  const std::string model =
      dir.Write("long.toml", "base = \"llama-65b\"\nname = \"long65\"\nmax_seq_len = 16777216\n");
  CliRun r = Motley("plan --cluster local-emulated --model " + model +
                    " --seq-len 1048576 --global-batch-tokens 1048576 --strategy poplar");
  EXPECT_NE(r.exit_code, 0);
  EXPECT_CONTAINS(
      r.output, "no device here can hold one layer's backward for one sequence of 1048576 tokens of long65");
  EXPECT_EQ(r.output.find("inf s"), std::string::npos) << r.output;
}

TEST(Cli, DemoDescribesTheDefaultJob) {
  CliRun r = Motley("demo");
  EXPECT_EQ(r.exit_code, 0) << r.output;
  EXPECT_CONTAINS(r.output, "cluster local-emulated: 4 devices on 2 nodes");
  EXPECT_CONTAINS(r.output, "model llama-1m");
  EXPECT_CONTAINS(r.output, "chosen (auto):");
  CliRun j = Motley("demo --json", true);
  ASSERT_EQ(j.exit_code, 0);
  auto demo = nlohmann::json::parse(j.output);
  EXPECT_EQ(demo["global_batch_tokens"], 4096);
  EXPECT_GE(demo["simulated_plans"].size(), 5u);
  for (const auto& p : demo["simulated_plans"]) EXPECT_TRUE(p["fits_memory"].get<bool>()) << p["strategy"];
  EXPECT_GT(demo["speedup_over_even_split"].get<double>(), 1.5);
}

}  // namespace

// Meaningless numbers on the command line are refused with the flag and what it takes (not ignored,
// and `--shard-tokens 0` no longer writes empty shards forever).
TEST(Cli, NumericFlagsOutOfTheirRangeSayWhichAndWhy) {
  TempDir dir;
  const std::string text = dir.Write("t.txt", "hello world\n");
  const std::string out = dir.Join("data");
  struct Case {
    std::string args, message;
  };
  for (const Case& c :
       {Case{"data prepare --input " + text + " -o " + out + " --shard-tokens 0",
             "--shard-tokens: must be at least 1, got 0"},
        Case{"data prepare --input " + text + " -o " + out + " --shard-tokens -5",
             "--shard-tokens: must be at least 1, got -5"},
        Case{"data prepare --input " + text + " -o " + out + " --validation-fraction 2",
             "--validation-fraction: must be between 0 and 1, got 2"},
        Case{"launch --nproc 1 --stop-grace -1 -- true", "--stop-grace: must be at least 0, got -1"}}) {
    CliRun r = Motley(c.args);
    EXPECT_EQ(r.exit_code, 2) << c.args << "\n" << r.output;
    EXPECT_CONTAINS(r.output, c.message);
  }
  EXPECT_FALSE(std::filesystem::exists(out));  // nothing was written
}

// A global batch of 2^32 sequences (#28: the lowering ran out of memory in a worker thread and the
// process ended in "terminate called") is refused for the microbatches it would need per step.
TEST(Cli, AGlobalBatchTooLargeToRunIsRefusedNotCrashed) {
  CliRun r = Motley(
      "plan --cluster local-emulated --model llama-1m --seq-len 128 --global-batch-tokens 549755813888 "
      "--precision fp32");
  EXPECT_EQ(r.exit_code, 1) << r.output;
  EXPECT_CONTAINS(r.output, "more than motley runs in one step (65536");
  EXPECT_CONTAINS(r.output, "a smaller global batch");
  EXPECT_EQ(r.output.find("terminate called"), std::string::npos) << r.output;
}

// When no plan can be made, `motley plan` says why: a sequence longer than the model takes, at
// once; a model too big for every strategy, each strategy's reason.
TEST(Cli, PlanExplainsWhereItsTimeWentAndWhichDevicesItLeftOut) {
  // Eight A100s and twenty-four T4s on slow links for a small model: the T4s only slow it down.
  TempDir dir;
  const std::string cluster =
      dir.Write("mixed.toml",
                "[[nodes]]\nname = \"fast\"\ndevice = \"a100-40gb\"\ncount = 8\n"
                "interconnect = \"nvswitch\"\nnic_bandwidth = \"100Gbps\"\n"
                "[[nodes]]\nname = \"slow\"\nreplicas = 3\ndevice = \"t4\"\ncount = 8\n"
                "nic_bandwidth = \"10Gbps\"\n");
  const std::string base =
      "plan --cluster " + cluster + " --model llama-100m --seq-len 256 --global-batch-tokens 16384";
  CliRun r = Motley(base + " --explain --json", true);
  ASSERT_EQ(r.exit_code, 0) << r.output;
  auto j = nlohmann::json::parse(r.output);
  ASSERT_TRUE(j.contains("timing")) << r.output;
  EXPECT_GT(j["timing"]["plans_simulated"].get<int>(), 0);
  EXPECT_GT(j["timing"]["planning_s"].get<double>(), 0);
  ASSERT_EQ(j["timing"]["strategies"].size(), 7u);
  for (const auto& s : j["timing"]["strategies"]) {
    EXPECT_GE(s["total_s"].get<double>(), s["evaluate_s"].get<double>()) << s.dump();
    EXPECT_GE(s["device_subsets_planned"].get<int>() + s["device_subsets_skipped"].get<int>(),
              s["strategy"] == "zorse" || s["strategy"] == "poplar" ? 2 : 0)
        << s.dump();
  }
  ASSERT_FALSE(j["devices_left_out"].empty()) << r.output;
  EXPECT_EQ(j["devices_left_out"][0].get<int>(), 8);  // the first T4
  EXPECT_CONTAINS(j["explain"].get<std::string>(), "devices out (8 devices: without the t4 nodes)");
  CliRun text = Motley(base + " --explain", true);
  EXPECT_CONTAINS(text.output, "left out: 24 of the 32 devices, t4 x24 (nodes slow-0, slow-1, slow-2)");
  EXPECT_CONTAINS(text.output, "planning took ");
}

TEST(Cli, PlanningCommandsAnswerTheSameWhateverTheHeapSwitches) {
  // `plan`, `simulate` and `schedule` start themselves again with glibc's huge-page switch added to
  // GLIBC_TUNABLES (cli/main.cc) unless it is there: with it unset, beside another switch of the
  // user's, and with the user's own setting (no restart) they answer alike.
  const std::string args = "plan --cluster " + Example("clusters/zorse-a.toml") +
                           " --model llama-100m --seq-len 1024 --global-batch-tokens 262144 --json";
  std::vector<nlohmann::json> answers;
  for (const std::string env : {"env -u GLIBC_TUNABLES", "env GLIBC_TUNABLES=glibc.malloc.check=0",
                                "env GLIBC_TUNABLES=glibc.malloc.hugetlb=0"}) {
    CliRun r = RunCommandLine(env + " " + std::string(MOTLEY_BIN) + " " + args + " 2>&1");
    ASSERT_EQ(r.exit_code, 0) << env << "\n" << r.output;
    auto j = nlohmann::json::parse(r.output);
    answers.push_back({{"plan", j["plan"]}, {"step_time_s", j["step_time_s"]}});
  }
  EXPECT_EQ(answers[0], answers[1]);
  EXPECT_EQ(answers[0], answers[2]);
  CliRun schedule =
      RunCommandLine("env -u GLIBC_TUNABLES " + std::string(MOTLEY_BIN) + " schedule --help 2>&1");
  EXPECT_EQ(schedule.exit_code, 0) << schedule.output;
  EXPECT_CONTAINS(schedule.output, "Lower a plan to its schedule");
}

TEST(Cli, JsonInputsNestedTooDeepOrWithARepeatedKeyGetOneClearError) {
  TempDir dir;
  const std::string deep = dir.Write("deep.json", std::string(50000, '[') + std::string(50000, ']'));
  CliRun nested = Motley("simulate --plan " + deep);
  EXPECT_EQ(nested.exit_code, 1) << nested.output;
  EXPECT_CONTAINS(nested.output, "deep.json: error: nested more than 64 levels deep");
  const std::string twice =
      dir.Write("config.json", R"({"model_type": "llama", "hidden_size": 64, "hidden_size": 128})");
  CliRun repeated = Motley("describe --model " + twice);
  EXPECT_EQ(repeated.exit_code, 1) << repeated.output;
  EXPECT_CONTAINS(repeated.output, "config.json: error: key \"hidden_size\" appears twice in one object");
}

TEST(Cli, PlanSaysWhyNoStrategyFoundAPlan) {
  CliRun longer =
      Motley("plan --cluster local-emulated --model llama-1m --seq-len 4096 --global-batch-tokens 8192");
  EXPECT_EQ(longer.exit_code, 1) << longer.output;
  EXPECT_CONTAINS(longer.output, "--seq-len 4096 is longer than llama-1m's max_seq_len (256)");
  CliRun big =
      Motley("plan --cluster local-emulated --model llama-7b --seq-len 128 --global-batch-tokens 4096");
  EXPECT_EQ(big.exit_code, 1) << big.output;
  EXPECT_CONTAINS(big.output, "auto: no strategy found a plan that fits (zorse: ");
  EXPECT_CONTAINS(big.output, "; poplar: ");
}

namespace {
// precision = "auto" (#47): bf16 where every device type has it, else fp16 with loss scaling, and
// the plan says which and why.
TEST(Cli, AutoPrecisionIsBf16WhereEveryDeviceHasItElseFp16AndSaysWhy) {
  CliRun mixed = Motley(
      "plan --cluster zorse-b --model llama-7b --seq-len 1024 --global-batch-tokens 1048576 "
      "--precision auto --strategy deepspeed-even");
  ASSERT_EQ(mixed.exit_code, 0) << mixed.output;
  EXPECT_CONTAINS(mixed.output,
                  "precision: fp16 with dynamic loss scaling: v100-16gb, t4 cannot compute in bf16");
  CliRun modern = Motley(
      "plan --cluster poplar-a --model llama-7b --seq-len 1024 --global-batch-tokens 1048576 "
      "--precision auto --strategy deepspeed-even");
  ASSERT_EQ(modern.exit_code, 0) << modern.output;
  EXPECT_CONTAINS(modern.output, "precision: bf16: every device type computes in it");
  TempDir dir;
  CliRun job = Motley("validate " + dir.Write("auto.toml",
                                              "model = \"llama-1m\"\ncluster = \"zorse-b\"\n[training]\n"
                                              "seq_len = 128\nglobal_batch_sequences = 8\n"
                                              "precision = \"auto\"\n"));
  EXPECT_EQ(job.exit_code, 0) << job.output;
}
}  // namespace
