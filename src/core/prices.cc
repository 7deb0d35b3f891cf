#include "core/prices.h"

namespace motley {

std::optional<double> EgressUsdPerGb(const std::vector<EgressPrice>& egress, const std::string& from,
                                     const std::string& to) {
  if (from == to) return 0.0;
  std::optional<double> internet;
  for (const EgressPrice& e : egress) {
    if (e.from != from) continue;
    if (e.to == to) return e.usd_per_gb;
    if (e.to == kInternet) internet = e.usd_per_gb;
  }
  return internet;
}

}  // namespace motley
