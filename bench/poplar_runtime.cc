// Poplar's data parallelism, measured: on three emulated clusters shaped like Poplar's evaluation
// (equal speed and unequal memory; unequal speed and equal memory; both unequal), the default job
// trained for a few steps at every ZeRO stage under Poplar's allocation (`motley plan --strategy
// poplar`, with the measured profile) and under the same batch on every device (DeepSpeed-style),
// with the throughput ratio and the simulator's prediction beside each measurement.
//
//   build/bench/poplar_runtime [--steps N] [-o report.md]
#include <unistd.h>

#include <filesystem>
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

struct ClusterCase {
  std::string name, description;
  std::vector<double> speed;        // per device
  std::vector<std::string> memory;  // per device
};

std::string ClusterToml(const ClusterCase& c) {
  std::string s = fmt::format(R"toml(name = "{}"
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
count = {}
interconnect = "pcie"
intra_bandwidth = "10GB/s"
)toml",
                              c.name, c.speed.size());
  for (size_t i = 0; i < c.speed.size(); ++i)
    s += fmt::format("[[nodes.emulation]]\nspeed_factor = {}\nmemory = \"{}\"\n", c.speed[i], c.memory[i]);
  return s;
}

std::string WithStage(std::string plan, int stage) {
  return std::regex_replace(plan, std::regex("zero_stage = \\d"), fmt::format("zero_stage = {}", stage));
}

}  // namespace

int main(int argc, char** argv) {
  motley_bench::BenchArgs args;
  args.steps = 8;
  if (!motley_bench::ParseBenchArgs(argc, argv, "poplar_runtime", &args)) return 2;
  const int steps = args.steps;
  const std::string report_path = args.report_path;
  const std::string motley = MOTLEY_BIN;
  const fs::path dir = motley_bench::MakeWorkDir("motley_bench_poplar");
  const std::string cd = "cd '" + dir.string() + "' && ";
  const std::vector<ClusterCase> clusters = {
      {"equal-speed",
       "equal speed, unequal memory (2 GiB, 2 GiB, 256 MiB, 256 MiB)",
       {2, 2, 2, 2},
       {"2GiB", "2GiB", "256MiB", "256MiB"}},
      {"unequal-speed",
       "unequal speed (factors 2, 2, 6, 6), equal memory",
       {2, 2, 6, 6},
       {"1GiB", "1GiB", "1GiB", "1GiB"}},
      {"both-unequal",
       "both unequal (factors 2, 3, 4, 6; 2 GiB .. 256 MiB)",
       {2, 3, 4, 6},
       {"2GiB", "1GiB", "512MiB", "256MiB"}},
  };
  std::string table =
      "| cluster | ZeRO | Poplar allocation | measured step | same batch everywhere | measured step | "
      "speed-up | "
      "simulated (Poplar / same) |\n|---|---|---|---|---|---|---|---|\n";
  int code = 0;
  for (const ClusterCase& c : clusters) {
    std::ofstream(dir / "cluster.toml") << ClusterToml(c);
    std::string job =
        motley_bench::ReadFile((fs::path(MOTLEY_SOURCE_DIR) / "examples/jobs/default.toml").string());
    job = std::regex_replace(job, std::regex("cluster = \"local-emulated\""), "cluster = \"cluster.toml\"");
    std::ofstream(dir / "job.toml") << job;
    std::string out = Run(cd + motley +
                              " profile --cluster cluster.toml --model llama-1m --seq-len 128 "
                              "--precision fp32 --max-microbatch 32 -o profile.json",
                          &code);
    if (code != 0) {
      std::cerr << out;
      return 1;
    }
    const std::string args =
        " --profile profile.json --cluster cluster.toml --model llama-1m --seq-len 128 "
        "--global-batch-tokens 4096 --precision fp32 ";
    Run(cd + motley + " plan" + args + "--strategy poplar -o poplar.toml", &code);
    if (code != 0) return 1;
    Run(cd + motley + " plan" + args + "--strategy deepspeed-even -o even.toml", &code);
    if (code != 0) return 1;
    const std::string poplar = motley_bench::ReadFile((dir / "poplar.toml").string());
    const std::string even = motley_bench::ReadFile((dir / "even.toml").string());
    std::smatch alloc;
    std::regex_search(poplar, alloc, std::regex("microbatch_size = \\[([^\\]]*)\\]"));
    for (int stage = 0; stage <= 3; ++stage) {
      double measured[2] = {0, 0}, simulated[2] = {0, 0};
      const std::string plans[2] = {WithStage(poplar, stage), WithStage(even, stage)};
      for (int k = 0; k < 2; ++k) {
        const std::string name = fmt::format("plan{}-{}.toml", k, stage);
        std::ofstream(dir / name) << plans[k];
        const std::string metrics = name + ".jsonl";
        out = Run(cd + motley + " launch --nproc " + std::to_string(c.speed.size()) + " -- " + motley +
                      " train job.toml --plan " + name + " --steps " + std::to_string(steps) +
                      " --no-checkpoint --no-validation --metrics " + metrics,
                  &code);
        if (code != 0) {
          std::cerr << c.name << " ZeRO-" << stage << " failed:\n" << out;
          continue;
        }
        std::vector<double> times;
        for (const auto& j : motley_bench::ReadJsonLines((dir / metrics).string()))
          if (j.contains("step_time_s") && j["step"].get<int>() > 2) times.push_back(j["step_time_s"]);
        measured[k] = Median(times);
        const std::string sim =
            Run(cd + motley + " simulate --profile profile.json --plan " + name + " --json", &code);
        try {
          simulated[k] = nlohmann::json::parse(sim.substr(sim.find('{')))["step_time_s"];
        } catch (...) {
        }
      }
      table += fmt::format(
          "| {} | {} | [{}] | {:.0f} ms | [8, 8, 8, 8] | {:.0f} ms | **{:.2f}x** | {:.0f} / {:.0f} ms |\n",
          c.description, stage, alloc.size() > 1 ? alloc[1].str() : "?", measured[0] * 1e3, measured[1] * 1e3,
          measured[0] > 0 ? measured[1] / measured[0] : 0, simulated[0] * 1e3, simulated[1] * 1e3);
    }
  }
  const std::string md = fmt::format(
      "# Poplar's data parallelism, measured\n\n`build/bench/poplar_runtime --steps {}`: the default job "
      "(llama-1m, "
      "32 x 128 tokens a step, fp32) on three emulated 4-device clusters, at every ZeRO stage: Poplar's "
      "allocation "
      "(`motley plan --strategy poplar` with the measured profile; sequences per device shown) against the "
      "same "
      "8 sequences on every device. Median measured step over steps 3..{}; the simulator's prediction for "
      "both.\n\n{}",
      steps, steps, table);
  std::cout << md;
  if (!report_path.empty()) std::ofstream(report_path) << md;
  fs::remove_all(dir);
  return 0;
}
