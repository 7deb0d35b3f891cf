#include "core/offers_cluster.h"

#include <map>
#include <set>
#include <sstream>
#include <utility>

#include <fmt/format.h>

#include "core/toml_reader.h"

namespace motley {
namespace {

// An offer's keys that describe its price or its availability, not its nodes.
bool IsOfferOnlyKey(std::string_view key) {
  return key == "name" || key == "nodes" || key == "price" || key == "spot_price" ||
         key == "spot_interruptions_per_hour" || key == "source";
}

}  // namespace

Result<std::string> ClusterTomlOfAllocation(const std::string& offers_name_or_path, const Allocation& nodes) {
  MOTLEY_ASSIGN_OR_RETURN(const OffersText read, ReadOffers(offers_name_or_path));
  const std::string &text = read.text, &file = read.file;
  // Validated first: the rows below are then well formed.
  MOTLEY_ASSIGN_OR_RETURN(const OfferList offers, ParseOffersToml(text, file));
  if (nodes.size() != offers.offers.size() || WithinOffers(offers, nodes) != nodes)
    return Status::InvalidArgument(
        fmt::format("an allocation of {} ({} offers) counts {} offers or takes more than a row offers", file,
                    offers.offers.size(), nodes.size()));
  Diagnostics diag;
  const std::unique_ptr<toml::table> root = ParseTomlText(text, file, &diag);
  if (!root) return diag.ToStatus();
  toml::table out;
  for (const auto& [key, value] : *root)
    if (key.str() != "offers" && key.str() != "egress") out.insert(key.str(), value);
  out.insert_or_assign("name", fmt::format("{} (rented)", offers.name.empty() ? "offers" : offers.name));
  toml::array node_rows, price_rows;
  // (device type, region) -> the offer that priced it
  std::map<std::pair<std::string, std::string>, size_t> priced;
  const toml::array& rows = *(*root)["offers"].as_array();
  for (size_t i = 0; i < nodes.size(); ++i) {
    const Offer& o = offers.offers[i];
    if (nodes[i] <= 0) continue;
    const toml::table& row = *rows[o.spot_of < 0 ? i : static_cast<size_t>(o.spot_of)].as_table();
    for (int k = 0; k < nodes[i]; ++k) {
      toml::table node;
      node.insert("name", fmt::format("{}-{}", o.name, k));
      if (o.node.spot) node.insert("spot", true);
      for (const auto& [key, value] : row)
        if (!IsOfferOnlyKey(key.str())) node.insert(key.str(), value);
      node_rows.push_back(std::move(node));
    }
    const auto [it, first] = priced.try_emplace({o.node.device_type, o.node.region}, i);
    if (!first) {
      const Offer& other = offers.offers[it->second];
      const DevicePrice &a = *other.node.price, &b = *o.node.price;
      if (a.usd_per_hour != b.usd_per_hour || a.spot_usd_per_hour != b.spot_usd_per_hour ||
          a.spot_interruptions_per_hour != b.spot_interruptions_per_hour)
        return Status::InvalidArgument(fmt::format(
            "{}: offers '{}' and '{}' both rent {} in {} at different prices, and a cluster file prices a "
            "device type per region: take one of them, or give one of them its own region name",
            file, other.name, o.name, o.node.device_type, o.node.region));
      continue;
    }
    toml::table price{{"device", o.node.device_type}, {"region", o.node.region}};
    for (const char* key : {"price", "spot_price", "spot_interruptions_per_hour", "source"})
      if (const toml::node* v = row.get(key)) price.insert(key, *v);
    price_rows.push_back(std::move(price));
  }
  if (node_rows.empty()) return Status::InvalidArgument("the allocation takes no node of any offer");
  // Egress between the regions taken (and to the internet from them).
  std::set<std::string> regions;
  for (size_t i = 0; i < nodes.size(); ++i)
    if (nodes[i] > 0) regions.insert(offers.offers[i].node.region);
  toml::array egress_rows;
  if (const toml::array* egress = (*root)["egress"].as_array())
    for (const toml::node& row : *egress) {
      const toml::table& t = *row.as_table();
      const std::string from = t["from"].value_or(std::string()), to = t["to"].value_or(std::string());
      if (regions.count(from) && (to == "internet" || regions.count(to))) egress_rows.push_back(t);
    }
  if (!egress_rows.empty()) out.insert_or_assign("egress", std::move(egress_rows));
  out.insert_or_assign("nodes", std::move(node_rows));
  out.insert_or_assign("prices", std::move(price_rows));
  std::ostringstream s;
  s << "# What `motley plan --offers " << offers_name_or_path
    << "` chose to rent, as a cluster file: the offers' network, egress and prices, and the nodes taken.\n"
    << out << "\n";
  return s.str();
}

}  // namespace motley
