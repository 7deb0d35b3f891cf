#include "core/units.h"

#include <charconv>
#include <cmath>
#include <span>

#include <fmt/format.h>

namespace motley {
namespace {

struct UnitScale {
  std::string_view unit;
  double scale;  // multiplier to the base unit
};

constexpr double kKi = 1024.0;

constexpr UnitScale kByteUnits[] = {
    {"B", 1},
    {"KB", 1e3},
    {"kB", 1e3},
    {"MB", 1e6},
    {"GB", 1e9},
    {"TB", 1e12},
    {"KiB", kKi},
    {"MiB", kKi* kKi},
    {"GiB", kKi* kKi* kKi},
    {"TiB", kKi* kKi* kKi* kKi},
};

constexpr UnitScale kBandwidthUnits[] = {
    // bits per second
    {"bps", 1.0 / 8},
    {"Kbps", 1e3 / 8},
    {"kbps", 1e3 / 8},
    {"Mbps", 1e6 / 8},
    {"Gbps", 1e9 / 8},
    {"Tbps", 1e12 / 8},
    {"Kb/s", 1e3 / 8},
    {"Mb/s", 1e6 / 8},
    {"Gb/s", 1e9 / 8},
    {"Tb/s", 1e12 / 8},
    {"Gbit/s", 1e9 / 8},
    // bytes per second
    {"B/s", 1},
    {"KB/s", 1e3},
    {"kB/s", 1e3},
    {"MB/s", 1e6},
    {"GB/s", 1e9},
    {"TB/s", 1e12},
    {"GBps", 1e9},
    {"MBps", 1e6},
    {"KiB/s", kKi},
    {"MiB/s", kKi* kKi},
    {"GiB/s", kKi* kKi* kKi},
};

constexpr UnitScale kFlopsUnits[] = {
    {"FLOPS", 1},     {"KFLOPS", 1e3}, {"MFLOPS", 1e6},  {"GFLOPS", 1e9},   {"TFLOPS", 1e12},
    {"PFLOPS", 1e15}, {"FLOP/s", 1},   {"GFLOP/s", 1e9}, {"TFLOP/s", 1e12}, {"PFLOP/s", 1e15},
};

constexpr UnitScale kDurationUnits[] = {
    {"ns", 1e-9}, {"us", 1e-6}, {"µs", 1e-6}, {"ms", 1e-3}, {"s", 1}, {"min", 60}, {"h", 3600}, {"d", 86400},
};

constexpr UnitScale kUsdPerHourUnits[] = {
    {"USD/h", 1}, {"USD/hour", 1}, {"USD/hr", 1}, {"/h", 1}, {"/hour", 1}, {"/hr", 1},
};

constexpr UnitScale kUsdPerGbUnits[] = {
    {"USD/GB", 1}, {"USD/GiB", 1e9 / (kKi * kKi * kKi)}, {"USD/TB", 1e-3}, {"USD/MB", 1e3},
    {"/GB", 1},    {"/GiB", 1e9 / (kKi * kKi * kKi)},    {"/TB", 1e-3},    {"/MB", 1e3},
};

std::string UnitList(std::span<const UnitScale> units) {
  std::string out;
  for (const auto& u : units) {
    if (!out.empty()) out += ", ";
    out += u.unit;
  }
  return out;
}

Result<double> ParseQuantity(std::string_view text, std::span<const UnitScale> units, std::string_view what,
                             std::string_view example) {
  auto fail = [&](const std::string& why) -> Status {
    return Status::InvalidArgument(
        fmt::format("cannot read \"{}\" as {}: {}; write it like \"{}\"", text, what, why, example));
  };
  size_t begin = 0;
  while (begin < text.size() && text[begin] == ' ') ++begin;
  double number = 0;
  auto [ptr, ec] = std::from_chars(text.data() + begin, text.data() + text.size(), number);
  if (ec != std::errc() || ptr == text.data() + begin) return fail("it does not start with a number");
  std::string_view unit(ptr, text.data() + text.size() - ptr);
  while (!unit.empty() && unit.front() == ' ') unit.remove_prefix(1);
  while (!unit.empty() && unit.back() == ' ') unit.remove_suffix(1);
  if (unit.empty()) return fail(fmt::format("it has no unit (one of {})", UnitList(units)));
  for (const auto& u : units) {
    if (u.unit == unit) {
      double value = number * u.scale;
      if (!std::isfinite(value)) return fail("the value is not finite");
      return value;
    }
  }
  return fail(fmt::format("unknown unit \"{}\" (use one of {})", unit, UnitList(units)));
}

std::string FormatScaled(double value, std::span<const UnitScale> units) {
  // Picks the largest unit whose scale is <= value, from a list sorted ascending.
  const UnitScale* best = &units.front();
  for (const auto& u : units)
    if (std::abs(value) >= u.scale) best = &u;
  double scaled = value / best->scale;
  int decimals = std::abs(scaled) >= 100 ? 0 : (std::abs(scaled) >= 10 ? 1 : 2);
  return fmt::format("{:.{}f} {}", scaled, decimals, best->unit);
}

constexpr UnitScale kBytesFormat[] = {
    {"B", 1}, {"KiB", kKi}, {"MiB", kKi* kKi}, {"GiB", kKi* kKi* kKi}, {"TiB", kKi* kKi* kKi* kKi}};
constexpr UnitScale kBitsFormat[] = {
    {"bps", 1.0 / 8}, {"Kbps", 1e3 / 8}, {"Mbps", 1e6 / 8}, {"Gbps", 1e9 / 8}, {"Tbps", 1e12 / 8}};
constexpr UnitScale kBytesPerSFormat[] = {{"GB/s", 1e9}, {"TB/s", 1e12}};
constexpr UnitScale kFlopsFormat[] = {{"FLOPS", 1},    {"KFLOPS", 1e3},  {"MFLOPS", 1e6},
                                      {"GFLOPS", 1e9}, {"TFLOPS", 1e12}, {"PFLOPS", 1e15}};
constexpr UnitScale kDurationFormat[] = {{"ns", 1e-9}, {"us", 1e-6}, {"ms", 1e-3}, {"s", 1}};
constexpr UnitScale kCountFormat[] = {{"", 1}, {"K", 1e3}, {"M", 1e6}, {"B", 1e9}, {"T", 1e12}};

}  // namespace

Result<double> ParseBytes(std::string_view text) {
  return ParseQuantity(text, kByteUnits, "a size in bytes", "80GiB");
}
Result<double> ParseBandwidth(std::string_view text) {
  return ParseQuantity(text, kBandwidthUnits, "a bandwidth", "50Gbps\" or \"900GB/s");
}
Result<double> ParseFlops(std::string_view text) {
  return ParseQuantity(text, kFlopsUnits, "a FLOP rate", "312TFLOPS");
}
Result<double> ParseDuration(std::string_view text) {
  return ParseQuantity(text, kDurationUnits, "a duration", "5us");
}

namespace {

// A price: "2.99 USD/h", or with a leading dollar sign "$2.99/h" (its unit then the "/h" part).
Result<double> ParseUsd(std::string_view text, std::span<const UnitScale> units, std::string_view what,
                        std::string_view example) {
  std::string_view t = text;
  while (!t.empty() && t.front() == ' ') t.remove_prefix(1);
  const bool dollar = !t.empty() && t.front() == '$';
  if (dollar) t.remove_prefix(1);
  Result<double> v = ParseQuantity(t, units, what, example);
  if (!v.ok()) return v;
  const size_t slash = t.find('/');
  const bool unit_has_usd = t.find("USD") != std::string_view::npos;
  if (dollar == unit_has_usd || slash == std::string_view::npos)
    return Status::InvalidArgument(
        fmt::format("cannot read \"{}\" as {}: give the dollars once, as \"{}\"", text, what, example));
  if (*v < 0) return Status::InvalidArgument(fmt::format("{} \"{}\" is negative", what, text));
  return v;
}

}  // namespace

Result<double> ParseUsdPerHour(std::string_view text) {
  return ParseUsd(text, kUsdPerHourUnits, "a price per hour in US dollars", "2.99 USD/h");
}
Result<double> ParseUsdPerGb(std::string_view text) {
  return ParseUsd(text, kUsdPerGbUnits, "a price per GB in US dollars", "0.02 USD/GB");
}

std::string FormatUsd(double usd) {
  const double a = std::abs(usd);
  if (a >= 1000) return fmt::format("${:.0f}", usd);
  if (a >= 100) return fmt::format("${:.1f}", usd);
  if (a >= 1 || a == 0) return fmt::format("${:.2f}", usd);
  return fmt::format("${:.3g}", usd);
}

std::string FormatBytes(double bytes) { return FormatScaled(bytes, kBytesFormat); }
std::string FormatBandwidth(double bytes_per_s) {
  // Network links read best in bits, memory and NVLink in bytes.
  return bytes_per_s >= 100e9 ? FormatScaled(bytes_per_s, kBytesPerSFormat)
                              : FormatScaled(bytes_per_s, kBitsFormat);
}
std::string FormatFlops(double flops_per_s) { return FormatScaled(flops_per_s, kFlopsFormat); }
std::string FormatDuration(double seconds) { return FormatScaled(seconds, kDurationFormat); }
std::string FormatLongDuration(double seconds) {
  if (seconds >= 2 * 86400) return fmt::format("{:.1f} days", seconds / 86400);
  if (seconds >= 2 * 3600) return fmt::format("{:.1f} h", seconds / 3600);
  if (seconds >= 60) return fmt::format("{:.0f} min", seconds / 60);
  return FormatDuration(seconds);
}
std::string FormatCount(double count) {
  std::string s = FormatScaled(count, kCountFormat);
  while (!s.empty() && s.back() == ' ') s.pop_back();
  return s;
}

}  // namespace motley
