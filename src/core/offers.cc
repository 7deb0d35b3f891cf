#include "core/offers.h"

#include <algorithm>
#include <filesystem>
#include <map>
#include <set>

#include <fmt/format.h>

#include "core/builtin_files.h"
#include "core/check.h"
#include "core/cluster_parse.h"
#include "core/prices_parse.h"
#include "core/suggest.h"
#include "core/toml_reader.h"

namespace motley {
namespace {

constexpr int kMaxOfferNodes = 4096;

void ParseOffer(TomlTable& t, const GpuCatalog& catalog, OfferList* list) {
  Offer o;
  const std::optional<std::string> name = t.String("name");
  const GpuSpec* spec = ReadNodeDevices(t, catalog, &o.node);
  const std::optional<std::string> region = t.String("region", Need::kRequired);
  const std::optional<int64_t> nodes = t.Int("nodes", 1, kMaxOfferNodes, Need::kRequired);
  const std::optional<DevicePrice> price = ReadDevicePrice(t);
  if (price && price->source.empty())
    t.Error("price",
            "an offer's price needs its source: add source = \"<the provider's price page, and the "
            "date you read it>\"");
  t.Finish();
  if (!spec || !region || !nodes || !price) return;
  o.node.region = *region;
  o.node.price = *price;
  o.max_nodes = static_cast<int>(*nodes);
  o.name = name.value_or(fmt::format("{}@{}", spec->name, *region));
  o.node.name = o.name;
  list->offers.push_back(std::move(o));
}

}  // namespace

int OfferList::max_devices() const {
  int n = 0;
  for (const Offer& o : offers)
    if (o.spot_of < 0) n += o.max_nodes * o.node.num_devices;
  return n;
}

Allocation AllOffered(const OfferList& offers) {
  Allocation all;
  for (const Offer& o : offers.offers) all.push_back(o.max_nodes);
  return all;
}

Allocation WithinOffers(const OfferList& offers, Allocation nodes) {
  MOTLEY_CHECK_EQ(nodes.size(), offers.offers.size());
  for (size_t i = 0; i < nodes.size(); ++i)
    if (const int row = offers.offers[i].spot_of; row >= 0)
      nodes[i] = std::min(nodes[i], offers.offers[i].max_nodes - nodes[static_cast<size_t>(row)]);
  return nodes;
}

Cluster ClusterOfAllocation(const OfferList& offers, const Allocation& nodes) {
  MOTLEY_CHECK_EQ(nodes.size(), offers.offers.size());
  Cluster c;
  c.name = offers.name;
  c.catalog = offers.catalog;
  c.network = offers.network;
  c.egress = offers.egress;
  for (size_t i = 0; i < nodes.size(); ++i) {
    MOTLEY_CHECK(nodes[i] >= 0 && nodes[i] <= offers.offers[i].max_nodes);
    for (int k = 0; k < nodes[i]; ++k) {
      c.nodes.push_back(offers.offers[i].node);
      c.nodes.back().name = fmt::format("{}-{}", offers.offers[i].name, k);
    }
  }
  MOTLEY_CHECK(!c.nodes.empty());
  c.Finalize();
  return c;
}

std::string DescribeAllocation(const OfferList& offers, const Allocation& nodes) {
  std::string out;
  for (size_t i = 0; i < nodes.size(); ++i) {
    if (nodes[i] == 0) continue;
    const Offer& o = offers.offers[i];
    out += fmt::format("{}{} x {} ({} {})", out.empty() ? "" : ", ", nodes[i], o.name,
                       nodes[i] * o.node.num_devices, o.node.device_type);
  }
  return out.empty() ? "nothing" : out;
}

Result<OfferList> ParseOffersToml(std::string_view text, const std::string& file) {
  Diagnostics diag;
  auto root_table = ParseTomlText(text, file, &diag);
  if (!root_table) return diag.ToStatus();
  TomlTable root(*root_table, "", file, &diag);
  OfferList list;
  if (auto v = root.String("name")) list.name = *v;
  list.catalog = ParseCatalog(root);
  if (auto net = root.Table("network")) ParseNetwork(*net, &list.network);
  std::vector<TomlTable> rows = root.TableArray("offers", Need::kRequired);
  std::map<std::string, SourcePos> names;
  for (TomlTable& t : rows) {
    const size_t before = list.offers.size();
    ParseOffer(t, list.catalog, &list);
    if (list.offers.size() == before) continue;
    const Offer& o = list.offers.back();
    if (auto [it, inserted] = names.try_emplace(o.name, t.Pos()); !inserted) {
      t.ErrorHere(
          fmt::format("a second offer named '{}' (the first at {}); give each row its own name = \"...\"",
                      o.name, it->second.ToString()));
      list.offers.pop_back();
      continue;
    }
    if (!t.Has("nic_bandwidth"))
      t.ErrorHere(
          "missing nic_bandwidth: motley needs each node's network bandwidth to other nodes; add "
          "nic_bandwidth = \"100Gbps\" (the figure of the instance type)");
  }
  // Each row with a spot price offers its nodes as spot too.
  for (size_t i = 0, rows_read = list.offers.size(); i < rows_read; ++i) {
    if (!list.offers[i].node.price->spot_usd_per_hour) continue;
    Offer spot = list.offers[i];
    spot.name = spot.node.name = list.offers[i].name + "-spot";
    spot.node.spot = true;
    spot.spot_of = static_cast<int>(i);
    if (names.count(spot.name))
      root.ErrorHere(
          fmt::format("offer '{}' has a spot price, and its spot nodes are named '{}', the name of the "
                      "offer at {}: rename that one",
                      list.offers[i].name, spot.name, names.at(spot.name).ToString()));
    list.offers.push_back(std::move(spot));
  }
  if (root.Has("offers") && rows.empty() && !diag.has_errors())
    root.Error("offers", "the file offers nothing; add at least one [[offers]] row");
  std::set<std::string> region_set;
  for (const Offer& o : list.offers) region_set.insert(o.node.region);
  const std::vector<std::string> regions(region_set.begin(), region_set.end());
  list.egress = ReadEgress(root, regions);
  if (!diag.has_errors()) CheckEgressComplete(root, list.egress, regions);
  if (regions.size() > 1 && list.network.inter_region_bandwidth_bytes_per_s == 0)
    root.ErrorHere(
        fmt::format("the offers are in {} regions ({}) but [network] has no inter_region_bandwidth; "
                    "add it, e.g. inter_region_bandwidth = \"10Gbps\"",
                    regions.size(), JoinNames(regions)));
  root.Finish();
  MOTLEY_RETURN_IF_ERROR(diag.ToStatus());
  return list;
}

Result<OffersText> ReadOffers(const std::string& name_or_path) {
  std::error_code ec;
  if (std::filesystem::is_regular_file(name_or_path, ec)) {
    MOTLEY_ASSIGN_OR_RETURN(std::string text, ReadTextFile(name_or_path));
    return OffersText{std::move(text), name_or_path};
  }
  if (const BuiltinFile* f = FindBuiltinFile("offers", name_or_path))
    return OffersText{std::string(f->text), std::string(f->path)};
  std::vector<std::string> names = BuiltinFileNames("offers");
  return Status::NotFound(
      fmt::format("no offers file '{}' and no built-in offers of that name{} Built-in offers: {}",
                  name_or_path, DidYouMeanOrPeriod(name_or_path, names), JoinNames(names)));
}

Result<OfferList> LoadOffers(const std::string& name_or_path) {
  MOTLEY_ASSIGN_OR_RETURN(const OffersText t, ReadOffers(name_or_path));
  return ParseOffersToml(t.text, t.file);
}

}  // namespace motley
