// Cluster: nodes of devices, their links and regions, as read from a cluster file; plus the
// derived figures every planner and executor uses: a flat list of devices and the bandwidth and
// latency between any two of them.
#pragma once

#include <map>
#include <optional>
#include <string>
#include <utility>
#include <vector>

#include "core/gpu_catalog.h"
#include "core/precision.h"
#include "core/prices.h"

namespace motley {

enum class Interconnect { kNvSwitch, kNvLink, kPcie };
std::string_view InterconnectName(Interconnect ic);

/// Emulation of one device by a local process (docs/design.md, "Device emulation").
/// Off unless the cluster file has an [nodes.emulation] table.
struct EmulationConfig {
  double speed_factor = 1.0;           // compute ops take this many times longer (2.0 = half as fast)
  std::optional<double> memory_bytes;  // capacity the ledger enforces; default: the type's memory
  std::optional<double> link_bandwidth_bytes_per_s;  // caps every link of this device
};

struct NodeSpec {
  std::string name;         // unique in the cluster
  std::string device_type;  // catalog name of its devices
  int num_devices = 1;
  Interconnect interconnect = Interconnect::kPcie;
  double intra_bandwidth_bytes_per_s = 0;  // between two devices of this node, per direction
  double nic_bandwidth_bytes_per_s = 0;    // to other nodes; 0 only in a single-node cluster
  std::string region = "default";
  std::string
      host;  // the machine it is (a hostname or address; "" = unnamed): ranks find their devices by it
  std::vector<EmulationConfig> emulation;  // empty, or one per device
  std::optional<DevicePrice> price;        // what one of its devices costs (a cluster file's [[prices]])
  // Rented as spot (preemptible) capacity: its devices cost the price's spot_usd_per_hour and are
  // interrupted at its spot_interruptions_per_hour (cost/money.h prices what that costs a run).
  bool spot = false;
};

/// A measured bandwidth (and optionally latency) between two nodes or two regions, replacing the
/// derived figure.
struct LinkOverride {
  std::string a, b;  // node names, or region names
  double bandwidth_bytes_per_s = 0;
  std::optional<double> latency_s;
};

struct NetworkConfig {
  double intra_node_latency_s = 3e-6;             // NVLink/PCIe hop incl. launch: a few microseconds
  double inter_node_latency_s = 30e-6;            // same-region Ethernet/IB incl. software stack
  double inter_region_bandwidth_bytes_per_s = 0;  // required when there are several regions
  double inter_region_latency_s = 10e-3;          // tens of ms between datacenters is common
};

enum class LinkKind { kSelf, kIntraNode, kInterNode, kInterRegion };
std::string_view LinkKindName(LinkKind kind);

struct Link {
  LinkKind kind = LinkKind::kSelf;
  double bandwidth_bytes_per_s = 0;  // per direction; infinite for kSelf
  double latency_s = 0;
  // A collective's fixed cost a call over this link beyond its ring steps' latencies (the
  // library's synchronisation and thread hand-offs): measured by `motley profile --links`, 0 in a
  // cluster file.
  double collective_overhead_s = 0;
};

struct Device {
  int id = 0;           // global rank order: nodes in file order, devices within a node
  int node = 0;         // index into Cluster::nodes
  int local_index = 0;  // index within its node
  int region = 0;       // index into Cluster::regions
};

struct Cluster {
  std::string name;
  GpuCatalog catalog;  // the built-in catalog plus the file's [device_types]
  std::vector<NodeSpec> nodes;
  std::vector<std::string> regions;  // distinct, in order of first appearance
  NetworkConfig network;
  std::vector<LinkOverride> overrides;
  std::vector<EgressPrice> egress;  // what traffic between its regions costs ([[egress]])
  std::vector<Device> devices;      // derived by Finalize()
  // What a run has learnt some devices really offer, below their capacity: planning caps them at
  // this (a supervising `motley train` sets it after a device ran out of memory; never read from a
  // cluster file). Device id -> bytes.
  std::map<int, double> memory_cap_bytes;
  // What a run has measured some devices' compute to take: this many times what the profile (and
  // the emulation) says — a throttled or shared GPU; planning scales their compute by it (live
  // rebalancing sets it; never read from a cluster file). Device id -> factor.
  std::map<int, double> measured_slowdown;

  /// Derives devices, regions and the override index. REQUIRES: nodes validated.
  void Finalize();

  int num_devices() const { return static_cast<int>(devices.size()); }
  const GpuSpec& spec(int device) const;
  const NodeSpec& node_of(int device) const { return nodes[devices[device].node]; }
  /// The emulation settings of a device, or nullptr when it is not emulated.
  const EmulationConfig* emulation(int device) const;
  bool emulated() const;
  /// Every node has a price (then every pair of its regions has an egress price too: validated).
  bool priced() const;
  /// The precision to train in when the user says "auto": bf16 where every device type computes in
  /// it, else fp16 (with loss scaling: V100, T4), fp32 on emulated (CPU) devices; `why` says which
  /// and why.
  Precision TrainingPrecision(std::string* why) const;
  /// The memory a device offers: the emulated capacity when set, else its type's memory; no more
  /// than its memory_cap_bytes.
  double memory_bytes(int device) const;
  /// What CUDA, NCCL and the allocator keep of it (GpuSpec::reserve_bytes); 0 on an emulated device
  /// (a CPU process whose emulated memory is all the run's).
  double reserve_bytes(int device) const;
  /// memory_bytes less the reserve: what planners, the memory model and the simulator plan within.
  double usable_memory_bytes(int device) const;
  Link LinkBetween(int a, int b) const;
  double total_peak_fp16_flops() const;
  double total_memory_bytes() const;

 private:
  std::map<std::pair<int, int>, size_t> node_overrides_;    // (node, node) -> overrides index
  std::map<std::pair<int, int>, size_t> region_overrides_;  // (region, region) -> index
  // Each node's type as catalog.specs() index, found by Finalize (spec() is asked per device in
  // the planners' inner loops, and Find compares names); valid while the catalog's version is.
  std::vector<int> spec_of_node_;
  uint64_t spec_version_ = 0;
};

}  // namespace motley
