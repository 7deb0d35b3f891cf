// What training as islands costs in progress, for the planner's choice of islands (issue #52 item 3):
// an estimate, not a prediction of this job. Islands that meet every H inner steps train a worse model
// for the same tokens than one synchronous run; how much worse was measured on a small model
// (bench/reports/islands_loss.md: llama-1m on tinyshakespeare, steps of 4,096 tokens, at H = 10 and 50,
// 2 and 4 islands — with DiLoCo's outer optimizer over 300 steps, with plain averaging over 900, and there
// 2 islands at H = 15 and 25 too, waiting for each round and overlapping it with the next step, whole or
// in 5 streaming fragments) and is
// interpolated here: in log H between the H measured at an islands'
// count, linearly in the islands' count, held at the nearest measurement outside them (and said so) —
// and as the mean over seeds: each run is one seed's draw; a setting measured at three seeds is their
// mean, and the others are scaled as those settings' means are to their one-seed runs. The gap narrows as
// a run lengthens (2 islands at H = 15 in int4: +2.09% at 900 steps, +1.42% at 1800, the mean over three
// seeds): from runs of 900 steps, the estimate overstates what a real run's islands lose.
#pragma once

#include <cstdint>
#include <string>

#include "core/job.h"

namespace motley {

struct IslandLossEstimate {
  // The synchronous run's tokens to reach the islands' loss, over the islands' tokens (1: no cost). The
  // time to a target loss is the synchronous run's tokens / (the islands' tokens/s x this).
  double token_efficiency = 1;
  // The islands' validation loss at equal tokens over the synchronous run's, minus 1.
  double loss_penalty = 0;
  std::string basis;  // what it rests on, for --explain
};

/// `islands` islands meeting every `inner_steps` steps with the outer optimizer `outer` (measured: DiLoCo's
/// settings and plain averaging; other settings take DiLoCo's figures, and say so), each round landing
/// `overlap_steps` inner steps after it is sent (IslandsConfig::overlap_steps: the figures without
/// overlap scaled by what overlapping measured against not, at the nearest measured H — never credited
/// with a gain), in `fragments` streaming fragments (IslandsConfig::fragments: scaled by what 5
/// fragments measured against the whole model at the same overlap — never credited with a gain). One
/// island: no cost.
IslandLossEstimate EstimateIslandLoss(int64_t islands, int64_t inner_steps, const OuterConfig& outer,
                                      int64_t overlap_steps = 0, int64_t fragments = 1);

/// Of the measured outer settings, the one estimated to lose least for `islands` at `inner_steps`.
OuterConfig BestMeasuredOuterSettings(int64_t islands, int64_t inner_steps);

}  // namespace motley
