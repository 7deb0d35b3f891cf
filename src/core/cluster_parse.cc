// Reading and validating a cluster file. The format: README.md ("Files") and examples/clusters/.
#include "core/cluster_parse.h"

#include <algorithm>

#include <cstdint>
#include <filesystem>
#include <map>
#include <set>

#include <fmt/format.h>

#include "core/builtin_files.h"
#include "core/prices_parse.h"
#include "core/suggest.h"
#include "core/toml_reader.h"
#include "core/units.h"

namespace motley {
namespace {

constexpr int kMaxDevicesPerNode = 64;
constexpr int kMaxReplicas = 100000;
constexpr int64_t kMaxDevices = 1 << 20;  // a million devices: far beyond any cluster we plan

void ParseDeviceType(const std::string& name, TomlTable& t, GpuCatalog* catalog) {
  GpuSpec spec;
  bool have_base = false;
  if (auto base = t.String("base")) {
    if (const GpuSpec* b = catalog->Find(*base)) {
      spec = *b;
      spec.aliases.clear();
      have_base = true;
    } else {
      t.Error("base",
              fmt::format("unknown device type '{}'{}", *base, DidYouMean(*base, catalog->AllNames())));
    }
  }
  Need need = have_base ? Need::kOptional : Need::kRequired;
  spec.name = name;
  if (auto v = t.String("display_name")) spec.display_name = *v;
  if (spec.display_name.empty()) spec.display_name = name;
  if (auto v = t.Bytes("memory", need)) spec.memory_bytes = *v;
  if (auto v = t.Bandwidth("memory_bandwidth", need)) spec.memory_bandwidth_bytes_per_s = *v;
  if (auto v = t.Flops("fp16_flops", need)) spec.peak_fp16_flops = *v;
  if (auto v = t.Flops("fp32_flops", need)) spec.peak_fp32_flops = *v;
  // fp64 (optional): half the fp32 figure unless given (CPUs and data-center GPUs; consumer GPUs
  // run fp64 at 1/32-1/64 of fp32: give theirs).
  if (auto v = t.Flops("fp64_flops")) {
    spec.peak_fp64_flops = *v;
  } else if (!have_base) {
    spec.peak_fp64_flops = spec.peak_fp32_flops / 2;
  }
  if (auto v = t.Bool("bf16")) spec.supports_bf16 = *v;
  if (auto v = t.Bandwidth("host_link", need)) spec.host_link_bytes_per_s = *v;
  if (auto v = t.Bandwidth("nvlink")) spec.nvlink_bytes_per_s = *v;
  if (auto v = t.String("source")) spec.source = *v;
  if (spec.source.empty()) spec.source = "cluster file " + t.file();
  // What CUDA, NCCL and the allocator keep for themselves (GpuSpec::reserve_bytes): the base's
  // catalog default unless given; "0B" where a device keeps nothing back (a CPU process).
  if (t.Has("reserve")) {
    const std::optional<std::string> text = t.String("reserve");
    if (text && (*text == "0" || *text == "0B" || *text == "0GiB")) {
      spec.reserve_bytes = 0;
      spec.reserve_source = "cluster file " + t.file();
    } else if (text) {
      t.Allow("reserve");
      Result<double> bytes = ParseBytes(*text);
      if (!bytes.ok()) {
        t.Error("reserve", bytes.status().message());
      } else if (spec.memory_bytes > 0 && *bytes >= spec.memory_bytes) {
        t.Error("reserve",
                fmt::format("reserve {} is not less than the device's memory {}: give what CUDA, NCCL and "
                            "the allocator keep (typically 1-3 GiB)",
                            FormatBytes(*bytes), FormatBytes(spec.memory_bytes)));
      } else {
        spec.reserve_bytes = *bytes;
        spec.reserve_source = "cluster file " + t.file();
      }
    }
  } else {
    t.Allow("reserve");
  }
  t.Finish();
  catalog->Upsert(std::move(spec));
}

EmulationConfig ParseEmulation(TomlTable& t, const GpuSpec* spec) {
  EmulationConfig emu;
  if (auto v = t.Number("speed_factor", 0.0, 1000.0, Need::kOptional, /*min_exclusive=*/true))
    emu.speed_factor = *v;
  if (auto v = t.Bytes("memory")) {
    emu.memory_bytes = *v;
    // An emulated device stands for one of its type: it cannot offer more memory than the type has.
    if (spec != nullptr && spec->memory_bytes > 0 && *v > spec->memory_bytes)
      t.Error("memory",
              fmt::format("{} is more than a {} has ({}); an emulated device offers at most its type's "
                          "memory: lower it, or declare a [device_types] entry with more",
                          FormatBytes(*v), spec->name, FormatBytes(spec->memory_bytes)));
  }
  if (auto v = t.Bandwidth("link_bandwidth")) emu.link_bandwidth_bytes_per_s = *v;
  t.Finish();
  return emu;
}

}  // namespace

GpuCatalog ParseCatalog(TomlTable& root) {
  GpuCatalog catalog = GpuCatalog::Builtin();
  if (auto types = root.Table("device_types"))
    for (auto& [name, t] : types->NamedTables()) ParseDeviceType(name, t, &catalog);
  return catalog;
}

const GpuSpec* ReadNodeDevices(TomlTable& t, const GpuCatalog& catalog, NodeSpec* node) {
  auto type = t.String("device", Need::kRequired);
  const GpuSpec* spec = nullptr;
  if (type) {
    spec = catalog.Find(*type);
    if (spec == nullptr) {
      auto names = catalog.AllNames();
      std::vector<std::string> primary;
      for (const auto& s : catalog.specs()) primary.push_back(s.name);
      t.Error("device", fmt::format("unknown device type '{}'{} Known types: {}. To use another GPU, "
                                    "describe it under [device_types.{}]",
                                    *type, DidYouMeanOrPeriod(*type, names), JoinNames(primary), *type));
    } else {
      node->device_type = spec->name;
    }
  }
  if (auto v = t.Int("count", 1, kMaxDevicesPerNode)) node->num_devices = static_cast<int>(*v);
  if (auto v = t.Choice("interconnect", {"nvswitch", "nvlink", "pcie"})) {
    node->interconnect = *v == "nvswitch" ? Interconnect::kNvSwitch
                         : *v == "nvlink" ? Interconnect::kNvLink
                                          : Interconnect::kPcie;
  } else if (spec != nullptr && spec->nvlink_bytes_per_s > 0) {
    node->interconnect = Interconnect::kNvLink;
  }
  auto intra = t.Bandwidth("intra_bandwidth");
  if (intra) {
    node->intra_bandwidth_bytes_per_s = *intra;
  } else if (spec != nullptr) {
    if (node->interconnect == Interconnect::kPcie) {
      node->intra_bandwidth_bytes_per_s = spec->host_link_bytes_per_s;
    } else if (spec->nvlink_bytes_per_s > 0) {
      node->intra_bandwidth_bytes_per_s = spec->nvlink_bytes_per_s;
    } else {
      t.Error("interconnect",
              fmt::format("device type '{}' has no NVLink in the catalog, so interconnect = \"{}\" has "
                          "no default bandwidth; use interconnect = \"pcie\" or set intra_bandwidth",
                          spec->name, InterconnectName(node->interconnect)));
    }
  }
  if (auto v = t.Bandwidth("nic_bandwidth")) node->nic_bandwidth_bytes_per_s = *v;
  return spec;
}

namespace {

// Reads one [[nodes]] entry; returns the nodes it stands for (several with `replicas`).
std::vector<NodeSpec> ParseNode(TomlTable& t, const GpuCatalog& catalog) {
  NodeSpec node;
  auto name = t.String("name", Need::kRequired);
  const GpuSpec* spec = ReadNodeDevices(t, catalog, &node);
  int replicas = static_cast<int>(t.Int("replicas", 1, kMaxReplicas).value_or(1));
  if (auto v = t.String("region")) node.region = *v;
  if (auto v = t.Bool("spot")) node.spot = *v;
  if (auto v = t.String("host")) {
    if (v->find_first_of(" \t\n'\"$`\\;&|<>(){}") != std::string::npos)
      t.Error(
          "host",
          fmt::format("\"{}\" is not a hostname or address; give the name or address its ranks run on", *v));
    else
      node.host = *v;
  }
  for (auto& e : t.TableArray("emulation", Need::kOptional, /*allow_single=*/true))
    node.emulation.push_back(ParseEmulation(e, spec));
  if (node.emulation.size() > 1 && static_cast<int>(node.emulation.size()) != node.num_devices) {
    t.Error("emulation", fmt::format("has {} entries but the node has count = {} devices; give one "
                                     "[nodes.emulation] table for all, or one [[nodes.emulation]] per device",
                                     node.emulation.size(), node.num_devices));
  }
  t.Finish();

  if (!node.host.empty() && replicas > 1)
    t.Error("replicas",
            "a node with a host stands for one machine; give each of its replicas its own [[nodes]] "
            "entry with its own host");
  std::vector<NodeSpec> out;
  if (!name) return out;
  for (int r = 0; r < replicas; ++r) {
    out.push_back(node);
    out.back().name = replicas == 1 ? *name : fmt::format("{}-{}", *name, r);
  }
  return out;
}

}  // namespace

void ParseNetwork(TomlTable& t, NetworkConfig* net) {
  if (auto v = t.Duration("intra_node_latency")) net->intra_node_latency_s = *v;
  if (auto v = t.Duration("inter_node_latency")) net->inter_node_latency_s = *v;
  if (auto v = t.Bandwidth("inter_region_bandwidth")) net->inter_region_bandwidth_bytes_per_s = *v;
  if (auto v = t.Duration("inter_region_latency")) net->inter_region_latency_s = *v;
  t.Finish();
}

namespace {

// Whole-cluster check of hosts: every node names its host, or none does (ranks find their devices
// by host, or by order).
void CheckHosts(std::vector<TomlTable>& node_tables, const std::vector<NodeSpec>& nodes) {
  const bool any = std::any_of(nodes.begin(), nodes.end(), [](const NodeSpec& n) { return !n.host.empty(); });
  for (TomlTable& t : node_tables)
    if (any && !t.Has("host") && t.Has("name"))
      t.ErrorHere(
          "missing host: other nodes name the host they run on, so every node must (ranks "
          "find their devices by host); add host = \"<its hostname or address>\"");
}

// [[prices]] rows (device, optional region, the price's keys) given to the nodes they match, and
// [[egress]]: with any price, every node and every pair of regions must have one.
void ApplyPrices(TomlTable& root, std::vector<TomlTable>& node_tables,
                 const std::vector<size_t>& table_of_node, const std::set<std::string>& region_set,
                 Cluster* c) {
  const std::vector<std::string> regions(region_set.begin(), region_set.end());
  std::vector<TomlTable> rows = root.TableArray("prices");
  std::map<std::pair<std::string, std::string>, SourcePos> seen;  // (type, region or "") -> row
  bool rows_read = true;  // every row read: a node left without a price is then the file's omission
  for (TomlTable& t : rows) {
    const std::optional<std::string> type = t.String("device", Need::kRequired);
    const std::optional<std::string> region = t.String("region");
    const std::optional<DevicePrice> price = ReadDevicePrice(t);
    t.Finish();
    const GpuSpec* spec = type ? c->catalog.Find(*type) : nullptr;
    if (type && spec == nullptr) {
      t.Error("device", fmt::format("unknown device type '{}'{}", *type,
                                    DidYouMeanOrPeriod(*type, c->catalog.AllNames())));
      continue;
    }
    if (region && !region_set.count(*region)) {
      t.Error("region", fmt::format("no node is in region '{}'{} The regions: {}", *region,
                                    DidYouMeanOrPeriod(*region, regions), JoinNames(regions)));
      continue;
    }
    if (!spec || !price) {
      rows_read = false;
      continue;
    }
    if (auto [it, inserted] = seen.try_emplace({spec->name, region.value_or("")}, t.Pos()); !inserted) {
      t.ErrorHere(fmt::format("a second price for {}{} (the first at {}); keep one", spec->name,
                              region ? " in " + *region : "", it->second.ToString()));
      continue;
    }
    bool used = false;
    for (NodeSpec& n : c->nodes) {
      if (n.device_type != spec->name || (region && n.region != *region)) continue;
      // A row for the node's region stands over a row for every region.
      if (!n.price || region) n.price = *price;
      used = true;
    }
    if (!used)
      t.ErrorHere(fmt::format("no node has {} devices{}: remove the row or fix its device", spec->name,
                              region ? " in region " + *region : ""));
  }
  if (rows.empty()) {
    root.Allow("egress");
    if (root.Has("egress"))
      root.Error("egress",
                 "egress prices without device prices price nothing: add [[prices]] rows for the "
                 "nodes' devices (device, region, price = \"2.99 USD/h\")");
    for (size_t n = 0; n < c->nodes.size(); ++n)
      if (c->nodes[n].spot) {
        node_tables[table_of_node[n]].Error(
            "spot",
            "a spot node needs its prices: add a [[prices]] row for its device with price, "
            "spot_price and spot_interruptions_per_hour");
        break;
      }
    return;
  }
  std::set<size_t> told;  // one error a [[nodes]] entry, whatever its replicas
  for (size_t n = 0; n < c->nodes.size() && rows_read; ++n)
    if (c->nodes[n].spot && c->nodes[n].price && !c->nodes[n].price->spot_usd_per_hour &&
        told.insert(table_of_node[n]).second)
      node_tables[table_of_node[n]].Error(
          "spot", fmt::format("node '{}' is spot, and its price row ({} in region {}) has no spot price: add "
                              "spot_price = \"1.10 USD/h\" and spot_interruptions_per_hour = 0.05 (your "
                              "figures) to it, or remove spot = true",
                              c->nodes[n].name, c->nodes[n].device_type, c->nodes[n].region));
  for (size_t n = 0; n < c->nodes.size() && rows_read; ++n)
    if (!c->nodes[n].price && told.insert(table_of_node[n]).second)
      node_tables[table_of_node[n]].ErrorHere(fmt::format(
          "node '{}' has no price ({} in region {}) where other nodes have one: add [[prices]] device = "
          "\"{}\", region = \"{}\", price = \"2.99 USD/h\" (your figure)",
          c->nodes[n].name, c->nodes[n].device_type, c->nodes[n].region, c->nodes[n].device_type,
          c->nodes[n].region));
  c->egress = ReadEgress(root, regions);
  CheckEgressComplete(root, c->egress, regions);
}

}  // namespace

Result<Cluster> ParseClusterToml(std::string_view text, const std::string& file) {
  Diagnostics diag;
  auto root_table = ParseTomlText(text, file, &diag);
  if (!root_table) return diag.ToStatus();
  TomlTable root(*root_table, "", file, &diag);

  Cluster c;
  if (auto v = root.String("name")) c.name = *v;
  c.catalog = ParseCatalog(root);
  if (auto net = root.Table("network")) ParseNetwork(*net, &c.network);

  // Nodes, keeping where each was declared for duplicate-name messages.
  std::vector<TomlTable> node_tables = root.TableArray("nodes", Need::kRequired);
  std::map<std::string, std::pair<size_t, SourcePos>> first_seen;  // name -> (entry, position)
  std::vector<size_t> table_of_node;                               // the [[nodes]] entry each node comes from
  int64_t total_devices = 0;
  for (size_t i = 0; i < node_tables.size(); ++i) {
    for (auto& node : ParseNode(node_tables[i], c.catalog)) {
      auto [it, inserted] = first_seen.try_emplace(node.name, i, node_tables[i].PosOf("name"));
      if (!inserted) {
        node_tables[i].Error("name", fmt::format("duplicate node name '{}' (first declared at {}); "
                                                 "every node needs its own name",
                                                 node.name, it->second.second.ToString()));
        continue;
      }
      total_devices += node.num_devices;
      if (total_devices > kMaxDevices) break;
      c.nodes.push_back(std::move(node));
      table_of_node.push_back(i);
    }
    if (total_devices > kMaxDevices) {
      node_tables[i].ErrorHere(
          fmt::format("the cluster has more than {} devices; motley plans at most that many", kMaxDevices));
      break;
    }
  }
  if (root.Has("nodes") && node_tables.empty() && !diag.has_errors())
    root.Error("nodes", "the cluster has no nodes; add at least one [[nodes]] section");

  CheckHosts(node_tables, c.nodes);
  std::set<std::string> regions;
  for (const auto& n : c.nodes) regions.insert(n.region);
  if (c.nodes.size() > 1) {
    for (size_t i = 0; i < node_tables.size(); ++i) {
      if (!node_tables[i].Has("nic_bandwidth") && node_tables[i].Has("name")) {
        node_tables[i].ErrorHere(fmt::format(
            "missing nic_bandwidth: the cluster has {} nodes, so motley needs each node's network "
            "bandwidth; add nic_bandwidth = \"25Gbps\" (or the figure of your NIC)",
            c.nodes.size()));
      }
    }
  }
  if (regions.size() > 1 && c.network.inter_region_bandwidth_bytes_per_s == 0) {
    root.ErrorHere(
        fmt::format("the nodes are in {} regions ({}) but [network] has no "
                    "inter_region_bandwidth; add it, e.g. inter_region_bandwidth = \"5Gbps\"",
                    regions.size(), JoinNames(std::vector<std::string>(regions.begin(), regions.end()))));
  }

  ApplyPrices(root, node_tables, table_of_node, regions, &c);

  // Measured link overrides.
  std::vector<std::string> node_names, region_names(regions.begin(), regions.end());
  for (const auto& n : c.nodes) node_names.push_back(n.name);
  std::vector<std::string> all_names = node_names;
  all_names.insert(all_names.end(), region_names.begin(), region_names.end());
  for (auto& t : root.TableArray("links")) {
    LinkOverride o;
    auto between = t.StringArray("between", Need::kRequired);
    auto bw = t.Bandwidth("bandwidth", Need::kRequired);
    if (auto lat = t.Duration("latency")) o.latency_s = *lat;
    t.Finish();
    if (!between || !bw) continue;
    if (between->size() != 2) {
      t.Error("between",
              fmt::format("needs exactly two names (two nodes or two regions), got {}", between->size()));
      continue;
    }
    int kinds[2];
    bool ok = true;
    for (int k = 0; k < 2; ++k) {
      const std::string& n = (*between)[k];
      bool is_node = first_seen.count(n) > 0, is_region = regions.count(n) > 0;
      kinds[k] = is_node ? 0 : 1;
      if (is_node && is_region) {
        t.Error("between", fmt::format("'{}' names both a node and a region; rename one of them", n));
        ok = false;
      } else if (!is_node && !is_region) {
        std::string hint = DidYouMean(n, all_names);
        t.Error("between", fmt::format("'{}' is neither a node nor a region{}", n, hint.empty() ? "" : hint));
        ok = false;
      }
    }
    if (ok && kinds[0] != kinds[1]) {
      t.Error("between", fmt::format("mixes a node and a region ('{}', '{}'); name two nodes or two regions",
                                     (*between)[0], (*between)[1]));
      ok = false;
    }
    if (ok && (*between)[0] == (*between)[1] && kinds[0] == 0) {
      t.Error("between",
              fmt::format("names node '{}' twice; a link joins two different nodes", (*between)[0]));
      ok = false;
    }
    if (!ok) continue;
    o.a = (*between)[0];
    o.b = (*between)[1];
    o.bandwidth_bytes_per_s = *bw;
    c.overrides.push_back(std::move(o));
  }
  root.Finish();
  MOTLEY_RETURN_IF_ERROR(diag.ToStatus());
  c.Finalize();
  return c;
}

Result<Cluster> LoadClusterFile(const std::string& path) {
  MOTLEY_ASSIGN_OR_RETURN(std::string text, ReadTextFile(path));
  return ParseClusterToml(text, path);
}

Result<Cluster> LoadCluster(const std::string& name_or_path) {
  std::error_code ec;
  if (std::filesystem::is_regular_file(name_or_path, ec)) return LoadClusterFile(name_or_path);
  if (const BuiltinFile* f = FindBuiltinFile("clusters", name_or_path))
    return ParseClusterToml(f->text, std::string(f->path));
  std::vector<std::string> names = BuiltinFileNames("clusters");
  return Status::NotFound(
      fmt::format("no cluster file '{}' and no built-in cluster of that name{} "
                  "Built-in clusters: {}",
                  name_or_path, DidYouMeanOrPeriod(name_or_path, names), JoinNames(names)));
}

}  // namespace motley
