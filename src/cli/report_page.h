// The report page (`motley report`): one self-contained HTML file — inline SVG and CSS, no script,
// nothing fetched — on a plan, its simulated step and, given a run's folder, what the run measured.
#pragma once

#include <optional>
#include <string>
#include <utility>
#include <vector>

#include "core/cluster.h"
#include "core/metrics_file.h"
#include "core/model.h"
#include "core/trace_file.h"
#include "plan/plan.h"
#include "plan/schedule.h"
#include "sim/islands_sim.h"
#include "sim/simulator.h"

namespace motley::cli {

/// What a run left in its folder (`motley train`'s checkpoint dir).
struct RunRecord {
  std::string dir;
  std::vector<MetricsLine> metrics;  // metrics.jsonl, line by line
  std::optional<std::vector<TraceSpan>>
      trace;  // trace.json: one step of the run, in the simulator's trace format
  // The schedule of the plan the page is about: the measured step and memory are those of the
  // steps that ran it (a restarted or rebalanced run's other plans' steps are left out, and said so).
  std::string schedule_hash;
};

/// One strategy of `motley plan --compare`.
struct CompareRow {
  std::string strategy;
  double step_s = -1;  // < 0: no plan
  double tokens_per_s = 0;
  std::string tensor_parallel = "-", flextp = "-", note;
  bool chosen = false;
};

/// Islands (`motley report --island-plan P0 --island-plan P1 ...`): the page's plan is island 0's; this
/// is every island's step and the outer round between them (report_islands.cc).
struct IslandsView {
  std::vector<std::string> plans;    // each island's plan file
  std::vector<std::string> devices;  // each island's devices, described
  const IslandsSimResult* result = nullptr;
  const Schedule* round = nullptr;       // the outer round's ops over every island's ranks
  const SimResult* round_sim = nullptr;  // simulated with its trace recorded
  std::string compression;
};
std::string IslandsSection(const IslandsView& v, const Cluster& cluster);

/// What could be rented (`motley report --offers F`): every allocation the search planned, by price.
struct RentRow {
  std::string rent, strategy;
  double tokens_per_s = 0, usd_per_hour = 0, usd_per_million_tokens = 0;
  bool on_front = false, chosen = false;
};
struct RentView {
  std::string offers, objective, why;
  std::vector<RentRow> rows;
  // The page's own plan, when its cluster is priced: its speed and price an hour.
  std::optional<std::pair<double, double>> this_plan;
};

struct ReportInputs {
  std::string subject;  // what the page is about: "plan P", "job J", "run D"
  const Cluster* cluster = nullptr;
  const ModelSpec* model = nullptr;
  const Plan* plan = nullptr;
  const Schedule* schedule = nullptr;
  const SimResult* sim = nullptr;  // simulated with its trace recorded
  std::vector<CompareRow> compare;
  const RunRecord* run = nullptr;
  std::optional<RentView> rent;
  std::optional<IslandsView> islands;
};

std::string ReportHtml(const ReportInputs& in);

}  // namespace motley::cli
