// What a spot device's interruption costs a run (cost/money.h InterruptionCost), as the user gives
// it: a duration ("10min"), or a run of motley's to measure it from — its metrics file or its folder
// (metrics.jsonl in it) — whose restarts (`motley train --max-restarts`) and checkpoints say how
// long a restart took and how often the run checkpointed (core/metrics_file.h MeasureRestarts).
#pragma once

#include <string>

#include "core/status.h"
#include "cost/money.h"

namespace motley {

enum class InterruptionFigure { kCheckpointInterval, kRestart };

/// Sets `figure` of `cost` from `text` and, when measured, says so in cost->measured. An error names
/// the flag (`flag`) and what it takes.
Status SetInterruptionFigure(const std::string& flag, const std::string& text, InterruptionFigure figure,
                             InterruptionCost* cost);

}  // namespace motley
