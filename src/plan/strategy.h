// The planning strategies motley offers, by family. Planners themselves arrive with the planner
// issue; this table is what the CLI and job validation show users today.
#pragma once

#include <string_view>
#include <vector>

namespace motley {

struct StrategyInfo {
  std::string_view name;    // as written in job files and on the command line
  std::string_view family;  // "pipeline", "data-parallel", "tensor-parallel", "any"
  std::string_view summary;
};

const std::vector<StrategyInfo>& Strategies();

}  // namespace motley
