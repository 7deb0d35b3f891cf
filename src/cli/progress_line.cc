#include "cli/progress_line.h"

#include <unistd.h>
#include <cstdint>

#include <cmath>

#include <fmt/format.h>

namespace motley::cli {

ProgressLine::ProgressLine(double log_interval_s)
    : tty_(::isatty(STDERR_FILENO) == 1),
      log_interval_s_(log_interval_s),
      last_(std::chrono::steady_clock::now()) {}

ProgressLine::~ProgressLine() { Finish(); }

void ProgressLine::Update(const std::string& text, bool force) {
  if (tty_) {
    fmt::print(stderr, "\r{}\x1b[K", text);
    std::fflush(stderr);
    live_ = true;
    return;
  }
  const auto now = std::chrono::steady_clock::now();
  if (!force && printed_once_ && std::chrono::duration<double>(now - last_).count() < log_interval_s_) return;
  fmt::print(stderr, "{}\n", text);
  last_ = now;
  printed_once_ = true;
}

void ProgressLine::Print(const std::string& text) {
  if (live_) fmt::print(stderr, "\r\x1b[K");
  fmt::print(stderr, "{}\n", text);
  live_ = false;
}

void ProgressLine::Finish() {
  if (live_) fmt::print(stderr, "\n");
  live_ = false;
}

std::string FormatDuration(double seconds) {
  if (!std::isfinite(seconds) || seconds < 0) return "?";
  const auto s = static_cast<int64_t>(std::llround(seconds));
  if (s >= 3600) return fmt::format("{}h{:02d}m", s / 3600, (s % 3600) / 60);
  if (s >= 60) return fmt::format("{}m{:02d}s", s / 60, s % 60);
  return fmt::format("{}s", s);
}

}  // namespace motley::cli
