// Reading prices from a cluster file or an offers file: a device's price keys, and [[egress]] rows,
// each checked against the regions the file has.
#pragma once

#include <optional>
#include <string>
#include <vector>

#include "core/prices.h"
#include "core/toml_reader.h"

namespace motley {

/// A device's price from `t`'s keys: price (required), spot_price and spot_interruptions_per_hour
/// (together), source. Nullopt when `price` is missing or wrong (the error is recorded).
std::optional<DevicePrice> ReadDevicePrice(TomlTable& t);

/// The file's [[egress]] rows: from (one of `regions`), to (another, or "internet"), price.
std::vector<EgressPrice> ReadEgress(TomlTable& root, const std::vector<std::string>& regions);

/// Every ordered pair of `regions` has an egress price (its row, or its source's row to the
/// internet); else one error at `root` naming the pairs without one and the rows to add.
void CheckEgressComplete(TomlTable& root, const std::vector<EgressPrice>& egress,
                         const std::vector<std::string>& regions);

}  // namespace motley
