#include "cli/run_metrics.h"

#include <algorithm>
#include <fstream>
#include <map>

#include <fmt/format.h>
#include <nlohmann/json.hpp>

namespace motley::cli {

namespace {

using RankTimes = std::map<int, std::vector<double>>;

// Appends the per-rank times `field` of `path`'s steps from `from_step` on to `by_rank`; how many steps.
Result<int> ReadRankTimes(const std::string& path, const char* field, int from_step, std::streamoff from_byte,
                          RankTimes* by_rank) {
  std::ifstream in(path);
  if (!in) return Status::NotFound(fmt::format("{}: cannot read the metrics", path));
  in.seekg(from_byte);
  int line_no = 0, steps = 0;
  for (std::string line; std::getline(in, line);) {
    ++line_no;
    if (line.empty()) continue;
    const nlohmann::json j = nlohmann::json::parse(line, nullptr, /*allow_exceptions=*/false);
    if (j.is_discarded())
      return Status::InvalidArgument(
          fmt::format("{}:{}: not a JSON line; give the file `motley train --metrics` wrote", path, line_no));
    if (!j.contains("ranks") || !j.contains("step") || j["step"].get<int>() < from_step) continue;
    for (const auto& r : j["ranks"]) (*by_rank)[r.value("rank", -1)].push_back(r.value(field, 0.0));
    ++steps;
  }
  if (steps == 0)
    return Status::InvalidArgument(fmt::format(
        "{}: no step from {} on with per-rank times; train the plan with `motley train --plan PLAN --metrics {}` for "
        "more steps (the first ones warm up)",
        path, from_step, path));
  return steps;
}

Result<std::vector<double>> Medians(const std::string& what, RankTimes& by_rank) {
  std::vector<double> out;
  for (auto& [rank, times] : by_rank) {
    if (rank != static_cast<int>(out.size()))
      return Status::InvalidArgument(fmt::format("{}: rank {} is missing from the per-rank times", what, out.size()));
    std::sort(times.begin(), times.end());
    out.push_back(times[times.size() / 2]);
  }
  return out;
}

}  // namespace

Result<std::vector<double>> MedianRankCompute(const std::string& path, int from_step, std::streamoff from_byte) {
  RankTimes by_rank;
  MOTLEY_RETURN_IF_ERROR(ReadRankTimes(path, "compute_s", from_step, from_byte, &by_rank).status());
  return Medians(path, by_rank);
}

Result<std::vector<double>> MedianRankCompute(const std::vector<std::string>& paths, int from_step) {
  return MedianRankTimes(paths, "compute_s", from_step);
}

Result<std::vector<double>> MedianRankComm(const std::vector<std::string>& paths, int from_step) {
  return MedianRankTimes(paths, "comm_s", from_step);
}

Result<std::vector<double>> MedianRankTimes(const std::vector<std::string>& paths, const char* field, int from_step) {
  if (paths.empty()) return Status::InvalidArgument("no metrics file given");
  RankTimes all;
  size_t ranks = 0;
  for (size_t i = 0; i < paths.size(); ++i) {
    RankTimes one;
    MOTLEY_RETURN_IF_ERROR(ReadRankTimes(paths[i], field, from_step, 0, &one).status());
    if (i > 0 && one.size() != ranks)
      return Status::InvalidArgument(fmt::format(
          "{}: {} rank(s), but {} has {}; give the metrics of runs of the same plan", paths[i], one.size(), paths[0], ranks));
    ranks = one.size();
    for (auto& [rank, times] : one) all[rank].insert(all[rank].end(), times.begin(), times.end());
  }
  return Medians(paths.size() == 1 ? paths[0] : paths[0] + " and the others", all);
}

}  // namespace motley::cli
