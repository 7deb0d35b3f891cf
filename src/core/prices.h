// What devices and traffic cost, in US dollars: a device's price an hour (on demand, and optionally
// spot with its expected interruptions), and data egress a GB from one region to another. Read
// from a cluster file's [[prices]] and [[egress]] or an offers file's rows (offers.h); the cost of
// a plan is cost/money.h's.
#pragma once

#include <optional>
#include <string>
#include <vector>

namespace motley {

struct DevicePrice {
  double usd_per_hour = 0;                  // on demand, per device
  std::optional<double> spot_usd_per_hour;  // spot (preemptible), per device, when offered
  double spot_interruptions_per_hour = 0;   // expected interruptions of a spot device an hour
  std::string source;                       // where the price comes from (a list price's page and date)
};

/// Data leaving `from` for `to`, per GB (1e9 bytes). `to` is a region, or "internet": the price for
/// traffic to any region without its own row (traffic between providers leaves over the internet).
struct EgressPrice {
  std::string from, to;
  double usd_per_gb = 0;
};

inline constexpr const char* kInternet = "internet";

/// The price a GB from region `from` to region `to`: their row, else `from`'s row to the internet;
/// nullopt when neither exists. Zero within a region.
std::optional<double> EgressUsdPerGb(const std::vector<EgressPrice>& egress, const std::string& from,
                                     const std::string& to);

}  // namespace motley
