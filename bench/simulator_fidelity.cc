// Is the simulator right? For plans of every kind on the emulated local cluster — each strategy's
// plan for the default job, plus hand-made pipelines with offload and ZeRO-3 — train a few steps
// for real (`motley launch`) and compare the measured step time and peak memory per rank with the
// simulator's prediction from the measured profile (`motley profile`). Reports each plan's error,
// the median error, whether any plan predicted to fit ran out of memory, and Kendall's tau between
// the measured and predicted orders. Then online profiling: the profile calibrated on one plan's
// run (`motley calibrate` with the even split's metrics: the baseline a user runs first) predicts
// the other plans again. With --rounds R every plan is trained R times, round by round (so that
// a machine whose speed drifts slows every plan alike): its measured step is the median of the
// rounds' medians, and the calibration pools the even split's R runs.
//
//   build/bench/simulator_fidelity [--steps N] [--rounds R] [-o report.md]
#include <unistd.h>

#include <algorithm>
#include <cmath>
#include <filesystem>
#include <iostream>
#include <string>
#include <vector>

#include <fmt/format.h>
#include <nlohmann/json.hpp>

#include "bench_process.h"

namespace fs = std::filesystem;
using motley_bench::Median;
using motley_bench::Run;

namespace {

constexpr char kHeader[] =
    "model = \"llama-1m\"\ncluster = \"local-emulated\"\nseq_len = 128\nprecision = \"fp32\"\n";

// Hand-made plans the planners would not choose, to cover offload, ZeRO-3, 1F1B (one and two devices
// per stage), tensor parallelism and a pipeline at ZeRO-3. Every plan clips gradients (the default).
const std::vector<std::pair<std::string, std::string>> kHandPlans = {
    {"zorse-offload", R"(schedule = "interleaved"
zero_stage = 2
offload_params = true
offload_activations = true
[[groups]]
ministages = [[0, 2], [3, 4]]
devices = [0, 1]
microbatch_size = [4, 4]
num_microbatches = [4, 4]
[[groups]]
ministages = [[2, 3]]
devices = [2, 3]
microbatch_size = [4, 4]
num_microbatches = [4, 4]
)"},
    {"dp-zero3-uneven", R"(zero_stage = 3
[[groups]]
ministages = [[0, 2], [2, 4]]
devices = [0, 1, 2, 3]
microbatch_size = [12, 12, 4, 4]
num_microbatches = [1, 1, 1, 1]
)"},
    {"1f1b-4-stages", R"(schedule = "1f1b"
zero_stage = 2
[[groups]]
ministages = [[0, 1]]
devices = [0]
microbatch_size = [4]
num_microbatches = [8]
[[groups]]
ministages = [[1, 2]]
devices = [1]
microbatch_size = [4]
num_microbatches = [8]
[[groups]]
ministages = [[2, 3]]
devices = [2]
microbatch_size = [4]
num_microbatches = [8]
[[groups]]
ministages = [[3, 4]]
devices = [3]
microbatch_size = [4]
num_microbatches = [8]
)"},
    {"1f1b-2x2", R"(schedule = "1f1b"
zero_stage = 2
[[groups]]
ministages = [[0, 2]]
devices = [0, 2]
microbatch_size = [4, 4]
num_microbatches = [6, 2]
[[groups]]
ministages = [[2, 4]]
devices = [1, 3]
microbatch_size = [4, 4]
num_microbatches = [6, 2]
)"},
    {"tp2-dp2", R"(zero_stage = 1
[[groups]]
ministages = [[0, 4]]
devices = [0, 1, 2, 3]
tp_degree = 2
microbatch_size = [4, 4, 4, 4]
num_microbatches = [4, 4, 4, 4]
)"},
    {"gpipe-zero3", R"(schedule = "gpipe"
zero_stage = 3
[[groups]]
ministages = [[0, 1], [1, 2]]
devices = [0, 2]
microbatch_size = [4, 4]
num_microbatches = [6, 2]
[[groups]]
ministages = [[2, 4]]
devices = [1, 3]
microbatch_size = [4, 4]
num_microbatches = [6, 2]
)"},
};

struct Row {
  std::string name;
  int ranks = 0;
  double measured_s = 0, simulated_s = 0, calibrated_s = 0;
  std::vector<double> round_s;                   // each round's median step
  double measured_peak = 0, simulated_peak = 0;  // the largest rank's, bytes
  bool sim_fits = true, ran = true;
  std::string note;
};

double KendallTau(const std::vector<double>& a, const std::vector<double>& b) {
  int concordant = 0, discordant = 0;
  for (size_t i = 0; i < a.size(); ++i)
    for (size_t j = i + 1; j < a.size(); ++j) {
      const double s = (a[i] - a[j]) * (b[i] - b[j]);
      if (s > 0) ++concordant;
      if (s < 0) ++discordant;
    }
  const int n = concordant + discordant;
  return n > 0 ? static_cast<double>(concordant - discordant) / n : 0;
}

}  // namespace

int main(int argc, char** argv) {
  motley_bench::BenchArgs args;
  args.steps = 8;
  args.rounds = 3;
  if (!motley_bench::ParseBenchArgs(argc, argv, "simulator_fidelity", &args)) return 2;
  const int steps = args.steps, rounds = args.rounds;
  const std::string report_path = args.report_path;
  const std::string motley = MOTLEY_BIN;
  const fs::path dir = motley_bench::MakeWorkDir("motley_bench_fidelity");
  const std::string cd = "cd '" + dir.string() + "' && ";
  int code = 0;
  std::ofstream(dir / "job.toml") << motley_bench::ReadFile(
      (fs::path(MOTLEY_SOURCE_DIR) / "examples/jobs/default.toml").string());
  std::string out =
      Run(cd + motley +
              " profile --cluster local-emulated --model llama-1m --seq-len 128 --precision fp32 "
              "--max-microbatch 32 --links -o profile.json",
          &code);
  if (code != 0) {
    std::cerr << out;
    return 1;
  }
  // The plans: every strategy's, then the hand-made ones.
  std::vector<std::string> names;
  for (const char* s :
       {"zorse", "poplar", "deepspeed-even", "cephalo", "hexiscale", "torchtitan-het", "fastest-only"}) {
    Run(cd + motley +
            " plan --profile profile.json --cluster local-emulated --model llama-1m --seq-len 128 "
            "--global-batch-tokens 4096 --precision fp32 --strategy " +
            s + " -o " + s + ".toml",
        &code);
    if (code == 0) names.push_back(s);
  }
  for (const auto& [name, body] : kHandPlans) {
    std::ofstream(dir / (name + ".toml")) << kHeader << body;
    names.push_back(name);
  }

  std::vector<Row> rows;
  for (const std::string& name : names) {
    Row row;
    row.name = name;
    const std::string sim =
        Run(cd + motley + " simulate --profile profile.json --plan " + name + ".toml --json", &code);
    try {
      const auto j = nlohmann::json::parse(sim.substr(sim.find('{')));
      row.simulated_s = j["step_time_s"];
      row.sim_fits = j.value("fits_memory", true);
      row.ranks = static_cast<int>(j["devices"].size());
      for (const auto& d : j["devices"])
        row.simulated_peak = std::max(row.simulated_peak, d["peak_memory_bytes"].get<double>());
    } catch (...) {
      row.note = "simulation failed";
    }
    rows.push_back(row);
  }
  auto metrics_of = [](const std::string& name, int round) {
    return fmt::format("{}.{}.jsonl", name, round);
  };
  for (int round = 0; round < rounds; ++round) {
    for (Row& row : rows) {
      if (!row.note.empty()) continue;  // did not simulate, or failed in an earlier round
      const std::string metrics = metrics_of(row.name, round);
      out = Run(cd + motley + " launch --nproc " + std::to_string(row.ranks) + " -- " + motley +
                    " train job.toml --plan " + row.name + ".toml --steps " + std::to_string(steps) +
                    " --no-checkpoint --no-validation --metrics " + metrics,
                &code);
      if (code != 0) {
        row.ran = false;
        row.note = out.find("out of memory") != std::string::npos ? "ran out of memory" : "failed";
        continue;
      }
      std::vector<double> times;
      for (const auto& j : motley_bench::ReadJsonLines((dir / metrics).string())) {
        if (!j.contains("step_time_s") || j["step"].get<int>() <= 2) continue;
        times.push_back(j["step_time_s"]);
        for (const auto& r : j["ranks"])
          row.measured_peak = std::max(row.measured_peak, r["peak_memory_bytes"].get<double>());
      }
      row.round_s.push_back(Median(times));
    }
  }
  for (Row& row : rows)
    if (row.ran && !row.round_s.empty()) row.measured_s = Median(row.round_s);

  // Online profiling: the profile calibrated on the even split's run predicts every plan again.
  const std::string calibration_plan = "deepspeed-even";
  std::string calibration_runs;
  for (int round = 0; round < rounds; ++round)
    calibration_runs += " --metrics " + metrics_of(calibration_plan, round);
  std::string calibration = Run(cd + motley + " calibrate --profile profile.json --plan " + calibration_plan +
                                    ".toml" + calibration_runs + " -o calibrated.json",
                                &code);
  const bool calibrated = code == 0;
  if (!calibrated) std::cerr << "calibration failed:\n" << calibration;
  for (Row& row : rows) {
    if (!calibrated || row.measured_s <= 0) continue;
    const std::string sim =
        Run(cd + motley + " simulate --profile calibrated.json --plan " + row.name + ".toml --json", &code);
    if (code == 0) row.calibrated_s = nlohmann::json::parse(sim.substr(sim.find('{')))["step_time_s"];
  }

  std::vector<double> errors, measured, simulated, calibrated_errors, calibrated_simulated,
      calibrated_measured;
  bool surprise_oom = false;
  std::string table =
      "| plan | ranks | measured step | rounds (min-max) | simulated step | error | calibrated simulation | "
      "error | "
      "measured peak (largest rank) | simulated peak |\n"
      "|---|---|---|---|---|---|---|---|---|---|\n";
  for (const Row& r : rows) {
    if (!r.ran && r.sim_fits) surprise_oom = surprise_oom || r.note == "ran out of memory";
    if (r.measured_s <= 0) {
      table += fmt::format("| {} | {} | {} | — | {:.0f} ms | — | — | — | — | {:.1f} MiB |\n", r.name, r.ranks,
                           r.note, r.simulated_s * 1e3, r.simulated_peak / (1 << 20));
      continue;
    }
    const double err = (r.simulated_s - r.measured_s) / r.measured_s;
    errors.push_back(std::abs(err));
    measured.push_back(r.measured_s);
    simulated.push_back(r.simulated_s);
    std::string cal = "— | —";
    if (r.calibrated_s > 0) {
      const double cerr = (r.calibrated_s - r.measured_s) / r.measured_s;
      cal = fmt::format("{:.0f} ms | {:+.1f}%{}", r.calibrated_s * 1e3, 100 * cerr,
                        r.name == calibration_plan ? " (calibrated on it)" : "");
      if (r.name != calibration_plan) calibrated_errors.push_back(std::abs(cerr));
      calibrated_measured.push_back(r.measured_s);
      calibrated_simulated.push_back(r.calibrated_s);
    }
    const auto [lo, hi] = std::minmax_element(r.round_s.begin(), r.round_s.end());
    table += fmt::format(
        "| {} | {} | {:.0f} ms | {:.0f}-{:.0f} ms | {:.0f} ms | {:+.1f}% | {} | {:.1f} MiB | {:.1f} MiB |\n",
        r.name, r.ranks, r.measured_s * 1e3, *lo * 1e3, *hi * 1e3, r.simulated_s * 1e3, 100 * err, cal,
        r.measured_peak / (1 << 20), r.simulated_peak / (1 << 20));
  }
  std::string md = fmt::format(
      "# Simulator fidelity, measured\n\n`build/bench/simulator_fidelity --steps {} --rounds {}`: the "
      "default job (llama-1m, 32 x 128 "
      "tokens a step, fp32) on `local-emulated` (4 ranks: speed factors 2, 2, 6, 6; 1 GiB, 1 GiB, 512 MiB, "
      "512 MiB; "
      "a 1 Gbit/s link between the pairs). Each plan trained for real by `motley launch` {} times, round by "
      "round "
      "(measured step: the median over the rounds of each run's median step over steps 3..{}) and simulated "
      "with the profile `motley profile` measured on the same machine.\n\n{}\n"
      "Median |error| of the step time: **{:.1f}%** over {} plans; Kendall tau between measured and "
      "simulated order: "
      "**{:.2f}**; a plan predicted to fit ran out of memory: **{}**.\n\n"
      "With the profile calibrated on the {} runs (`motley calibrate`, their steps pooled): median |error| "
      "**{:.1f}%** over the {} other "
      "plans; Kendall tau **{:.2f}**.\n\n```\n{}```\n",
      steps, rounds, rounds, steps, table, 100 * Median(errors), errors.size(),
      KendallTau(measured, simulated), surprise_oom ? "yes" : "no", calibration_plan,
      100 * Median(calibrated_errors), calibrated_errors.size(),
      KendallTau(calibrated_measured, calibrated_simulated), calibration);
  std::cout << md;
  if (!report_path.empty()) std::ofstream(report_path) << md;
  fs::remove_all(dir);
  return 0;
}
