#include "core/prices_parse.h"

#include <algorithm>
#include <map>
#include <utility>

#include <fmt/format.h>

#include "core/suggest.h"
#include "core/units.h"

namespace motley {

std::optional<DevicePrice> ReadDevicePrice(TomlTable& t) {
  DevicePrice p;
  const std::optional<double> price = t.UsdPerHour("price", Need::kRequired);
  if (auto v = t.UsdPerHour("spot_price")) p.spot_usd_per_hour = *v;
  const std::optional<double> rate = t.Number("spot_interruptions_per_hour", 0.0, 60.0);
  if (rate) p.spot_interruptions_per_hour = *rate;
  if (auto v = t.String("source")) p.source = *v;
  if (p.spot_usd_per_hour && !t.Has("spot_interruptions_per_hour"))
    t.Error("spot_price",
            "a spot price needs the interruptions to expect: add spot_interruptions_per_hour (e.g. 0.05, one "
            "interruption in 20 hours a device; the provider's interruption-frequency figures give it)");
  if (!p.spot_usd_per_hour && t.Has("spot_interruptions_per_hour"))
    t.Error("spot_interruptions_per_hour", "is given without spot_price; add spot_price = \"1.20 USD/h\"");
  if (p.spot_usd_per_hour && price && *p.spot_usd_per_hour > *price)
    t.Error("spot_price", fmt::format("spot price {}/h is above the on-demand price {}/h; spot capacity is "
                                      "the cheaper one: check the two figures",
                                      FormatUsd(*p.spot_usd_per_hour), FormatUsd(*price)));
  if (!price) return std::nullopt;
  p.usd_per_hour = *price;
  return p;
}

std::vector<EgressPrice> ReadEgress(TomlTable& root, const std::vector<std::string>& regions) {
  std::vector<EgressPrice> out;
  std::map<std::pair<std::string, std::string>, SourcePos> seen;
  std::vector<std::string> targets = regions;
  targets.push_back(kInternet);
  for (TomlTable& t : root.TableArray("egress")) {
    const std::optional<std::string> from = t.String("from", Need::kRequired);
    const std::optional<std::string> to = t.String("to", Need::kRequired);
    const std::optional<double> price = t.UsdPerGb("price", Need::kRequired);
    t.Finish();
    bool ok = from && to && price;
    if (from && std::find(regions.begin(), regions.end(), *from) == regions.end()) {
      t.Error("from", fmt::format("'{}' is not a region of this file{} Its regions: {}", *from,
                                  DidYouMeanOrPeriod(*from, regions), JoinNames(regions)));
      ok = false;
    }
    if (to && std::find(targets.begin(), targets.end(), *to) == targets.end()) {
      t.Error("to", fmt::format("'{}' is neither a region of this file nor \"internet\"{} Its regions: {}",
                                *to, DidYouMeanOrPeriod(*to, targets), JoinNames(regions)));
      ok = false;
    }
    if (ok && *from == *to) {
      t.Error("to", fmt::format("egress from '{}' to itself: traffic within a region is not charged; name "
                                "another region",
                                *from));
      ok = false;
    }
    if (!ok) continue;
    if (auto [it, inserted] = seen.try_emplace({*from, *to}, t.Pos()); !inserted) {
      t.ErrorHere(fmt::format("a second egress price from '{}' to '{}' (the first at {}); keep one", *from,
                              *to, it->second.ToString()));
      continue;
    }
    out.push_back({*from, *to, *price});
  }
  return out;
}

void CheckEgressComplete(TomlTable& root, const std::vector<EgressPrice>& egress,
                         const std::vector<std::string>& regions) {
  std::vector<std::string> missing;
  for (const std::string& a : regions)
    for (const std::string& b : regions)
      if (a != b && !EgressUsdPerGb(egress, a, b)) missing.push_back(fmt::format("{} -> {}", a, b));
  if (missing.empty()) return;
  root.ErrorHere(fmt::format(
      "no egress price for traffic {} (a priced plan pays for what crosses regions); add [[egress]] rows "
      "with from, to and price = \"0.02 USD/GB\" (to = \"internet\" prices a region's traffic to every "
      "region without its own row)",
      JoinNames(missing)));
}

}  // namespace motley
