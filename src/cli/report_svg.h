// The report page's charts (cmd_report.cc) as inline SVG: no script, no network — each shape
// carries a <title> the browser shows on hover. Sizes in CSS pixels, times in seconds.
#pragma once

#include <functional>
#include <string>
#include <utility>
#include <vector>

namespace motley::cli::svg {

/// Text for HTML and SVG: & < > " escaped.
std::string Escape(const std::string& text);

// Timelines: what each device did during one step.
enum class SpanKind { kCompute, kCommunication, kCopy };
struct Span {
  double start_s = 0, end_s = 0;
  SpanKind kind = SpanKind::kCompute;
  std::string what;  // an op's name, for the tooltip
};
struct TimelineRow {
  std::string label;  // "rank 0 · device 0 (a100-80gb)"
  std::vector<Span> spans;
};
/// One row per device: compute, communication and copies in three bands on the same time axis
/// [0, axis_s] (idle: the background where a band is empty). Spans closer than a pixel merge.
std::string Timeline(const std::string& id, const std::vector<TimelineRow>& rows, double axis_s);
/// The colour key of Timeline.
std::string TimelineLegend();

// Bars: one per label, longer is more.
struct Bar {
  std::string label;
  double value = 0;  // <= 0: drawn as missing
  std::string text;  // printed after the bar
  bool highlight = false;
};
std::string Bars(const std::string& id, const std::vector<Bar>& bars, const std::string& axis_label);

// Memory: each device's capacity, the simulator's peak and (when measured) the run's.
struct MemoryRow {
  std::string label;
  double capacity_bytes = 0;
  double predicted_bytes = 0;
  double measured_bytes = -1;  // < 0: not measured
};
std::string Memory(const std::string& id, const std::vector<MemoryRow>& rows);

// Lines: y against x, several series on the same axes.
struct Series {
  std::string name;
  std::vector<std::pair<double, double>> points;
  std::string color;
  bool dots = false;  // points marked (few, e.g. validation)
};
std::string Lines(const std::string& id, const std::vector<Series>& series, const std::string& x_label,
                  const std::string& y_label);

// Scatter: what could be rented, price against speed — every allocation planned, the front of
// price and speed joined by a line, the chosen one and the page's own plan marked.
struct Dot {
  double x = 0, y = 0;
  std::string text;  // the tooltip
  enum Kind { kCandidate, kFront, kChosen, kThisPlan } kind = kCandidate;
};
std::string Scatter(const std::string& id, const std::vector<Dot>& dots, const std::string& x_label,
                    const std::string& y_label);

}  // namespace motley::cli::svg
