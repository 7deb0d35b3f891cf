// A trace in the Chrome trace-event format, as `motley simulate --trace` and `motley train --trace`
// write it (a run folder's trace.json): its complete spans ("ph": "X"), one row per rank ("pid").
// Read once, at the edge, as the report draws it: fields checked for type and range, the rest of
// the format (metadata, instant and counter events, "args") left unread.
#pragma once

#include <string>
#include <string_view>
#include <vector>

#include "core/status.h"

namespace motley {

struct TraceSpan {
  int rank = 0;            // "pid"
  double start_us = 0;     // "ts"
  double duration_us = 0;  // "dur" (0 where absent)
  std::string category;    // "cat": compute, send, allreduce, ...
  std::string name;
};

/// The spans of `text` (from `file`, for messages): an object with "traceEvents" or a bare list of
/// events. A span with a non-numeric or non-finite time, a negative duration or a "pid" that is
/// not a rank is an error naming the event and the field.
Result<std::vector<TraceSpan>> ParseTraceJson(std::string_view text, const std::string& file);

/// The trace file at `path` (a regular file, within the text cap).
Result<std::vector<TraceSpan>> ReadTraceFile(const std::string& path);

}  // namespace motley
