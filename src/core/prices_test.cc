// Prices in a cluster file ([[prices]], [[egress]]) and in an offers file: read, checked, and an
// allocation of offers made into a priced cluster.
#include <fmt/format.h>
#include <gtest/gtest.h>
#include <unistd.h>
#include <filesystem>
#include <fstream>

#include "core/builtin_files.h"
#include "core/cluster_parse.h"
#include "core/offers.h"
#include "core/offers_cluster.h"
#include "core/units.h"

namespace motley {
namespace {

const char* kTwoRegions = R"(
[network]
inter_region_bandwidth = "5Gbps"

[[nodes]]
name = "a"
device = "a100-40gb"
count = 8
nic_bandwidth = "100Gbps"
region = "east"

[[nodes]]
name = "t"
device = "t4"
count = 4
replicas = 2
nic_bandwidth = "25Gbps"
region = "west"
)";

std::string Error(const std::string& text) {
  Result<Cluster> c = ParseClusterToml(text, "c.toml");
  EXPECT_FALSE(c.ok());
  return c.ok() ? "" : c.status().message();
}

TEST(Prices, UnitsAreUsDollarsAnHourOrAGigabyte) {
  EXPECT_DOUBLE_EQ(*ParseUsdPerHour("2.99 USD/h"), 2.99);
  EXPECT_DOUBLE_EQ(*ParseUsdPerHour("$2.99/h"), 2.99);
  EXPECT_DOUBLE_EQ(*ParseUsdPerHour("$0/hour"), 0);
  EXPECT_DOUBLE_EQ(*ParseUsdPerGb("0.02 USD/GB"), 0.02);
  EXPECT_DOUBLE_EQ(*ParseUsdPerGb("$20/TB"), 0.02);
  EXPECT_NEAR(*ParseUsdPerGb("$1/GiB"), 1e9 / (1024.0 * 1024 * 1024), 1e-12);
  for (const char* bad : {"2.99 EUR/h", "2.99", "$2.99 USD/h", "2.99/h", "-1 USD/h", "USD 2/h"})
    EXPECT_FALSE(ParseUsdPerHour(bad).ok()) << bad;
  EXPECT_NE(ParseUsdPerHour("2.99 EUR/h").status().message().find("US dollars"), std::string::npos);
  EXPECT_EQ(FormatUsd(2.5), "$2.50");
  EXPECT_EQ(FormatUsd(0.1868), "$0.187");
  EXPECT_EQ(FormatUsd(1234.4), "$1234");
}

TEST(Prices, AClusterFilePricesEachNodeByItsTypeAndRegion) {
  Result<Cluster> c = ParseClusterToml(std::string(kTwoRegions) + R"(
[[prices]]
device = "a100-40gb"
price = "1.84 USD/h"
source = "test"

[[prices]]
device = "t4"
price = "0.98 USD/h"
spot_price = "0.30 USD/h"
spot_interruptions_per_hour = 0.05

[[prices]]
device = "t4"
region = "west"
price = "0.90 USD/h"

[[egress]]
from = "east"
to = "west"
price = "0.02 USD/GB"

[[egress]]
from = "west"
to = "internet"
price = "0.09 USD/GB"
)",
                                       "c.toml");
  ASSERT_TRUE(c.ok()) << c.status().message();
  ASSERT_TRUE(c->priced());
  EXPECT_DOUBLE_EQ(c->nodes[0].price->usd_per_hour, 1.84);
  EXPECT_EQ(c->nodes[0].price->source, "test");
  EXPECT_DOUBLE_EQ(c->nodes[1].price->usd_per_hour, 0.90);  // its region's row stands over every region's
  EXPECT_FALSE(c->nodes[1].price->spot_usd_per_hour.has_value());
  EXPECT_DOUBLE_EQ(*EgressUsdPerGb(c->egress, "east", "west"), 0.02);
  EXPECT_DOUBLE_EQ(*EgressUsdPerGb(c->egress, "west", "east"), 0.09);  // over the internet
  EXPECT_DOUBLE_EQ(*EgressUsdPerGb(c->egress, "west", "west"), 0);
}

TEST(Prices, AMissingOrWrongPriceIsOneErrorNamingTheLineAndTheFix) {
  const std::string a100 = "[[prices]]\ndevice = \"a100-40gb\"\nprice = \"1.84 USD/h\"\n";
  const std::string egress =
      "[[egress]]\nfrom = \"east\"\nto = \"internet\"\nprice = \"0.09 USD/GB\"\n"
      "[[egress]]\nfrom = \"west\"\nto = \"internet\"\nprice = \"0.09 USD/GB\"\n";
  // A node without a price where others have one: at its [[nodes]] entry, with the row to add.
  std::string e = Error(std::string(kTwoRegions) + a100 + egress);
  EXPECT_NE(e.find("c.toml:12"), std::string::npos) << e;
  EXPECT_NE(e.find("node 't-0' has no price"), std::string::npos) << e;
  EXPECT_NE(e.find("device = \"t4\", region = \"west\""), std::string::npos) << e;
  EXPECT_EQ(e.find("'t-1'"), std::string::npos) << "one error for the entry, not one a replica: " << e;
  const std::string t4 = "[[prices]]\ndevice = \"t4\"\nprice = \"0.98 USD/h\"\n";
  // A pair of regions without an egress price.
  e = Error(std::string(kTwoRegions) + a100 + t4);
  EXPECT_NE(e.find("no egress price for traffic east -> west, west -> east"), std::string::npos) << e;
  // Unknown regions and types, units, spot without its interruptions, a duplicate row.
  e = Error(std::string(kTwoRegions) + a100 + t4 + egress +
            "[[prices]]\ndevice = \"t4\"\nregion = \"wset\"\nprice = \"1 USD/h\"\n");
  EXPECT_NE(e.find("no node is in region 'wset'; did you mean 'west'?"), std::string::npos) << e;
  e = Error(std::string(kTwoRegions) + a100 + egress + "[[prices]]\ndevice = \"t4\"\nprice = \"1 EUR/h\"\n");
  EXPECT_NE(e.find("prices[1].price"), std::string::npos) << e;
  EXPECT_NE(e.find("US dollars"), std::string::npos) << e;
  EXPECT_EQ(e.find("has no price"), std::string::npos) << "no follow-on error: " << e;
  e = Error(std::string(kTwoRegions) + a100 + egress +
            "[[prices]]\ndevice = \"t4\"\nprice = \"1 USD/h\"\nspot_price = \"0.3 USD/h\"\n");
  EXPECT_NE(e.find("spot_interruptions_per_hour"), std::string::npos) << e;
  e = Error(std::string(kTwoRegions) + a100 + a100 + t4 + egress);
  EXPECT_NE(e.find("a second price for a100-40gb"), std::string::npos) << e;
  e = Error(std::string(kTwoRegions) + a100 + t4 + egress +
            "[[prices]]\ndevice = \"h100\"\nprice = \"3 USD/h\"\n");
  EXPECT_NE(e.find("no node has h100-sxm devices"), std::string::npos) << e;
  e = Error(std::string(kTwoRegions) +
            "[[egress]]\nfrom = \"east\"\nto = \"west\"\nprice = \"0.02 USD/GB\"\n");
  EXPECT_NE(e.find("egress prices without device prices"), std::string::npos) << e;
  e = Error(std::string(kTwoRegions) + a100 + t4 + egress +
            "[[egress]]\nfrom = \"east\"\nto = \"east\"\nprice = \"0.02 USD/GB\"\n");
  EXPECT_NE(e.find("to itself"), std::string::npos) << e;
}

TEST(Offers, EveryExampleOffersFileReadsWithASourceForEveryPrice) {
  int files = 0;
  for (const BuiltinFile& f : BuiltinFiles()) {
    if (f.kind != "offers") continue;
    ++files;
    Result<OfferList> o = ParseOffersToml(f.text, std::string(f.path));
    ASSERT_TRUE(o.ok()) << f.path << ": " << o.status().message();
    for (const Offer& offer : o->offers) {
      EXPECT_FALSE(offer.node.price->source.empty()) << offer.name;
      EXPECT_GT(offer.node.price->usd_per_hour, 0) << offer.name;
    }
  }
  EXPECT_GE(files, 2);
  Result<OfferList> aws = LoadOffers("aws-three-regions");
  ASSERT_TRUE(aws.ok()) << aws.status().message();
  EXPECT_EQ(aws->offers.size(), 18u);  // six types in three regions
  EXPECT_LE(aws->max_devices(), 512);
}

TEST(Offers, AnAllocationIsAPricedClusterOfSoManyNodesOfEachOffer) {
  Result<OfferList> o = LoadOffers("small-mix");
  ASSERT_TRUE(o.ok()) << o.status().message();
  const Cluster c = ClusterOfAllocation(*o, {1, 0, 2});
  ASSERT_EQ(c.nodes.size(), 3u);
  EXPECT_EQ(c.nodes[0].name, "a100-0");
  EXPECT_EQ(c.nodes[2].name, "a10g-1");
  EXPECT_EQ(c.num_devices(), 24);
  EXPECT_TRUE(c.priced());
  EXPECT_EQ(c.regions.size(), 2u);
  EXPECT_EQ(DescribeAllocation(*o, {1, 0, 2}), "1 x a100 (8 a100-40gb), 2 x a10g (16 a10g)");
  EXPECT_EQ(AllOffered(*o), (Allocation{2, 4, 2}));
}

// What was chosen from an offers file, as a cluster file: the same nodes, devices, prices and
// network as ClusterOfAllocation, egress only between the regions taken, and a clear error where a
// cluster file cannot say it.
TEST(Offers, TheClusterFileOfAnAllocationReadsBackAsItsCluster) {
  Result<OfferList> o = LoadOffers("small-mix");
  ASSERT_TRUE(o.ok()) << o.status().message();
  for (const Allocation& nodes : {Allocation{1, 0, 2}, Allocation{2, 3, 0}, Allocation{0, 0, 1}}) {
    Result<std::string> text = ClusterTomlOfAllocation("small-mix", nodes);
    ASSERT_TRUE(text.ok()) << text.status().message();
    Result<Cluster> read = ParseClusterToml(*text, "rented.toml");
    ASSERT_TRUE(read.ok()) << read.status().message() << "\n" << *text;
    const Cluster want = ClusterOfAllocation(*o, nodes);
    ASSERT_EQ(read->num_devices(), want.num_devices());
    ASSERT_EQ(read->nodes.size(), want.nodes.size());
    for (size_t n = 0; n < want.nodes.size(); ++n) {
      EXPECT_EQ(read->nodes[n].name, want.nodes[n].name);
      EXPECT_EQ(read->nodes[n].device_type, want.nodes[n].device_type);
      EXPECT_EQ(read->nodes[n].region, want.nodes[n].region);
      ASSERT_TRUE(read->nodes[n].price.has_value());
      EXPECT_EQ(read->nodes[n].price->usd_per_hour, want.nodes[n].price->usd_per_hour);
      EXPECT_EQ(read->nodes[n].price->source, want.nodes[n].price->source);
    }
    for (int d = 0; d < want.num_devices(); ++d)
      EXPECT_EQ(read->LinkBetween(0, d).bandwidth_bytes_per_s, want.LinkBetween(0, d).bandwidth_bytes_per_s);
    EXPECT_EQ(read->regions, want.regions);
    EXPECT_EQ(read->egress.size(), want.regions.size() > 1 ? 2u : 0u);
  }
  Result<std::string> none = ClusterTomlOfAllocation("small-mix", {0, 0, 0});
  ASSERT_FALSE(none.ok());
  EXPECT_NE(none.status().message().find("no node"), std::string::npos) << none.status().message();
}

// A row with a spot price offers its nodes twice — on demand and as spot — and an allocation takes
// them once; its cluster file marks the spot nodes, priced at the row's spot price.
TEST(Offers, ARowWithASpotPriceOffersItsNodesOnDemandOrAsSpot) {
  const std::string text = R"(
[[offers]]
name = "a"
device = "a100-40gb"
count = 8
nic_bandwidth = "400Gbps"
region = "east"
nodes = 3
price = "1.84 USD/h"
spot_price = "0.90 USD/h"
spot_interruptions_per_hour = 0.01
source = "test"
[[offers]]
name = "t"
device = "t4"
count = 8
nic_bandwidth = "100Gbps"
region = "east"
nodes = 2
price = "0.98 USD/h"
source = "test"
)";
  Result<OfferList> o = ParseOffersToml(text, "spot.toml");
  ASSERT_TRUE(o.ok()) << o.status().message();
  ASSERT_EQ(o->offers.size(), 3u);
  EXPECT_EQ(o->offers[2].name, "a-spot");
  EXPECT_EQ(o->offers[2].spot_of, 0);
  EXPECT_TRUE(o->offers[2].node.spot);
  EXPECT_FALSE(o->offers[0].node.spot);
  EXPECT_EQ(o->max_devices(), 3 * 8 + 2 * 8);
  EXPECT_EQ(WithinOffers(*o, {2, 1, 3}), (Allocation{2, 1, 1}));
  EXPECT_EQ(WithinOffers(*o, {0, 2, 3}), (Allocation{0, 2, 3}));

  const std::filesystem::path file =
      std::filesystem::temp_directory_path() / fmt::format("motley_spot_offers_{}.toml", ::getpid());
  std::ofstream(file) << text;
  Result<std::string> rented = ClusterTomlOfAllocation(file.string(), {1, 2, 2});
  EXPECT_FALSE(ClusterTomlOfAllocation(file.string(), {2, 0, 2}).ok()) << "four of the row's three nodes";
  std::filesystem::remove(file);
  ASSERT_TRUE(rented.ok()) << rented.status().message();
  Result<Cluster> c = ParseClusterToml(*rented, "rented.toml");
  ASSERT_TRUE(c.ok()) << c.status().message() << "\n" << *rented;
  ASSERT_EQ(c->nodes.size(), 5u);
  for (const NodeSpec& n : c->nodes) {
    EXPECT_EQ(n.spot, n.name.starts_with("a-spot-")) << n.name;
    ASSERT_TRUE(n.price.has_value());
    if (n.spot) {
      EXPECT_EQ(n.price->spot_usd_per_hour, 0.90);
    }
  }
}

TEST(Offers, ABadOffersFileIsOneErrorNamingTheLineAndTheFix) {
  auto error = [](const std::string& text) {
    Result<OfferList> o = ParseOffersToml(text, "o.toml");
    EXPECT_FALSE(o.ok());
    return o.ok() ? "" : o.status().message();
  };
  const std::string row =
      "[[offers]]\ndevice = \"t4\"\ncount = 8\nnic_bandwidth = \"100Gbps\"\nregion = \"east\"\nnodes = 2\n"
      "price = \"0.98 USD/h\"\n";
  std::string e = error(row);
  EXPECT_NE(e.find("o.toml:7"), std::string::npos) << e;
  EXPECT_NE(e.find("needs its source"), std::string::npos) << e;
  e = error(row + "source = \"x\"\n" + row + "source = \"x\"\n");
  EXPECT_NE(e.find("a second offer named 't4@east'"), std::string::npos) << e;
  e = error(
      "[[offers]]\ndevice = \"t5\"\nregion = \"east\"\nnodes = 0\nprice = \"1 USD/h\"\nsource = \"x\"\n");
  EXPECT_NE(e.find("unknown device type 't5'"), std::string::npos) << e;
  EXPECT_NE(e.find("nodes"), std::string::npos) << e;
  const std::string west =
      "[[offers]]\ndevice = \"a10g\"\ncount = 8\nnic_bandwidth = \"100Gbps\"\nregion = "
      "\"west\"\nnodes = 1\nprice = \"2 USD/h\"\nsource = \"x\"\n";
  e = error(row + "source = \"x\"\n" + west);
  EXPECT_NE(e.find("no egress price for traffic east -> west"), std::string::npos) << e;
  EXPECT_NE(e.find("inter_region_bandwidth"), std::string::npos) << e;
  e = error("name = \"x\"\n");
  EXPECT_NE(e.find("offers"), std::string::npos) << e;
  EXPECT_FALSE(LoadOffers("aws-three-region").ok());
  EXPECT_NE(LoadOffers("aws-three-region").status().message().find("did you mean 'aws-three-regions'"),
            std::string::npos);
}

}  // namespace
}  // namespace motley
