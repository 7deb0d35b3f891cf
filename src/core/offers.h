// An offers file: what can be rented — "up to N nodes of M devices of type T in region R at $P an
// hour a device" rows, with the network between regions and what egress costs — from which the
// planner chooses how many of each to take (plan/offer_search.h). The format: README.md ("What to
// rent") and examples/offers/.
#pragma once

#include <string>
#include <string_view>
#include <vector>

#include "core/cluster.h"
#include "core/prices.h"
#include "core/status.h"

namespace motley {

struct Offer {
  std::string name;   // unique in the file: the row's name, or "<device>@<region>"
  NodeSpec node;      // one node of it: its devices, links, region and price
  int max_nodes = 1;  // up to this many nodes can be taken
  // A row with a spot price is two offers: its on-demand nodes, and after every row's, the same
  // nodes as spot ("<name>-spot", node.spot) — sharing the row's max_nodes: this is the on-demand
  // offer's index for the spot one, -1 otherwise.
  int spot_of = -1;
};

struct OfferList {
  std::string name;
  GpuCatalog catalog;  // the built-in catalog plus the file's [device_types]
  NetworkConfig network;
  std::vector<Offer> offers;
  std::vector<EgressPrice> egress;

  /// Devices if every node of every offer is taken.
  int max_devices() const;
};

/// How many nodes of each offer (same order as OfferList::offers).
using Allocation = std::vector<int>;

/// Every node of every offer: on demand and, where a row has a spot price, as spot too — what
/// might be taken (one allocation takes a row's nodes at most once: WithinOffers).
Allocation AllOffered(const OfferList& offers);

/// The allocation with each spot offer cut to what its row's on-demand offer leaves (a row's nodes
/// are taken once, on demand or as spot).
Allocation WithinOffers(const OfferList& offers, Allocation nodes);

/// The cluster of an allocation: `nodes[i]` nodes of offer i ("<offer>-<k>"), priced, with the
/// file's network and egress. REQUIRES: nodes.size() == offers.size(), 0 <= nodes[i] <= max_nodes,
/// and at least one node.
Cluster ClusterOfAllocation(const OfferList& offers, const Allocation& nodes);

/// "2 x h100@us-east (16 GPUs), 1 x a10g@eu-west (4 GPUs)".
std::string DescribeAllocation(const OfferList& offers, const Allocation& nodes);

/// `file` names the text in messages.
Result<OfferList> ParseOffersToml(std::string_view text, const std::string& file);
/// An offers file's path, or the name of a built-in example ("three-clouds").
Result<OfferList> LoadOffers(const std::string& name_or_path);
/// Its text, and the name messages give it (the path, or the built-in file's).
struct OffersText {
  std::string text, file;
};
Result<OffersText> ReadOffers(const std::string& name_or_path);

}  // namespace motley
