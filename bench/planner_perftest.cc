// How long `motley plan` takes, whole process, on clusters from 20 to 1,024 GPUs (issue goals:
// 128 GPUs <= 1 s and 1,024 GPUs <= 5 s with --strategy auto), and whether the planner is
// monotone in resources: Zorse's cluster C and C x2, x4, x8 (every class of node repeated) must
// get non-increasing simulated steps. Llama-13B, 1M-token batches of 2,048-token sequences; with
// --profile, the published per-layer latencies (../shared/data/zorse-measured), else the roofline.
//
//   planner_perftest [--profile model_latencies.json] [--rounds N] [-o report.md]
#include <chrono>
#include <cstdio>
#include <fstream>
#include <regex>
#include <string>
#include <vector>

#include <fmt/format.h>
#include <nlohmann/json.hpp>

#include "bench_process.h"

namespace {

using motley_bench::Median;
using motley_bench::Run;

struct Measured {
  double wall_s = 0;  // median over rounds
  double step_s = 0;  // the chosen plan's simulated step
  int devices_used = 0;
  int left_out = 0;
  std::string strategy;
};

Measured Plan(const std::string& cluster, const std::string& strategy, const std::string& profile,
              int rounds) {
  const std::string cmd = fmt::format(
      "{} plan --cluster '{}' --model llama-13b --seq-len 2048 --global-batch-tokens 1048576 --strategy {} "
      "--json{}",
      MOTLEY_BIN, cluster, strategy, profile.empty() ? "" : " --profile '" + profile + "'");
  std::vector<double> walls;
  Measured m;
  for (int r = 0; r < rounds; ++r) {
    int code = 0;
    const auto start = std::chrono::steady_clock::now();
    const std::string out = Run(cmd, &code);
    walls.push_back(std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count());
    const auto j = nlohmann::json::parse(out, nullptr, false);
    if (code != 0 || j.is_discarded()) {
      std::fprintf(stderr, "planner_perftest: %s failed (%d): %s\n", cmd.c_str(), code, out.c_str());
      continue;
    }
    m.step_s = j["step_time_s"].get<double>();
    m.strategy = j["strategy"].get<std::string>();
    m.left_out = static_cast<int>(j["devices_left_out"].size());
    m.devices_used = 0;
    for (const auto& g : j["groups"]) m.devices_used += static_cast<int>(g["devices"].size());
  }
  m.wall_s = Median(walls);
  return m;
}

// Zorse's cluster C with every `replicas` count multiplied.
std::string Scaled(const std::filesystem::path& dir, int times) {
  const std::string text =
      motley_bench::ReadFile(std::string(MOTLEY_SOURCE_DIR) + "/examples/clusters/zorse-c.toml");
  std::string out;
  std::smatch m;
  std::string rest = text;
  const std::regex replicas("replicas = ([0-9]+)");
  while (std::regex_search(rest, m, replicas)) {
    out += m.prefix().str() + fmt::format("replicas = {}", std::stoi(m[1].str()) * times);
    rest = m.suffix().str();
  }
  out += rest;
  const std::string path = (dir / fmt::format("zorse-c-x{}.toml", times)).string();
  std::ofstream(path) << out;
  return path;
}

// 1,024 GPUs of six types in four regions, 8 a node.
std::string Synthetic1024(const std::filesystem::path& dir) {
  const char* types[] = {"h100-sxm", "a100-80gb", "a100-40gb", "v100-32gb", "a10g", "t4"};
  std::string text = "[network]\ninter_region_bandwidth = \"10Gbps\"\n";
  for (int n = 0; n < 128; ++n)
    text += fmt::format(
        "[[nodes]]\nname = \"n{}\"\ndevice = \"{}\"\ncount = 8\nnic_bandwidth = \"{}Gbps\"\nregion = "
        "\"r{}\"\n",
        n, types[n % 6], 25 * (1 + n % 4), n % 4);
  const std::string path = (dir / "synthetic-1024.toml").string();
  std::ofstream(path) << text;
  return path;
}

}  // namespace

int main(int argc, char** argv) {
  std::string profile, report_path;
  int rounds = 3;
  for (int i = 1; i < argc; ++i) {
    const std::string a = argv[i];
    if (a == "--profile" && i + 1 < argc) {
      profile = argv[++i];
    } else if (a == "--rounds" && i + 1 < argc) {
      rounds = std::max(1, std::stoi(argv[++i]));
    } else if (a == "-o" && i + 1 < argc) {
      report_path = argv[++i];
    } else {
      std::fprintf(stderr, "usage: %s [--profile model_latencies.json] [--rounds N] [-o report.md]\n",
                   argv[0]);
      return 2;
    }
  }
  const auto dir = motley_bench::MakeWorkDir("planner_perftest");
  struct Case {
    std::string name, cluster;
    int gpus;
  };
  const std::vector<Case> cases = {{"A", "zorse-a", 20},
                                   {"B", "zorse-b", 64},
                                   {"C", Scaled(dir, 1), 128},
                                   {"C x2", Scaled(dir, 2), 256},
                                   {"C x4", Scaled(dir, 4), 512},
                                   {"C x8", Scaled(dir, 8), 1024},
                                   {"synthetic, 6 types, 4 regions", Synthetic1024(dir), 1024}};
  std::string table = fmt::format(
      "| cluster | GPUs | strategy zorse | auto | auto's plan | simulated step | devices left out |\n"
      "|---|---|---|---|---|---|---|\n");
  std::vector<double> chain;  // auto's step on C, C x2, C x4, C x8
  std::vector<std::string> chain_text;
  for (const auto& c : cases) {
    const Measured z = Plan(c.cluster, "zorse", profile, rounds);
    const Measured a = Plan(c.cluster, "auto", profile, rounds);
    table += fmt::format("| {} | {} | {:.2f} s | {:.2f} s | {} | {:.2f} s | {} |\n", c.name, c.gpus, z.wall_s,
                         a.wall_s, a.strategy, a.step_s, a.left_out);
    if (c.name.starts_with("C")) {
      chain.push_back(a.step_s);
      chain_text.push_back(fmt::format("{:.2f} s", a.step_s));
    }
    std::fflush(stdout);
  }
  bool monotone = true;
  for (size_t i = 1; i < chain.size(); ++i) monotone = monotone && chain[i] <= chain[i - 1] * (1 + 1e-9);
  const std::string text = fmt::format(
      "`motley plan`, whole process, median of {} runs; Llama-13B, 1M tokens of 2,048; {}.\n\n{}\n"
      "C, C x2, C x4, C x8 (auto): simulated steps {}: {}\n",
      rounds, profile.empty() ? "roofline compute" : "the published per-layer latencies", table,
      fmt::join(chain_text, ", "), monotone ? "non-increasing" : "NOT non-increasing");
  std::fputs(text.c_str(), stdout);
  if (!report_path.empty()) std::ofstream(report_path) << text;
  std::filesystem::remove_all(dir);
  return monotone ? 0 : 1;
}
