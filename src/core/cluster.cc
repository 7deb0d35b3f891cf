#include "core/cluster.h"

#include <algorithm>
#include <limits>

#include <fmt/format.h>
#include <fmt/ranges.h>

#include "core/check.h"

namespace motley {

std::string_view InterconnectName(Interconnect ic) {
  switch (ic) {
    case Interconnect::kNvSwitch:
      return "nvswitch";
    case Interconnect::kNvLink:
      return "nvlink";
    case Interconnect::kPcie:
      return "pcie";
  }
  return "?";
}

std::string_view LinkKindName(LinkKind kind) {
  switch (kind) {
    case LinkKind::kSelf:
      return "self";
    case LinkKind::kIntraNode:
      return "intra-node";
    case LinkKind::kInterNode:
      return "inter-node";
    case LinkKind::kInterRegion:
      return "inter-region";
  }
  return "?";
}

void Cluster::Finalize() {
  regions.clear();
  devices.clear();
  node_overrides_.clear();
  region_overrides_.clear();
  std::map<std::string, int> region_index, node_index;
  for (size_t n = 0; n < nodes.size(); ++n) {
    node_index[nodes[n].name] = static_cast<int>(n);
    auto [it, inserted] = region_index.try_emplace(nodes[n].region, static_cast<int>(regions.size()));
    if (inserted) regions.push_back(nodes[n].region);
    for (int i = 0; i < nodes[n].num_devices; ++i) {
      devices.push_back(Device{static_cast<int>(devices.size()), static_cast<int>(n), i, it->second});
    }
  }
  spec_of_node_.clear();
  for (const NodeSpec& n : nodes) {
    const GpuSpec* s = catalog.Find(n.device_type);
    spec_of_node_.push_back(s == nullptr ? -1 : static_cast<int>(s - catalog.specs().data()));
  }
  spec_version_ = catalog.version();
  for (size_t i = 0; i < overrides.size(); ++i) {
    const auto& o = overrides[i];
    if (node_index.count(o.a) && node_index.count(o.b)) {
      int x = node_index[o.a], y = node_index[o.b];
      node_overrides_[{std::min(x, y), std::max(x, y)}] = i;
    } else if (region_index.count(o.a) && region_index.count(o.b)) {
      int x = region_index[o.a], y = region_index[o.b];
      region_overrides_[{std::min(x, y), std::max(x, y)}] = i;
    }
  }
}

const GpuSpec& Cluster::spec(int device) const {
  const auto node = static_cast<size_t>(devices[static_cast<size_t>(device)].node);
  if (node < spec_of_node_.size() && spec_of_node_[node] >= 0 && spec_version_ == catalog.version())
    return catalog.specs()[static_cast<size_t>(spec_of_node_[node])];
  const GpuSpec* s = catalog.Find(node_of(device).device_type);
  MOTLEY_CHECK_MSG(s != nullptr, node_of(device).device_type);
  return *s;
}

const EmulationConfig* Cluster::emulation(int device) const {
  const NodeSpec& node = node_of(device);
  if (node.emulation.empty()) return nullptr;
  return &node.emulation[std::min<size_t>(devices[device].local_index, node.emulation.size() - 1)];
}

bool Cluster::priced() const {
  return !nodes.empty() &&
         std::all_of(nodes.begin(), nodes.end(), [](const NodeSpec& n) { return n.price.has_value(); });
}

bool Cluster::emulated() const {
  return std::any_of(nodes.begin(), nodes.end(), [](const NodeSpec& n) { return !n.emulation.empty(); });
}

Precision Cluster::TrainingPrecision(std::string* why) const {
  if (emulated()) {
    *why = "fp32: the emulated devices are CPU processes (CPU matmuls lack fp16, and bf16 is slow there)";
    return Precision::kFp32;
  }
  std::vector<std::string> without;
  for (const auto& n : nodes) {
    const GpuSpec* s = catalog.Find(n.device_type);
    if (s != nullptr && !s->supports_bf16 &&
        std::find(without.begin(), without.end(), s->name) == without.end())
      without.push_back(s->name);
  }
  if (without.empty()) {
    *why = "bf16: every device type computes in it";
    return Precision::kBf16;
  }
  *why = fmt::format("fp16 with dynamic loss scaling: {} cannot compute in bf16", fmt::join(without, ", "));
  return Precision::kFp16;
}

double Cluster::reserve_bytes(int device) const {
  if (emulation(device) != nullptr) return 0;
  return std::min(spec(device).reserve_bytes, memory_bytes(device));
}

double Cluster::usable_memory_bytes(int device) const { return memory_bytes(device) - reserve_bytes(device); }

double Cluster::memory_bytes(int device) const {
  const EmulationConfig* emu = emulation(device);
  const double capacity =
      emu != nullptr && emu->memory_bytes ? *emu->memory_bytes : spec(device).memory_bytes;
  auto cap = memory_cap_bytes.find(device);
  return cap != memory_cap_bytes.end() ? std::min(capacity, cap->second) : capacity;
}

Link Cluster::LinkBetween(int a, int b) const {
  MOTLEY_CHECK_GE(a, 0);
  MOTLEY_CHECK_LT(a, num_devices());
  MOTLEY_CHECK_GE(b, 0);
  MOTLEY_CHECK_LT(b, num_devices());
  if (a == b) return Link{LinkKind::kSelf, std::numeric_limits<double>::infinity(), 0};
  const Device& da = devices[a];
  const Device& db = devices[b];
  const NodeSpec& na = nodes[da.node];
  const NodeSpec& nb = nodes[db.node];
  Link link;
  if (da.node == db.node) {
    link = {LinkKind::kIntraNode, na.intra_bandwidth_bytes_per_s, network.intra_node_latency_s};
  } else if (da.region == db.region) {
    link = {LinkKind::kInterNode, std::min(na.nic_bandwidth_bytes_per_s, nb.nic_bandwidth_bytes_per_s),
            network.inter_node_latency_s};
  } else {
    link = {LinkKind::kInterRegion,
            std::min({na.nic_bandwidth_bytes_per_s, nb.nic_bandwidth_bytes_per_s,
                      network.inter_region_bandwidth_bytes_per_s}),
            network.inter_region_latency_s};
  }
  // A measured figure replaces the derived one: node pair first, then region pair.
  const LinkOverride* o = nullptr;
  if (link.kind != LinkKind::kIntraNode) {
    auto it = node_overrides_.find({std::min(da.node, db.node), std::max(da.node, db.node)});
    if (it != node_overrides_.end()) {
      o = &overrides[it->second];
    } else if (link.kind == LinkKind::kInterRegion) {
      auto rt = region_overrides_.find({std::min(da.region, db.region), std::max(da.region, db.region)});
      if (rt != region_overrides_.end()) o = &overrides[rt->second];
    }
  }
  if (o != nullptr) {
    link.bandwidth_bytes_per_s = o->bandwidth_bytes_per_s;
    if (o->latency_s) link.latency_s = *o->latency_s;
  }
  for (int d : {a, b}) {
    const EmulationConfig* emu = emulation(d);
    if (emu != nullptr && emu->link_bandwidth_bytes_per_s)
      link.bandwidth_bytes_per_s = std::min(link.bandwidth_bytes_per_s, *emu->link_bandwidth_bytes_per_s);
  }
  return link;
}

double Cluster::total_peak_fp16_flops() const {
  double sum = 0;
  for (const auto& n : nodes) sum += n.num_devices * catalog.Find(n.device_type)->peak_fp16_flops;
  return sum;
}

double Cluster::total_memory_bytes() const {
  double sum = 0;
  for (int d = 0; d < num_devices(); ++d) sum += memory_bytes(d);
  return sum;
}

}  // namespace motley
