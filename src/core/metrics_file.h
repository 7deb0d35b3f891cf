// A run's metrics (`motley train --metrics FILE`, a run folder's metrics.jsonl): one JSON object a
// line — a step's figures, or an event ("start", "rebalance", "checkpoint", "restart", ...).
// Read once, at the edge: every field motley's readers use (the report, calibrate, the run
// supervisor) is checked for its type and range here, so they read typed values and a hand-edited
// or foreign file gets one message naming its line and field. Fields motley does not read are kept
// as they are (`fields`), for display.
#pragma once

#include <cstdint>
#include <ios>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include <nlohmann/json.hpp>

#include "core/status.h"

namespace motley {

/// One rank's figures in a step's line ("ranks": [...]).
struct MetricsRank {
  int rank = 0;
  std::optional<double> compute_s, comm_s;  // absent where the line has none
  double peak_memory_bytes = -1;            // < 0: not measured
};

/// One line. A number the run could not write (a non-finite loss is written as null) reads as NaN.
struct MetricsLine {
  int line = 0;                 // 1-based, in the file (from the byte it was read from)
  std::optional<int64_t> step;  // the step the line is about ("step", or an event's "first_step")
  std::string event;            // "" for a step's line
  std::string schedule_hash;    // the schedule the steps from here on run ("" where the line names none)
  std::optional<double> loss, val_loss, step_time_s, tokens_per_s;
  std::optional<double> time_unix_s;  // when it was written (seconds since 1970; older runs wrote none)
  double migrated_units = 0, pruned_fraction = 0;
  std::vector<MetricsRank> ranks;                       // a step's per-rank figures
  nlohmann::json stragglers = nlohmann::json::array();  // the ranks straggling at this step
  nlohmann::json fields;                                // the whole line as written
};

/// Reads `text` (from `file`, for messages). A last line cut short (a run still writing it) is left
/// out; any other line that is not an object, or a field of the wrong type or out of range, is an
/// error "<file>:<line>: ..." naming the field and the fix.
Result<std::vector<MetricsLine>> ParseMetricsJsonl(std::string_view text, const std::string& file,
                                                   int first_line = 1);

/// The clock a metrics line's "time_unix_s" is read on: seconds since 1970, to the microsecond.
double NowUnixS();

/// What a run's restarts took, read from its metrics (`motley plan --restart-time RUN`): each
/// "restart" event's time from the last step written before it to the start of the first step
/// after it (the failure noticed, a plan made, the ranks started, the checkpoint loaded — not the
/// steps redone), and the interval between its checkpoints.
struct MeasuredRestarts {
  int restarts = 0;
  double restart_s = 0;                         // their mean
  std::optional<double> checkpoint_interval_s;  // the median interval; none without two in a stretch
};
/// An error naming `file` when the run never restarted or its lines carry no times.
Result<MeasuredRestarts> MeasureRestarts(const std::vector<MetricsLine>& lines, const std::string& file);

/// Reads the metrics file at `path` from byte `from_byte` on (where a restarted run's lines begin).
/// A path that is not a regular file, or one over the text cap, is refused.
Result<std::vector<MetricsLine>> ReadMetricsFile(const std::string& path, std::streamoff from_byte = 0);

}  // namespace motley
