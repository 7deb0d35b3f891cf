// Live rebalancing, measured (#25): the default job on an emulated cluster of four equal devices,
// Poplar's plan, one rank slowed 3x from step 20 ([[emulation.stragglers]]). Three runs:
//   * rebalancing on ([straggler_detection] rebalance = true): the ranks re-plan and switch live;
//   * rebalancing off: the plan made for equal devices runs on;
//   * a plan made for the slowed cluster from the start (that device's speed factor 3x, Poplar's
//     plan for it, no injected straggler).
// Reported: the median step after the switch (from two steps after it) in each run, and the
// ratios — live against the plan made for the slowed cluster (the goal: within 15%), and against
// not rebalancing.
//
//   build/bench/rebalance_live [--steps N] [-o report.md]     (N >= 40; default 40)
#include <unistd.h>

#include <filesystem>
#include <fstream>
#include <iostream>
#include <regex>
#include <string>
#include <vector>

#include <fmt/format.h>
#include <nlohmann/json.hpp>

#include "bench_process.h"

namespace fs = std::filesystem;
using motley_bench::Median;
using motley_bench::Run;

namespace {

constexpr int kSlowRank = 1;
constexpr double kSlowdown = 3.0;
constexpr int kFromStep = 20;
constexpr double kSpeedFactor = 4.0;

std::string ClusterToml(double slowed_factor) {
  std::string s = R"toml(name = "four-equal"
[device_types.emu-cpu]
display_name = "emulated device (one CPU process)"
memory = "2GiB"
memory_bandwidth = "10GB/s"
fp16_flops = "50GFLOPS"
fp32_flops = "50GFLOPS"
host_link = "10GB/s"
source = "motley bench"
[[nodes]]
name = "a"
device = "emu-cpu"
count = 4
interconnect = "pcie"
intra_bandwidth = "10GB/s"
)toml";
  for (int d = 0; d < 4; ++d)
    s += fmt::format("[[nodes.emulation]]\nspeed_factor = {}\n",
                     d == kSlowRank ? slowed_factor : kSpeedFactor);
  return s;
}

struct Measured {
  std::vector<double> step_s;  // by step, from 1
  int switched_after = -1;     // the first switch's step
  std::string message;
};

Measured Train(const fs::path& dir, const std::string& job, const std::string& plan, int steps) {
  const std::string cd = "cd '" + dir.string() + "' && ";
  const std::string motley = MOTLEY_BIN;
  const std::string metrics = job + ".jsonl";
  int code = 0;
  const std::string out = Run(cd + motley + " launch --nproc 4 -- " + motley + " train " + job + " --plan " +
                                  plan + " --profile profile.json --steps " + std::to_string(steps) +
                                  " --no-checkpoint --no-validation --metrics " + metrics,
                              &code);
  Measured m;
  if (code != 0) {
    std::cerr << job << " failed:\n" << out;
    return m;
  }
  for (const auto& j : motley_bench::ReadJsonLines((dir / metrics).string())) {
    if (j.contains("step_time_s")) m.step_s.push_back(j["step_time_s"].get<double>());
    if (j.value("event", "") == "rebalance" && j.value("switched", false) && m.switched_after < 0) {
      m.switched_after = j["step"].get<int>();
      m.message = j.value("message", "");
    }
  }
  return m;
}

double MedianFrom(const Measured& m, int first_step) {
  std::vector<double> v;
  for (size_t i = static_cast<size_t>(std::max(first_step, 1) - 1); i < m.step_s.size(); ++i)
    v.push_back(m.step_s[i]);
  return Median(v);
}

}  // namespace

int main(int argc, char** argv) {
  motley_bench::BenchArgs args;
  args.steps = 40;
  if (!motley_bench::ParseBenchArgs(argc, argv, "rebalance_live", &args)) return 2;
  const int steps = std::max(args.steps, 30);
  const std::string motley = MOTLEY_BIN;
  const fs::path dir = motley_bench::MakeWorkDir("motley_bench_rebalance");
  const std::string cd = "cd '" + dir.string() + "' && ";
  int code = 0;

  std::ofstream(dir / "cluster.toml") << ClusterToml(kSpeedFactor);
  std::ofstream(dir / "slowed.toml") << ClusterToml(kSpeedFactor * kSlowdown);
  std::string job =
      motley_bench::ReadFile((fs::path(MOTLEY_SOURCE_DIR) / "examples/jobs/default.toml").string());
  job = std::regex_replace(job, std::regex("strategy = \"auto\""), "strategy = \"poplar\"");
  const std::string straggler =
      fmt::format("[[emulation.stragglers]]\nrank = {}\nslowdown = {}\nfrom_step = {}\n", kSlowRank,
                  kSlowdown, kFromStep);
  auto write_job = [&](const std::string& name, const std::string& cluster, const std::string& extra) {
    std::ofstream(dir / name) << std::regex_replace(job, std::regex("cluster = \"local-emulated\""),
                                                    "cluster = \"" + cluster + "\"")
                              << extra;
  };
  write_job("live.toml", "cluster.toml", "\n[straggler_detection]\nrebalance = true\n" + straggler);
  write_job("off.toml", "cluster.toml", "\n" + straggler);
  write_job("slowed.job.toml", "slowed.toml", "");

  std::string out = Run(cd + motley +
                            " profile --cluster cluster.toml --model llama-1m --seq-len 128 --precision fp32 "
                            "--max-microbatch 32 -o profile.json",
                        &code);
  if (code != 0) {
    std::cerr << out;
    return 1;
  }
  const std::string plan_args =
      " --profile profile.json --model llama-1m --seq-len 128 --global-batch-tokens 4096 "
      "--precision fp32 --strategy poplar ";
  Run(cd + motley + " plan --cluster cluster.toml" + plan_args + "-o equal.plan.toml", &code);
  if (code != 0) return 1;
  Run(cd + motley + " plan --cluster slowed.toml" + plan_args + "-o slowed.plan.toml", &code);
  if (code != 0) return 1;

  const Measured live = Train(dir, "live.toml", "equal.plan.toml", steps);
  const Measured off = Train(dir, "off.toml", "equal.plan.toml", steps);
  const Measured planned = Train(dir, "slowed.job.toml", "slowed.plan.toml", steps);
  if (live.step_s.empty() || off.step_s.empty() || planned.step_s.empty()) return 1;
  const int from = live.switched_after > 0 ? live.switched_after + 3 : kFromStep + 10;
  const std::vector<double> early(
      live.step_s.begin() + 2,
      live.step_s.begin() + std::min<std::ptrdiff_t>(kFromStep - 1, std::ssize(live.step_s)));
  const double before = Median(early);
  const double l = MedianFrom(live, from), o = MedianFrom(off, from), p = MedianFrom(planned, from);
  std::smatch alloc;
  const std::string slowed_plan = motley_bench::ReadFile((dir / "slowed.plan.toml").string());
  std::regex_search(slowed_plan, alloc, std::regex("microbatch_size = \\[([^\\]]*)\\]"));
  const std::string md = fmt::format(
      "# Live rebalancing, measured\n\n`build/bench/rebalance_live --steps {}`: the default job (llama-1m, "
      "32 x 128 "
      "tokens a step, fp32) on four equal emulated devices (speed factor {}), Poplar's plan, rank {} slowed "
      "{}x from "
      "step {}. Median measured step from step {} (three steps after the switch) to {}.\n\n"
      "| run | median step | vs the plan for the slowed cluster |\n|---|---|---|\n"
      "| before the straggler (steps 3..{}) | {:.0f} ms | |\n"
      "| rebalancing live (switched after step {}) | {:.0f} ms | **{:.2f}x** |\n"
      "| not rebalancing | {:.0f} ms | {:.2f}x |\n"
      "| planned for the slowed cluster from the start (microbatches [{}]) | {:.0f} ms | 1 |\n\n"
      "Live against not rebalancing: **{:.2f}x** the step time. The switch: {}\n",
      steps, kSpeedFactor, kSlowRank, kSlowdown, kFromStep, from, steps, kFromStep - 1, before * 1e3,
      live.switched_after, l * 1e3, p > 0 ? l / p : 0, o * 1e3, p > 0 ? o / p : 0,
      alloc.size() > 1 ? alloc[1].str() : "?", p * 1e3, o > 0 ? l / o : 0, live.message);
  std::cout << md;
  if (!args.report_path.empty()) std::ofstream(args.report_path) << md;
  fs::remove_all(dir);
  return 0;
}
