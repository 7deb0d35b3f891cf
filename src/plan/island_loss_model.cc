#include "plan/island_loss_model.h"

#include <algorithm>
#include <cmath>

#include <fmt/format.h>

namespace motley {
namespace {

// bench/reports/islands_loss.md, session 47 (tinyshakespeare): each run's final validation loss over the
// synchronous run's, and the synchronous run's tokens to that loss (its validation curve, linear between
// its points every 50 steps) over the islands' 300 steps.
struct Measured {
  int64_t islands, inner_steps;
  double token_efficiency, loss_penalty;
};
constexpr Measured kMeasured[] = {
    {2, 10, 0.286, 0.266},  // 2.2200 against 1.7541; the synchronous run at 2.2200: step 85.9
    {2, 50, 0.552, 0.101},  // 1.9314; step 165.6
    {4, 10, 0.263, 0.291},  // 2.2649; step 78.9
    {4, 50, 0.460, 0.143},  // 2.0057; step 137.9
};
constexpr int64_t kFewestIslands = 2, kMostIslands = 4, kFewestSteps = 10, kMostSteps = 50;

// The measurement at (islands, inner_steps), both among the measured.
const Measured& At(int64_t islands, int64_t inner_steps) {
  for (const Measured& m : kMeasured)
    if (m.islands == islands && m.inner_steps == inner_steps) return m;
  return kMeasured[0];
}

}  // namespace

IslandLossEstimate EstimateIslandLoss(int64_t islands, int64_t inner_steps) {
  IslandLossEstimate out;
  if (islands <= 1) {
    out.basis = "one island is the synchronous run";
    return out;
  }
  const double n = std::clamp<double>(static_cast<double>(islands), kFewestIslands, kMostIslands);
  const double h = std::clamp<double>(static_cast<double>(inner_steps), kFewestSteps, kMostSteps);
  const double along_h =
      std::log(h / kFewestSteps) / std::log(static_cast<double>(kMostSteps) / kFewestSteps);
  const double along_n = (n - kFewestIslands) / (kMostIslands - kFewestIslands);
  auto blend = [&](double Measured::*field) {
    auto at_n = [&](int64_t count) {
      return At(count, kFewestSteps).*field * (1 - along_h) + At(count, kMostSteps).*field * along_h;
    };
    return at_n(kFewestIslands) * (1 - along_n) + at_n(kMostIslands) * along_n;
  };
  out.token_efficiency = blend(&Measured::token_efficiency);
  out.loss_penalty = blend(&Measured::loss_penalty);
  out.basis = fmt::format(
      "an estimate from 2 and 4 islands at H = 10 and 50 on a 1M-parameter model "
      "(bench/reports/islands_loss.md){}",
      islands > kMostIslands || inner_steps > kMostSteps || inner_steps < kFewestSteps
          ? fmt::format(", held at the nearest measured for {} islands at H = {}", islands, inner_steps)
          : "");
  return out;
}

}  // namespace motley
