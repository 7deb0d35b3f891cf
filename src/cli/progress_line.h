// ProgressLine: one live status line on stderr. On a terminal it is rewritten in place; in a log
// (not a terminal) a line is printed at most every `log_interval_s` seconds, so logs stay short.
#pragma once

#include <chrono>
#include <string>

namespace motley::cli {

class ProgressLine {
 public:
  explicit ProgressLine(double log_interval_s = 10.0);
  ~ProgressLine();  // ends the line
  /// Shows `text`; `force` prints it even in a log between intervals (the last update, say).
  void Update(const std::string& text, bool force = false);
  /// Prints a line of its own above the live line (a validation result, a checkpoint).
  void Print(const std::string& text);
  void Finish();

 private:
  bool tty_;
  bool live_ = false;  // a rewritten line is on screen
  double log_interval_s_;
  std::chrono::steady_clock::time_point last_;
  bool printed_once_ = false;
};

/// "1h02m", "3m05s", "12s".
std::string FormatDuration(double seconds);

}  // namespace motley::cli
