#include "api/interruption_figures.h"

#include <filesystem>

#include <fmt/format.h>

#include "core/metrics_file.h"
#include "core/units.h"

namespace motley {

Status SetInterruptionFigure(const std::string& flag, const std::string& text, InterruptionFigure figure,
                             InterruptionCost* cost) {
  double* seconds = figure == InterruptionFigure::kRestart ? &cost->restart_s : &cost->checkpoint_interval_s;
  if (Result<double> s = ParseDuration(text); s.ok()) {
    *seconds = *s;
    return Status::Ok();
  }
  std::error_code ec;
  std::filesystem::path path(text);
  if (std::filesystem::is_directory(path, ec)) path /= "metrics.jsonl";
  if (!std::filesystem::is_regular_file(path, ec))
    return Status::InvalidArgument(fmt::format(
        "{} \"{}\": give a duration (e.g. 10min, 2h) or a run to measure it from (its folder or its "
        "metrics file)",
        flag, text));
  MOTLEY_ASSIGN_OR_RETURN(const std::vector<MetricsLine> lines, ReadMetricsFile(path.string()));
  MOTLEY_ASSIGN_OR_RETURN(const MeasuredRestarts m, MeasureRestarts(lines, path.string()));
  std::string what;
  if (figure == InterruptionFigure::kRestart) {
    *seconds = m.restart_s;
    what = fmt::format("restart {} measured over {} restart{} of {}", FormatDuration(m.restart_s), m.restarts,
                       m.restarts == 1 ? "" : "s", path.string());
  } else {
    if (!m.checkpoint_interval_s)
      return Status::InvalidArgument(fmt::format(
          "{} {}: the run wrote fewer than two checkpoints between restarts, so their interval cannot be "
          "measured; give a duration (e.g. 30min)",
          flag, path.string()));
    *seconds = *m.checkpoint_interval_s;
    what = fmt::format("checkpoint interval {} measured in {}", FormatDuration(*m.checkpoint_interval_s),
                       path.string());
  }
  cost->measured += (cost->measured.empty() ? "" : "; ") + what;
  return Status::Ok();
}

}  // namespace motley
