#include "supervise/run_metrics.h"

#include <algorithm>
#include <cmath>
#include <filesystem>
#include <map>
#include <string_view>

#include <fmt/format.h>
#include "core/metrics_file.h"

namespace motley {

namespace {

using RankTimes = std::map<int, std::vector<double>>;

// Appends the per-rank times `field` of `path`'s steps from `from_step` on to `by_rank`; how many steps.
// With `schedule_hash`, only the steps that ran that schedule count (the metrics name it at a run's
// start and at each live rebalance); a file whose steps all ran another is refused, naming both.
Result<int> ReadRankTimes(const std::string& path, const char* field, int from_step, std::streamoff from_byte,
                          const std::string& schedule_hash, RankTimes* by_rank) {
  MOTLEY_ASSIGN_OR_RETURN(std::vector<MetricsLine> lines, ReadMetricsFile(path, from_byte));
  const bool compute = std::string_view(field) == "compute_s";
  int steps = 0;
  std::string running, other;  // the schedule the steps run now; one they ran that is not the plan's
  for (const MetricsLine& m : lines) {
    if (!m.schedule_hash.empty()) running = m.schedule_hash;
    if (!m.event.empty() || m.ranks.empty() || !m.step || *m.step < from_step) continue;
    if (!schedule_hash.empty() && !running.empty() && running != schedule_hash) {
      other = running;
      continue;
    }
    for (const MetricsRank& r : m.ranks) {
      const std::optional<double>& v = compute ? r.compute_s : r.comm_s;
      if (v && !std::isfinite(*v))
        return Status::InvalidArgument(
            fmt::format("{}:{}: rank {}'s \"{}\" is not a number; give the file "
                        "`motley train --metrics` wrote",
                        path, m.line, r.rank, field));
      (*by_rank)[r.rank].push_back(v.value_or(0.0));
    }
    ++steps;
  }
  if (steps == 0 && !other.empty())
    return Status::InvalidArgument(
        fmt::format("{}: its steps ran schedule {}, but the plan lowers to schedule {}: these are the "
                    "metrics of a run of another "
                    "plan (or model, or cluster); give those of a run of this plan (`motley train --plan "
                    "PLAN --metrics FILE`)",
                    path, other, schedule_hash));
  if (steps == 0)
    return Status::InvalidArgument(
        fmt::format("{}: no step from {} on with per-rank times; train the plan with `motley train --plan "
                    "PLAN --metrics {}` for "
                    "more steps (the first ones warm up)",
                    path, from_step, path));
  return steps;
}

Result<std::vector<double>> Medians(const std::string& what, RankTimes& by_rank) {
  std::vector<double> out;
  for (auto& [rank, times] : by_rank) {
    if (rank != static_cast<int>(out.size()))
      return Status::InvalidArgument(
          fmt::format("{}: rank {} is missing from the per-rank times", what, out.size()));
    std::sort(times.begin(), times.end());
    out.push_back(times[times.size() / 2]);
  }
  return out;
}

}  // namespace

Result<std::vector<double>> MedianRankCompute(const std::string& path, int from_step,
                                              std::streamoff from_byte) {
  RankTimes by_rank;
  MOTLEY_RETURN_IF_ERROR(ReadRankTimes(path, "compute_s", from_step, from_byte, "", &by_rank).status());
  return Medians(path, by_rank);
}

Result<std::vector<double>> MedianRankCompute(const std::vector<std::string>& paths, int from_step,
                                              const std::string& schedule_hash) {
  return MedianRankTimes(paths, "compute_s", from_step, schedule_hash);
}

Result<std::vector<double>> MedianRankComm(const std::vector<std::string>& paths, int from_step,
                                           const std::string& schedule_hash) {
  return MedianRankTimes(paths, "comm_s", from_step, schedule_hash);
}

Result<std::vector<double>> MedianRankTimes(const std::vector<std::string>& paths, const char* field,
                                            int from_step, const std::string& schedule_hash) {
  if (paths.empty()) return Status::InvalidArgument("no metrics file given");
  RankTimes all;
  size_t ranks = 0;
  for (size_t i = 0; i < paths.size(); ++i) {
    RankTimes one;
    MOTLEY_RETURN_IF_ERROR(ReadRankTimes(paths[i], field, from_step, 0, schedule_hash, &one).status());
    if (i > 0 && one.size() != ranks)
      return Status::InvalidArgument(
          fmt::format("{}: {} rank(s), but {} has {}; give the metrics of runs of the same plan", paths[i],
                      one.size(), paths[0], ranks));
    ranks = one.size();
    for (auto& [rank, times] : one) all[rank].insert(all[rank].end(), times.begin(), times.end());
  }
  return Medians(paths.size() == 1 ? paths[0] : paths[0] + " and the others", all);
}

}  // namespace motley
