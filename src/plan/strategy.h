// The planning strategies motley offers, by family, for the CLI's help and reports. The planners
// themselves are in zorse_planner.h, poplar_planner.h and baselines.h.
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
