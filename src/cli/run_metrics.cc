#include "cli/run_metrics.h"

#include <algorithm>
#include <fstream>
#include <map>

#include <fmt/format.h>
#include <nlohmann/json.hpp>

namespace motley::cli {

Result<std::vector<double>> MedianRankCompute(const std::string& path, int from_step, std::streamoff from_byte) {
  std::ifstream in(path);
  if (!in) return Status::NotFound(fmt::format("{}: cannot read the metrics", path));
  in.seekg(from_byte);
  std::map<int, std::vector<double>> by_rank;
  int line_no = 0;
  for (std::string line; std::getline(in, line);) {
    ++line_no;
    if (line.empty()) continue;
    const nlohmann::json j = nlohmann::json::parse(line, nullptr, /*allow_exceptions=*/false);
    if (j.is_discarded())
      return Status::InvalidArgument(
          fmt::format("{}:{}: not a JSON line; give the file `motley train --metrics` wrote", path, line_no));
    if (!j.contains("ranks") || !j.contains("step") || j["step"].get<int>() < from_step) continue;
    for (const auto& r : j["ranks"]) by_rank[r.value("rank", -1)].push_back(r.value("compute_s", 0.0));
  }
  if (by_rank.empty())
    return Status::InvalidArgument(fmt::format(
        "{}: no step from {} on with per-rank times; train the plan with `motley train --plan PLAN --metrics {}` for "
        "more steps (the first ones warm up)",
        path, from_step, path));
  std::vector<double> out;
  for (auto& [rank, times] : by_rank) {
    if (rank != static_cast<int>(out.size()))
      return Status::InvalidArgument(fmt::format("{}: rank {} is missing from the per-rank times", path, out.size()));
    std::sort(times.begin(), times.end());
    out.push_back(times[times.size() / 2]);
  }
  return out;
}

}  // namespace motley::cli
