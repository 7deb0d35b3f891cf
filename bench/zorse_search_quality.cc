// How good is the Zorse planner's search (#24 part 3)? On the Zorse paper's clusters A, B and C
// (Llama-13B, a 1M-token batch, the paper's sequence lengths, fp16, the published latencies), the
// plan `motley plan --strategy zorse` chooses against the best of a much larger randomised search
// of the same space: random groupings of the nodes (any number of groups, any assignment), each
// with a random microbatch size and ministage count among those the memory model admits, every one
// judged by the simulator. Regret = the planner's step over the random search's best, minus one
// (0 when the planner's is faster). Writes a markdown report.
//
//   build/bench/zorse_search_quality ../shared/data/zorse-measured/model_latencies.json
//       [--samples 1000] [--seed 1] [-o bench/reports/zorse_search_quality.md]
#include <algorithm>
#include <chrono>
#include <cstdint>
#include <cstdio>
#include <fstream>
#include <random>
#include <string>
#include <vector>

#include <fmt/format.h>

#include "core/cluster_parse.h"
#include "core/file_io.h"
#include "core/units.h"
#include "plan/baselines.h"
#include "plan/evaluate_all.h"
#include "sim/cost_model.h"
#include "sim/plan_evaluator.h"
#include "sim/profile.h"

namespace motley {
namespace {

double Since(std::chrono::steady_clock::time_point t) {
  return std::chrono::duration<double>(std::chrono::steady_clock::now() - t).count();
}

int Main(int argc, char** argv) {
  std::string latencies, out_path;
  int samples = 1000;
  uint64_t seed = 1;
  for (int i = 1; i < argc; ++i) {
    const std::string a = argv[i];
    if (a == "--samples" && i + 1 < argc) {
      samples = std::max(1, std::stoi(argv[++i]));
    } else if (a == "--seed" && i + 1 < argc) {
      seed = std::stoull(argv[++i]);
    } else if (a == "-o" && i + 1 < argc) {
      out_path = argv[++i];
    } else if (latencies.empty() && a[0] != '-') {
      latencies = a;
    } else {
      std::fprintf(stderr, "usage: %s MODEL_LATENCIES_JSON [--samples N] [--seed S] [-o report.md]\n",
                   argv[0]);
      return 2;
    }
  }
  if (latencies.empty()) {
    std::fprintf(stderr, "usage: %s MODEL_LATENCIES_JSON [--samples N] [--seed S] [-o report.md]\n", argv[0]);
    return 2;
  }
  Result<std::string> text = ReadFileToString(latencies);
  if (!text.ok()) {
    std::fprintf(stderr, "%s\n", text.status().message().c_str());
    return 1;
  }
  const Profile profile = ImportZorseMeasured(*text, latencies).value();
  struct Cell {
    std::string cluster;
    int64_t seq_len;
  };
  std::string report = fmt::format(
      "| cluster | nodes | planner's step | plans it simulated | random search's best | random plans "
      "simulated | "
      "regret | planner / random search time |\n|---|---|---|---|---|---|---|---|\n");
  std::mt19937_64 rng(seed);
  std::string notes;
  double worst_regret = 0;
  for (const Cell& cell : {Cell{"zorse-a", 4096}, Cell{"zorse-b", 1024}, Cell{"zorse-c", 512}}) {
    const Cluster cluster = LoadCluster(cell.cluster).value();
    ModelSpec model = *FindModelPreset("llama-13b");
    model.max_seq_len = std::max(model.max_seq_len, cell.seq_len);
    const CostModel costs(cluster, model, &profile, cell.seq_len, Precision::kFp16, true);
    const PlanEvaluator evaluate = SimulationEvaluator(cluster, model, costs);
    PlanRequest req;
    req.global_batch_sequences = (1 << 20) / cell.seq_len;
    req.seq_len = cell.seq_len;
    req.precision = Precision::kFp16;
    req.leave_devices_out = false;  // the same space as the random search: every device
    auto start = std::chrono::steady_clock::now();
    const StrategyOutcome planned = PlanWithStrategy("zorse", cluster, model, costs, req, evaluate);
    const double plan_s = Since(start);
    if (!planned.status.ok()) {
      std::fprintf(stderr, "%s: %s\n", cell.cluster.c_str(), planned.status.message().c_str());
      return 1;
    }

    // The random search: groupings of whole nodes (Zorse's space), a random candidate of each.
    std::vector<std::vector<int>> nodes;
    for (int d = 0, n = 0; n < static_cast<int>(cluster.nodes.size()); ++n) {
      nodes.emplace_back();
      for (int i = 0; i < cluster.nodes[n].num_devices; ++i) nodes.back().push_back(d++);
    }
    const int num_nodes = static_cast<int>(nodes.size());
    ZorseRequest z;
    z.global_batch_sequences = req.global_batch_sequences;
    z.seq_len = req.seq_len;
    z.precision = req.precision;
    start = std::chrono::steady_clock::now();
    std::vector<Plan> plans;
    std::vector<std::string> whys;
    int attempts = 0;
    while (static_cast<int>(plans.size()) < samples && attempts < 100 * samples) {
      ++attempts;
      const int k = std::uniform_int_distribution<int>(1, num_nodes)(rng);
      std::vector<std::vector<int>> groups(k);
      for (const auto& node : nodes) {
        auto& g = groups[std::uniform_int_distribution<int>(0, k - 1)(rng)];
        g.insert(g.end(), node.begin(), node.end());
      }
      std::erase_if(groups, [](const auto& g) { return g.empty(); });
      std::vector<ZorseCandidate> candidates = ZorseCandidatesForGroups(cluster, model, costs, z, groups);
      if (candidates.empty()) continue;
      const ZorseCandidate& pick =
          candidates[std::uniform_int_distribution<size_t>(0, candidates.size() - 1)(rng)];
      plans.push_back(pick.plan);
      whys.push_back(pick.why);
    }
    const std::vector<Result<PlanEvaluation>> judged = EvaluateAll(plans, evaluate);
    const double random_s = Since(start);
    double best = std::numeric_limits<double>::infinity();
    int fitting = 0;
    std::string best_why;
    for (size_t i = 0; i < judged.size(); ++i)
      if (judged[i].ok() && judged[i]->fits_memory) {
        ++fitting;
        if (judged[i]->step_time_s < best) {
          best = judged[i]->step_time_s;
          best_why = whys[i];
        }
      }
    notes += fmt::format("- {}: the planner's plan: {}\n  the random search's best: {}\n", cell.cluster,
                         planned.explain, best_why);
    const double regret = std::max(0.0, planned.evaluation.step_time_s / best - 1);
    worst_regret = std::max(worst_regret, regret);
    report += fmt::format("| {} | {} | {} | {} | {} | {} ({} fit) | {:.2f}% | {:.1f} s / {:.0f} s |\n",
                          cell.cluster, num_nodes, FormatDuration(planned.evaluation.step_time_s),
                          planned.evaluations, FormatDuration(best), plans.size(), fitting, 100 * regret,
                          plan_s, random_s);
    std::fprintf(stderr, "%s done\n", cell.cluster.c_str());
  }
  report += fmt::format("\nWorst regret: {:.2f}%\n\n{}", 100 * worst_regret, notes);
  std::printf("%s", report.c_str());
  if (!out_path.empty()) std::ofstream(out_path) << report;
  return 0;
}

}  // namespace
}  // namespace motley

int main(int argc, char** argv) { return motley::Main(argc, argv); }
