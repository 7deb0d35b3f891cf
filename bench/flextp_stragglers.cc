// FlexTP's scenarios at small scale (issue #9; ../shared/papers/flextp.txt §V): a tensor-parallel
// team of 4 ranks (one group, tp_degree = 4) trains a 2-layer Llama (hidden 512, 16 heads, ffn 2048) while
// emulated stragglers slow down — one rank 2x, 4x, 8x; then half the ranks (two) 2x, 4x, 8x — under
// each mode: off (the team waits), migrate (migrate-bcast: by broadcast-reduce, FlexTP's;
// migrate-p2p: point to point; migrate-proj: point to point, lent query heads moving as their q and o
// projections, the straggler keeping their scores — `lend_attention = "projections"`), resize, semi
// (migrating as `migration = "auto"` does on CPU ranks: point to point; stragglers judged against the average
// and split by FlexTP's cost model (Eq. 2-3, with its pre-test); semi-search: split by motley's earlier grid
// search; semi-fastest: the cost model, stragglers judged against the fastest rank; semi-last-step: semi
// deciding on each step's times alone, FlexTP's rule, where motley judges each rank by its median over three
// steps). Reported per scenario and mode: the median step time over steps 3..N and its ratio to the same team
// without stragglers (measured in the same run), the final training and validation losses against exact
// training on the same data (mode off, which is exact), the largest pruned fraction and the units moved.
//
// Stragglers are slowed as FlexTP's evaluation slows them (flextp.txt §V: the matrix multiplications
// of the linear projections that many times slower; `slows = "matmul"`), or with --slows compute as a
// whole slower device (every compute op, the optimizer and the replicated work included).
//
//   build/bench/flextp_stragglers [--steps N] [--rounds R] [--slows matmul|compute] [--only "4x"]
//                                 [--modes off,semi,...] [--shape HIDDENxFFN[xSEQ]] [-o report.md]
#include <algorithm>
#include <cmath>
#include <cstdio>
#include <filesystem>
#include <fstream>
#include <iostream>
#include <map>
#include <string>
#include <vector>

#include <fmt/format.h>
#include <fmt/ranges.h>
#include <nlohmann/json.hpp>

#include "bench_process.h"
#include "flextp_team.h"

namespace fs = std::filesystem;
using motley_bench::Median;
using motley_bench::Run;
using motley_bench::Team;

namespace {

struct Outcome {
  bool ok = false;
  double step_s = 0, loss = 0, val_loss = 0, pruned = 0, moved = 0;
  double steady_s = 0;            // the median step over the run's second half (the balance settled)
  std::vector<double> compute_s;  // per rank: the median compute time of a timed step
};

Outcome Train(const fs::path& dir, const std::string& name, const std::string& job, int steps, int ranks) {
  const std::string motley = MOTLEY_BIN;
  std::ofstream(dir / (name + ".toml")) << job;
  int code = 0;
  const std::string out = Run("cd '" + dir.string() + "' && " + motley + " launch --nproc " +
                                  std::to_string(ranks) + " -- " + motley + " train " + name +
                                  ".toml --plan plan.toml --no-checkpoint --metrics " + name + ".jsonl",
                              &code);
  Outcome o;
  if (code != 0) {
    std::cerr << name << " failed:\n" << out;
    return o;
  }
  std::vector<double> times, steady;
  std::vector<std::vector<double>> compute;
  for (const auto& j : motley_bench::ReadJsonLines((dir / (name + ".jsonl")).string())) {
    if (j.contains("val_loss")) o.val_loss = j["val_loss"];
    if (!j.contains("step_time_s")) continue;
    if (j["step"].get<int>() > 2) {
      times.push_back(j["step_time_s"]);
      if (j["step"].get<int>() > steps / 2) steady.push_back(j["step_time_s"]);
      compute.resize(j["ranks"].size());
      for (size_t r = 0; r < compute.size(); ++r) compute[r].push_back(j["ranks"][r]["compute_s"]);
    }
    if (j["step"].get<int>() == steps) o.loss = j["loss"];
    o.pruned = std::max(o.pruned, j.value("pruned_fraction", 0.0));
    o.moved = std::max(o.moved, j.value("migrated_units", 0.0));
  }
  o.step_s = Median(times);
  o.steady_s = Median(steady);
  for (const auto& c : compute) o.compute_s.push_back(Median(c));
  o.ok = true;
  return o;
}

// The simulator's step for the team with ranks `slow` computing `factor[i]` times slower (every
// compute op: `--straggler`) under FlexTP mode `mode` (sim/flextp_prediction.h), with `profile`
// (empty: the roofline); 0 when it failed.
double Predicted(const fs::path& dir, const std::string& profile, const std::vector<int>& slow,
                 const std::vector<double>& factor, const std::string& mode) {
  std::string flags = profile.empty() ? "" : " --profile " + profile;
  for (size_t i = 0; i < slow.size(); ++i) flags += fmt::format(" --straggler {}={:.4f}", slow[i], factor[i]);
  int code = 0;
  const std::string out =
      Run("cd '" + dir.string() + "' && " + std::string(MOTLEY_BIN) +
              " simulate --plan plan.toml --json --flextp-mode " + mode + flags + " 2>/dev/null",
          &code);
  if (code != 0) return 0;
  return nlohmann::json::parse(out)["step_time_s"].get<double>();
}

// One scenario's ratio to its no-straggler step, measured and simulated, by mode.
struct Point {
  bool half = false;  // half the ranks slowed, else one
  double factor = 1;
  std::string mode;
  double measured = 0, simulated = 0;
};

// FlexTP's Figure-style plot: step time against skew per mode, one panel for one slow rank and one
// for half the ranks; measured solid, the simulator dashed.
std::string Plot(const std::vector<Point>& points) {
  const char* modes[] = {"off", "migrate-p2p", "resize", "semi"};
  const char* colors[] = {"#888888", "#1f77b4", "#d62728", "#2ca02c"};
  const double panel_w = 300, panel_h = 220, left = 50, top = 30, gap = 60;
  double max_y = 2;
  for (const Point& p : points) max_y = std::max({max_y, p.measured, p.simulated});
  max_y = std::ceil(max_y);
  auto x_of = [&](int panel, double factor) {
    return left + panel * (panel_w + gap) + panel_w * (std::log2(factor) - 1) / 2;  // 2x, 4x, 8x
  };
  auto y_of = [&](double ratio) { return top + panel_h * (1 - (ratio - 1) / (max_y - 1)); };
  std::string svg = fmt::format(
      "<svg xmlns='http://www.w3.org/2000/svg' width='{}' height='{}' font-family='sans-serif' "
      "font-size='12'>\n",
      left + 2 * panel_w + gap + 130, top + panel_h + 50);
  for (int panel = 0; panel < 2; ++panel) {
    const double x0 = left + panel * (panel_w + gap);
    svg += fmt::format("<text x='{}' y='{}' font-weight='bold'>{}</text>\n", x0, top - 12,
                       panel == 0 ? "one rank slow" : "half the ranks slow");
    svg += fmt::format("<rect x='{}' y='{}' width='{}' height='{}' fill='none' stroke='#ccc'/>\n", x0, top,
                       panel_w, panel_h);
    for (double f : {2.0, 4.0, 8.0})
      svg += fmt::format("<text x='{:.1f}' y='{}' text-anchor='middle'>{:.0f}x</text>\n", x_of(panel, f),
                         top + panel_h + 16, f);
    for (int y = 1; y <= static_cast<int>(max_y); ++y)
      svg += fmt::format("<text x='{}' y='{:.1f}' text-anchor='end'>{}x</text>\n", x0 - 4, y_of(y) + 4, y);
    for (int m = 0; m < 4; ++m)
      for (const bool simulated : {false, true}) {
        std::string path;
        for (const Point& p : points)
          if (p.half == (panel == 1) && p.mode == modes[m] && (simulated ? p.simulated : p.measured) > 0)
            path += fmt::format("{}{:.1f},{:.1f}", path.empty() ? "" : " ", x_of(panel, p.factor),
                                y_of(simulated ? p.simulated : p.measured));
        if (!path.empty())
          svg += fmt::format("<polyline points='{}' fill='none' stroke='{}' stroke-width='2'{}/>\n", path,
                             colors[m], simulated ? " stroke-dasharray='5,4'" : "");
      }
  }
  svg += fmt::format("<text x='{}' y='{}' text-anchor='middle'>skew of the slow rank(s)</text>\n",
                     left + panel_w + gap / 2, top + panel_h + 40);
  const double lx = left + 2 * panel_w + gap + 15;
  for (int m = 0; m < 4; ++m)
    svg += fmt::format(
        "<line x1='{}' y1='{}' x2='{}' y2='{}' stroke='{}' stroke-width='2'/><text x='{}' y='{}'>{}</text>\n",
        lx, top + 10 + 18 * m, lx + 20, top + 10 + 18 * m, colors[m], lx + 26, top + 14 + 18 * m, modes[m]);
  svg +=
      fmt::format("<text x='{}' y='{}'>solid: measured</text><text x='{}' y='{}'>dashed: simulator</text>\n",
                  lx, top + 100, lx, top + 116);
  svg += fmt::format(
      "<text x='{}' y='{}' transform='rotate(-90 {} {})' text-anchor='middle'>step / no-straggler "
      "step</text>\n",
      14, top + panel_h / 2, 14, top + panel_h / 2);
  return svg + "</svg>\n";
}

}  // namespace

int main(int argc, char** argv) {
  // --slows and --only are this benchmark's own; the rest are every benchmark's.
  std::string slows = "matmul", only, team_name = "default", shape;
  bool keep = false;
  const std::vector<std::string> known = {"off",  "migrate-bcast", "migrate-p2p",  "migrate-proj",  "resize",
                                          "semi", "semi-search",   "semi-fastest", "semi-last-step"};
  std::vector<std::string> modes = known;
  std::vector<char*> rest = {argv[0]};
  for (int i = 1; i < argc; ++i) {
    if (std::string(argv[i]) == "--slows" && i + 1 < argc) {
      slows = argv[++i];
    } else if (std::string(argv[i]) == "--keep") {  // leave the runs' files (jobs, metrics) for a look
      keep = true;
    } else if (std::string(argv[i]) == "--team" && i + 1 < argc) {
      team_name = argv[++i];
    } else if (std::string(argv[i]) == "--shape" && i + 1 < argc) {  // HIDDENxFFN[xSEQ]: the team's, resized
      shape = argv[++i];
    } else if (std::string(argv[i]) == "--only" && i + 1 < argc) {
      only = argv[++i];
    } else if (std::string(argv[i]) == "--modes" &&
               i + 1 < argc) {  // e.g. "off,semi" (off is always run: the exact losses)
      modes = {"off"};
      std::string list = argv[++i];
      for (size_t at = 0; at <= list.size();) {
        const size_t comma = std::min(list.find(',', at), list.size());
        if (const std::string m = list.substr(at, comma - at); !m.empty() && m != "off") modes.push_back(m);
        at = comma + 1;
      }
    } else {
      rest.push_back(argv[i]);
    }
  }
  for (const std::string& m : modes)
    if (std::find(known.begin(), known.end(), m) == known.end()) {
      std::cerr << "flextp_stragglers: --modes takes " << fmt::format("{}", fmt::join(known, ", "))
                << "; not '" << m << "'\n";
      return 2;
    }
  // The teams by name: the default (4 ranks of 4 heads) and the grouped-query ones of 3 ranks, one
  // key/value group a rank, with gqa-2's multi-head control.
  const std::map<std::string, Team> teams = {
      {"default", Team{}},
      {"gqa", {3, 384, 12, 3, 1536, 3}},    // Llama 3's 4 query heads a key/value head
      {"gqa-2", {3, 384, 6, 3, 1536, 3}},   // 2 a key/value head: 2 query heads a rank
      {"gqa-8", {3, 384, 24, 3, 1536, 3}},  // 8 a key/value head: Llama 3 70B at width 8
      {"mha-2", {3, 384, 6, 6, 1536, 3}},   // gqa-2 with a key/value head a query head: heads move whole
  };
  const auto named = teams.find(team_name);
  if (named == teams.end()) {
    std::vector<std::string> names;
    for (const auto& [name, t] : teams) names.push_back(name);
    std::cerr << "flextp_stragglers: --team is " << fmt::format("{}", fmt::join(names, ", ")) << "; not '"
              << team_name << "'\n";
    return 2;
  }
  Team team = named->second;
  if (!shape.empty() &&
      (std::sscanf(shape.c_str(), "%dx%dx%d", &team.hidden, &team.ffn, &team.seq_len) < 2 ||
       team.hidden % team.heads != 0 || team.hidden / team.heads % 2 != 0 || team.ffn % team.ranks != 0 ||
       (team.seq_len != 64 && team.seq_len != 128 && team.seq_len != 256))) {
    std::cerr << "flextp_stragglers: --shape is HIDDENxFFN[xSEQ], hidden a multiple of 2 x the team's "
              << team.heads << " heads, ffn of its " << team.ranks << " ranks, SEQ 64, 128 or 256; not '"
              << shape << "'\n";
    return 2;
  }
  if (slows != "matmul" && slows != "compute") {
    std::cerr << "flextp_stragglers: --slows is matmul or compute, not '" << slows << "'\n";
    return 2;
  }
  motley_bench::BenchArgs args;
  args.steps = 10;
  if (!motley_bench::ParseBenchArgs(static_cast<int>(rest.size()), rest.data(), "flextp_stragglers", &args))
    return 2;
  const int steps = args.steps;
  const fs::path dir = motley_bench::MakeWorkDir("motley_bench_flextp");
  std::ofstream(dir / "model.toml") << ModelToml(team);
  std::ofstream(dir / "cluster.toml") << ClusterToml(team);
  std::ofstream(dir / "plan.toml") << PlanToml(team);

  struct Scenario {
    std::string name;
    std::vector<int> slow;
    double factor;
  };
  std::vector<Scenario> scenarios;
  if (team_name != "default") {
    scenarios.push_back({"one rank 3x", {1}, 3.0});
  } else {
    for (double f : {2.0, 4.0, 8.0}) scenarios.push_back({fmt::format("one rank {:.0f}x", f), {1}, f});
    for (double f : {2.0, 4.0, 8.0})
      scenarios.push_back({fmt::format("half the ranks {:.0f}x", f), {1, 3}, f});
  }
  if (!only.empty())  // --only "4x": the scenarios whose name contains it
    scenarios.erase(std::remove_if(scenarios.begin(), scenarios.end(),
                                   [&](const Scenario& s) { return s.name.find(only) == std::string::npos; }),
                    scenarios.end());
  // Each run with stragglers is judged against the team without stragglers measured right before
  // it (in its round): this machine's speed drifts by 10-15% over the minutes the benchmark runs,
  // and a run's step by as much again. With --rounds R every scenario runs R times over (the team
  // without stragglers, then each mode); a mode's figure is the median of its R paired ratios, with
  // their range.
  std::string rows;
  std::vector<Point> points;
  std::vector<double> baselines;
  std::string factors_said;  // the simulator's straggler factors, measured
  std::string bounds_said;   // each scenario's zero-overhead bound
  Outcome first_baseline;
  int index = 0;
  // The simulator's timings: the team's device and links measured (`motley profile --links`: the
  // moves of a migration go over Gloo's point to point here, not the cluster file's 10 GB/s), then, for each
  // scenario, calibrated on its no-straggler runs (`motley calibrate`: the compute and the
  // collectives as the team measured them running together) — the roofline when that fails.
  std::string profile;
  {
    int code = 0;
    const std::string out =
        // At the team's own sequence length: a profile of another length leaves the simulator on the
        // roofline and `motley calibrate` with nothing to scale (session 70's 256-token runs).
        Run(fmt::format("cd '{}' && {} profile --cluster cluster.toml --model model.toml --seq-len {} "
                        "--precision fp32 --max-microbatch {} --links -o profile.json 2>&1",
                        dir.string(), MOTLEY_BIN, team.seq_len, 512 / team.seq_len),
            &code);
    if (code == 0)
      profile = "profile.json";
    else
      std::cerr << "motley profile failed (the simulator falls back on the roofline):\n" << out;
  }
  std::string calibration_said;
  for (const Scenario& s : scenarios) {
    std::map<std::string, std::vector<Outcome>> runs;  // by mode, one a round
    std::map<std::string, std::vector<double>> ratios, steady_ratios;
    std::vector<double> nones;
    std::vector<Outcome> none_runs;  // by round
    // The simulator's stragglers are whole devices that many times slower. With `--slows matmul`
    // a straggler's other work keeps its speed, so the simulator is given the slowdown of the
    // straggler's whole compute as mode off measured it (against the other ranks' mean; the median
    // over the rounds) — a measured figure of this run, as `motley calibrate` scales a profile to a run.
    std::vector<std::vector<double>> measured_factor(s.slow.size());
    for (int round = 0; round < args.rounds; ++round) {
      const Outcome none = Train(dir, fmt::format("s{}-r{}-none", index, round),
                                 Job(team, steps, "off", {}, 1, slows), steps, team.ranks);
      if (!none.ok) return 1;
      if (baselines.empty()) first_baseline = none;
      baselines.push_back(none.step_s);
      nones.push_back(none.step_s);
      none_runs.push_back(none);
      for (const std::string& mode : modes) {
        const Outcome o = Train(dir, fmt::format("s{}-r{}-{}", index, round, mode),
                                Job(team, steps, mode, s.slow, s.factor, slows), steps, team.ranks);
        if (!o.ok) continue;
        runs[mode].push_back(o);
        ratios[mode].push_back(o.step_s / none.step_s);
        steady_ratios[mode].push_back(o.steady_s / none.steady_s);
        if (mode == "off") {
          double others = 0;
          int n = 0;
          for (size_t r = 0; r < o.compute_s.size(); ++r)
            if (std::find(s.slow.begin(), s.slow.end(), static_cast<int>(r)) == s.slow.end())
              others += o.compute_s[r], ++n;
          for (size_t i = 0; i < s.slow.size() && n > 0; ++i)
            measured_factor[i].push_back(o.compute_s[static_cast<size_t>(s.slow[i])] / (others / n));
        }
      }
    }
    std::string scenario_profile;
    if (!profile.empty()) {
      std::string metrics;
      for (int round = 0; round < args.rounds; ++round)
        metrics += fmt::format(" --metrics s{}-r{}-none.jsonl", index, round);
      const std::string calibrated = fmt::format("calibrated-s{}.json", index);
      int code = 0;
      const std::string out =
          Run("cd '" + dir.string() + "' && " + std::string(MOTLEY_BIN) + " calibrate --profile " + profile +
                  " --plan plan.toml" + metrics + " -o " + calibrated + " 2>&1",
              &code);
      if (code == 0) {
        scenario_profile = calibrated;
        if (calibration_said.empty()) calibration_said = out;  // the first scenario's, for the report
      } else {
        std::cerr << "motley calibrate failed (the simulator takes the profile as measured):\n" << out;
        scenario_profile = profile;
      }
    }
    const double predicted_none = Predicted(dir, scenario_profile, {}, {}, "off");
    std::vector<double> effective(s.slow.size(), s.factor);
    if (slows == "matmul") {
      std::string said;
      for (size_t i = 0; i < s.slow.size(); ++i) {
        if (!measured_factor[i].empty()) effective[i] = Median(measured_factor[i]);
        said += fmt::format("{}rank {} {:.2f}x", i ? ", " : "", s.slow[i], effective[i]);
      }
      factors_said += fmt::format("{}{}: {}", factors_said.empty() ? "" : "; ", s.name, said);
    }
    const std::vector<Outcome>& exact = runs["off"];
    // The zero-overhead bound: the stragglers' slowed work spread over the team's capacity as a
    // fluid — moved at no cost, in any grain — from each round's no-straggler and mode-off runs.
    // With `--slows matmul` a rank's matrix multiplications are what slows: a straggler's extra
    // compute in mode off is (factor - 1) times them.
    std::vector<double> bounds;
    for (size_t round = 0; round < exact.size() && round < none_runs.size(); ++round) {
      const std::vector<double>&c0 = none_runs[round].compute_s, &c1 = exact[round].compute_s;
      if (c0.size() != c1.size() || c0.empty()) continue;
      double mean0 = 0, slowed = 0;
      for (double c : c0) mean0 += c / static_cast<double>(c0.size());
      for (int r : s.slow)
        slowed += (slows == "matmul" ? (c1[r] - c0[r]) / (s.factor - 1) : c0[r]) /
                  static_cast<double>(s.slow.size());
      const double ranks = static_cast<double>(c0.size()), n_slow = static_cast<double>(s.slow.size());
      const double capacity = ranks - n_slow + n_slow / s.factor;  // in normal ranks
      const double compute = mean0 - slowed + ranks * slowed / capacity;
      bounds.push_back((none_runs[round].step_s + compute - mean0) / none_runs[round].step_s);
    }
    if (!bounds.empty()) {
      const auto [blo, bhi] = std::minmax_element(bounds.begin(), bounds.end());
      bounds_said += fmt::format("- {}: {:.2f}x{}\n", s.name, Median(bounds),
                                 bounds.size() > 1 ? fmt::format(" ({:.2f}-{:.2f})", *blo, *bhi) : "");
    }
    for (const std::string& mode : modes) {
      const std::vector<Outcome>& o = runs[mode];
      if (o.empty()) {
        rows += fmt::format("| {} | {} | failed | | | | | | | | | |\n", s.name, mode);
        continue;
      }
      // Losses: the first round's (an exact mode's are the same every round), against mode off's.
      auto rel = [&](double a, double b) {
        return b != 0 ? fmt::format("{:+.2f}%", 100 * (a - b) / b) : std::string();
      };
      const double predicted = Predicted(dir, scenario_profile, s.slow, effective,
                                         mode.starts_with("migrate") ? "migrate"
                                         : mode.starts_with("semi")  ? "semi"
                                                                     : mode);
      const std::vector<double>& r = ratios[mode];
      const double ratio = Median(r);
      std::vector<double> steps_s;
      for (const Outcome& x : o) steps_s.push_back(x.step_s);
      points.push_back({s.slow.size() > 1, s.factor, mode, ratio,
                        predicted > 0 && predicted_none > 0 ? predicted / predicted_none : 0});
      const auto [rlo, rhi] = std::minmax_element(r.begin(), r.end());
      const std::vector<double>& sr = steady_ratios[mode];
      const auto [slo, shi] = std::minmax_element(sr.begin(), sr.end());
      rows += fmt::format(
          "| {} | {} | {:.0f} ms | {:.2f}x{} ({:.0f} ms) | {:.2f}x{} | {} | {:.4f} | {} | {:.4f} | {} | "
          "{:.1f}% | {:.0f} |\n",
          s.name, mode, Median(steps_s) * 1e3, ratio,
          r.size() > 1 ? fmt::format(" ({:.2f}-{:.2f})", *rlo, *rhi) : "", Median(nones) * 1e3, Median(sr),
          sr.size() > 1 ? fmt::format(" ({:.2f}-{:.2f})", *slo, *shi) : "",
          predicted > 0 && predicted_none > 0 ? fmt::format("{:.2f}x", predicted / predicted_none) : "-",
          o[0].loss, exact.empty() ? "" : rel(o[0].loss, exact[0].loss), o[0].val_loss,
          exact.empty() ? "" : rel(o[0].val_loss, exact[0].val_loss), 100 * o[0].pruned, o[0].moved);
    }
    ++index;
  }
  const auto [lo, hi] = std::minmax_element(baselines.begin(), baselines.end());
  std::string table =
      "| stragglers | mode | step | vs no straggler (its step) | second half: vs no straggler | simulator: "
      "vs no straggler | "
      "loss | vs exact | validation loss | vs exact | pruned (max) | units moved "
      "|\n|---|---|---|---|---|---|---|---|---|---|---|---|\n";
  table += fmt::format(
      "| none | off | {:.0f} ms (median of {}; {:.0f}-{:.0f} ms) | 1.00x | 1.00x | 1.00x | {:.4f} | | {:.4f} "
      "| | | |\n",
      Median(baselines) * 1e3, baselines.size(), *lo * 1e3, *hi * 1e3, first_baseline.loss,
      first_baseline.val_loss);
  table += rows;
  if (!bounds_said.empty())
    table +=
        "\nThe zero-overhead bound — no mode can step faster: the stragglers' slowed work spread over the "
        "team's capacity as a fluid, moved at no cost (from each round's no-straggler and mode-off runs: "
        "the straggler's extra compute in mode off is (factor - 1) times the work that slows), against the "
        "no-straggler step:\n\n" +
        bounds_said;
  const std::string md = fmt::format(
      "# FlexTP's straggler scenarios, measured\n\n`build/bench/flextp_stragglers --steps {} --rounds {} "
      "--slows {}{}`: one tensor-parallel "
      "team of {} CPU ranks (tp_degree = {}; Gloo) trains a 2-layer Llama (hidden {}, {} query heads, {} "
      "key/value heads, "
      "ffn {}, fp32, {} x {} tokens a step, no recomputation) on the built-in corpus; emulated stragglers "
      "are "
      "slowed from step 1 "
      "(`[[emulation.stragglers]]`, `slows = \"{}\"`: {}). Step: median "
      "over steps 3..{} (the balancer decides after step 1); `vs no straggler`: against the same team with "
      "no "
      "straggler, trained right before (with several rounds: the median of the paired ratios, their range in "
      "brackets, "
      "and the median no-straggler step); `second half`: the same over the run's second half alone, the "
      "balance "
      "settled (its steady state). Losses (the first round's) after step {} and on 32 validation windows, "
      "against mode off (exact) in the "
      "same scenario. `migrate-bcast` moves a straggler's units by broadcast-reduce (FlexTP §IV-A), "
      "`migrate-p2p` the "
      "same units point to point (lent query heads computed whole by their receivers), `migrate-proj` "
      "point to point lending query heads' projections (the straggler keeps their scores); `semi` migrates "
      "as `migration = \"auto\"` does on CPU ranks (point to "
      "point) and judges "
      "stragglers against the team's average, splitting each straggler's gap by FlexTP's cost model (Eq. "
      "2-3, the costs "
      "from its pre-test), `semi-search` by motley's earlier grid search (the least pruning within 5% of the "
      "fastest "
      "split), `semi-fastest` the cost model judging stragglers against the team's fastest rank (FlexTP "
      "§IV-B), "
      "`semi-last-step` semi deciding on each step's times alone (FlexTP's rule; `decision_window_steps = "
      "1`, where the "
      "others judge each rank by its median over three steps). `simulator`: "
      "`motley simulate --straggler r=F --flextp-mode M` on the same plan against its step with no "
      "straggler, with "
      "the team's device profiled (`motley profile`) and calibrated on each scenario's no-straggler runs "
      "(`motley calibrate`: their compute and their communication, which sets every collective's per-call "
      "overhead){} "
      "(its migration point to point, its semi judged by the average; F the straggler's whole slowdown: "
      "{}).\n\n{}{}",
      steps, args.rounds, slows,
      (team_name == "default" ? "" : " --team " + team_name) + (shape.empty() ? "" : " --shape " + shape),
      team.ranks, team.ranks, team.hidden, team.heads, team.kv_heads, team.ffn, 512 / team.seq_len,
      team.seq_len, slows,
      slows == "matmul"
          ? "their matrix multiplications (aten::mm, addmm: the linear projections, forward and backward) "
            "stretched to that many times their CPU time, as FlexTP's evaluation injects stragglers"
          : "every compute op stretched to that many times its CPU time, as a slower device",
      steps, steps, profile.empty() ? " — here the roofline: `motley profile` failed" : "",
      slows == "matmul" ? "its compute against the other ranks' as mode off measured it, " + factors_said
                        : std::string("the slowdown itself"),
      calibration_said.empty() ? ""
                               : "The first scenario's calibration:\n\n```\n" + calibration_said + "```\n\n",
      table);
  std::cout << md;
  if (!args.report_path.empty()) {
    std::ofstream(args.report_path) << md;
    // The plot beside the report: <report>.svg.
    const fs::path svg = fs::path(args.report_path).replace_extension(".svg");
    std::ofstream(svg) << Plot(points);
    std::cout << "plot: " << svg.string() << "\n";
  }
  if (keep)
    std::cout << "runs kept in " << dir.string() << "\n";
  else
    fs::remove_all(dir);
  return 0;
}
