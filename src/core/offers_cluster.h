// The cluster file of what was chosen from an offers file: what `motley plan --offers F -o P`
// writes beside the plan, so that the plan can be simulated, validated and run on what is rented.
#pragma once

#include <string>

#include "core/offers.h"
#include "core/status.h"

namespace motley {

/// A cluster file (TOML) of `nodes[i]` nodes of each offer of the offers file (a path, or a
/// built-in name as LoadOffers takes): the file's own tables but [[offers]] (its name, custom
/// device types, [network], [[egress]]), each offer's taken nodes as [[nodes]] named "<offer>-<k>"
/// in ClusterOfAllocation's order (so device ids match ClusterOfAllocation(offers, nodes)), and their
/// prices as [[prices]] rows by device type and region, with their sources. An error when two taken
/// offers rent one device type in one region at different prices (a cluster file prices a type
/// per region) or when nothing is taken.
Result<std::string> ClusterTomlOfAllocation(const std::string& offers_name_or_path, const Allocation& nodes);

}  // namespace motley
