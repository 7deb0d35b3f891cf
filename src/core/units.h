// Quantities with units, as users write them in config files: "80GiB", "50Gbps", "900GB/s",
// "312TFLOPS", "5us". Each parser returns the value in one base unit; callers keep that unit in
// the variable name (memory_bytes, bandwidth_bytes_per_s, peak_flops_per_s, latency_s).
#pragma once

#include <string>
#include <string_view>

#include "core/status.h"

namespace motley {

/// "80GiB", "16 GB", "512MiB", "1.5TB" -> bytes. Decimal (KB, MB, GB, TB) and binary (KiB .. TiB).
Result<double> ParseBytes(std::string_view text);

/// "50Gbps" (bits), "900GB/s" (bytes), "25 GiB/s" -> bytes per second.
Result<double> ParseBandwidth(std::string_view text);

/// "312TFLOPS", "19.5 TFLOP/s" -> floating-point operations per second.
Result<double> ParseFlops(std::string_view text);

/// "5us", "1.5ms", "20 ms", "2s", "100ns", "72h", "3d" -> seconds.
Result<double> ParseDuration(std::string_view text);

/// Prices, in US dollars (motley prices in one currency): "2.99 USD/h", "$2.99/h", "2.99 USD/hour"
/// -> dollars per hour; "0.02 USD/GB", "$0.09/GB", "$0.02/GiB", "20 USD/TB" -> dollars per GB (1e9
/// bytes). Zero is a price ("0 USD/h": hardware already paid for).
Result<double> ParseUsdPerHour(std::string_view text);
Result<double> ParseUsdPerGb(std::string_view text);

/// Short human forms for reports: "80.0 GiB", "50 Gbps" / "900 GB/s", "312 TFLOPS", "5.0 us".
std::string FormatBytes(double bytes);
std::string FormatBandwidth(double bytes_per_s);
std::string FormatFlops(double flops_per_s);
std::string FormatDuration(double seconds);
/// A job's length: "45 min", "5.3 h", "2.4 days" (FormatDuration's form under a minute).
std::string FormatLongDuration(double seconds);
/// "$2.99", "$0.0213", "$1,234" -> dollars with the digits that matter.
std::string FormatUsd(double usd);
/// "6.74 B", "13.0 M", "512 K": counts such as parameters.
std::string FormatCount(double count);

}  // namespace motley
