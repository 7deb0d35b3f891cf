// Emulated heterogeneity, measured: the default job (llama-1m, 32 x 128 tokens a step, fp32) on
// the local emulated cluster — 4 ranks, two of them 3x slower with half the memory, the two pairs
// joined by a 1 Gbit/s link — trained for a few steps under each plan by `motley launch`. Reports
// the measured median step time of motley's plan (`motley plan`, strategy auto) against even-split
// data parallelism (DeepSpeed-style) and a symmetric pipeline (two stages of two devices, two
// layers each), the ratios, and the simulator's prediction for each plan beside the measurement.
//
//   build/bench/runtime_heterogeneity [--steps N] [-o report.md]
//
// The ranks are processes on this machine and share its cores; local-emulated's speed factors (2
// and 6, relative to this machine) keep their demand near 1.3 cores. motley's plan is made with the
// measured profile (`motley profile`), as `motley train` makes it.
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <cstdio>
#include <filesystem>
#include <fstream>
#include <iostream>
#include <sstream>
#include <string>
#include <vector>

#include <fmt/format.h>
#include <nlohmann/json.hpp>

#include "bench_process.h"

namespace fs = std::filesystem;
using motley_bench::Median;
using motley_bench::Run;

namespace {

constexpr char kSymmetricPipeline[] =
    R"(# Two stages of two devices each, two layers each: symmetric in layers and devices.
strategy = "manual"
model = "llama-1m"
cluster = "local-emulated"
seq_len = 128
precision = "fp32"
schedule = "gpipe"
zero_stage = 2
[[groups]]
ministages = [[0, 2]]
devices = [0, 1]
microbatch_size = [4, 4]
num_microbatches = [4, 4]
[[groups]]
ministages = [[2, 4]]
devices = [2, 3]
microbatch_size = [4, 4]
num_microbatches = [4, 4]
)";

struct Row {
  std::string name, plan;
  double measured_s = 0, simulated_s = 0;
  std::vector<double> compute_s;  // per rank, median step
};

}  // namespace

int main(int argc, char** argv) {
  motley_bench::BenchArgs args;
  args.steps = 12;
  if (!motley_bench::ParseBenchArgs(argc, argv, "runtime_heterogeneity", &args)) return 2;
  const int steps = args.steps;
  const std::string report_path = args.report_path;
  const std::string motley = MOTLEY_BIN;
  const fs::path dir = motley_bench::MakeWorkDir("motley_bench_het");
  const std::string cd = "cd '" + dir.string() + "' && ";
  int code = 0;
  std::ofstream(dir / "job.toml") << motley_bench::ReadFile(
      (fs::path(MOTLEY_SOURCE_DIR) / "examples/jobs/default.toml").string());
  std::string out;
  Run(cd + motley +
          " profile --cluster local-emulated --model llama-1m --seq-len 128 --precision fp32 "
          "--max-microbatch 32 -o profile.json",
      &code);
  if (code != 0) return 1;
  const std::string plan_args =
      "--profile profile.json --cluster local-emulated --model llama-1m --seq-len 128 --global-batch-tokens "
      "4096 "
      "--precision fp32";
  Run(cd + motley + " plan " + plan_args + " -o motley.toml", &code);
  if (code != 0) return 1;
  Run(cd + motley + " plan " + plan_args + " --strategy deepspeed-even -o even.toml", &code);
  if (code != 0) return 1;
  std::ofstream(dir / "symmetric.toml") << kSymmetricPipeline;

  std::vector<Row> rows = {{"motley plan (auto)", "motley.toml", 0, 0, {}},
                           {"even-split data parallelism", "even.toml", 0, 0, {}},
                           {"symmetric pipeline", "symmetric.toml", 0, 0, {}}};
  for (Row& row : rows) {
    const std::string metrics = row.plan + ".jsonl";
    out =
        Run(cd + motley + " launch --nproc 4 -- " + motley + " train job.toml --plan " + row.plan +
                " --steps " + std::to_string(steps) + " --no-checkpoint --no-validation --metrics " + metrics,
            &code);
    if (code != 0) {
      std::cerr << row.name << " failed:\n" << out;
      return 1;
    }
    std::vector<double> times;
    std::vector<std::vector<double>> compute(4);
    std::ifstream in(dir / metrics);
    for (std::string line; std::getline(in, line);) {
      const auto j = nlohmann::json::parse(line);
      if (!j.contains("step_time_s") || j["step"].get<int>() <= 2) continue;  // warm-up
      times.push_back(j["step_time_s"]);
      for (int k = 0; k < 4; ++k) compute[k].push_back(j["ranks"][k]["compute_s"]);
    }
    row.measured_s = Median(times);
    for (auto& c : compute) row.compute_s.push_back(Median(c) * 1e3);
    const std::string sim =
        Run(cd + motley + " simulate --profile profile.json --plan " + row.plan + " --json", &code);
    try {
      row.simulated_s = nlohmann::json::parse(sim.substr(sim.find('{')))["step_time_s"];
    } catch (...) {
      row.simulated_s = 0;
    }
  }

  std::string md = fmt::format(
      "# Emulated heterogeneity, measured\n\n`build/bench/runtime_heterogeneity --steps {}`: the default job "
      "(llama-1m, 32 x 128 tokens a step, fp32) on `local-emulated` — 4 ranks; ranks 2 and 3 are 3x slower "
      "than ranks 0 "
      "and 1 (speed factors 6 and 2) with half the memory; the two pairs are joined by a 1 Gbit/s link. "
      "Median step time over steps 3..{} as measured by the "
      "runtime, and the simulator's prediction for the same plan with the measured profile.\n\n"
      "| plan | measured step | vs even split | simulated step | compute per rank (ms, median) |\n"
      "|---|---|---|---|---|\n",
      steps, steps);
  const double even = rows[1].measured_s;
  for (const Row& r : rows)
    md += fmt::format("| {} | {:.0f} ms | {:.2f}x | {:.0f} ms | {:.0f} |\n", r.name, r.measured_s * 1e3,
                      even / r.measured_s, r.simulated_s * 1e3, fmt::join(r.compute_s, " / "));
  std::cout << md;
  if (!report_path.empty()) std::ofstream(report_path) << md;
  fs::remove_all(dir);
  return 0;
}
