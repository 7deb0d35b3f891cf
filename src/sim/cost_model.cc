#include "sim/cost_model.h"

#include <algorithm>
#include <cstdint>
#include <limits>

#include "cost/comm_cost.h"

namespace motley {

CostModel::CostModel(const Cluster& cluster, const ModelSpec& model, const Profile* profile, int64_t seq_len,
                     Precision precision, bool activation_checkpointing, CostModelConfig config)
    : cluster_(cluster),
      model_(model),
      profile_(profile),
      seq_len_(seq_len),
      precision_(precision),
      recompute_(activation_checkpointing),
      config_(config) {
  entry_by_device_.resize(cluster.num_devices(), nullptr);
  for (int d = 0; d < cluster.num_devices(); ++d) {
    roofline_layer_forward_s_.push_back(
        RooflineLayerForwardS(cluster.spec(d), model, seq_len, 1, precision, config_.roofline));
    peak_flops_.push_back(motley::PeakFlops(cluster.spec(d), precision));
  }
  if (profile_ != nullptr) {
    for (int d = 0; d < cluster.num_devices(); ++d)
      entry_by_device_[d] = profile_->Find(cluster.spec(d).name, model, seq_len, precision);
    std::map<std::string, int> node_index;
    for (size_t n = 0; n < cluster.nodes.size(); ++n) node_index[cluster.nodes[n].name] = static_cast<int>(n);
    for (const auto& l : profile_->links) {
      auto a = node_index.find(l.a), b = node_index.find(l.b);
      if (a == node_index.end() || b == node_index.end()) continue;  // measured on another cluster
      measured_links_[{std::min(a->second, b->second), std::max(a->second, b->second)}] = &l;
      if (l.library == "gloo") network_.library = CollectiveLibrary::kGloo;
    }
  }
  // Emulated devices are CPU processes: Gloo runs their collectives, as it ran the profile's.
  if (cluster.emulated()) network_.library = CollectiveLibrary::kGloo;
  const std::vector<int> first_device = FirstDeviceOfEachNode(cluster);
  if (!cluster.emulated() && cluster.nodes.size() <= kMaxCachedNodes) {
    const size_t n = cluster.nodes.size();
    node_links_.resize(n * n);
    for (size_t a = 0; a < n; ++a)
      for (size_t b = 0; b < n; ++b) {
        // Two devices of one node: its first two (a node of one device never asks).
        const int da = first_device[a];
        const int db = a != b ? first_device[b] : cluster.nodes[a].num_devices > 1 ? da + 1 : -1;
        if (db >= 0) node_links_[a * n + b] = DerivedLinkBetween(da, db);
      }
  }
  network_.link = [this](int a, int b) { return LinkBetween(a, b); };
  network_.node_of = [this](int d) { return cluster_.devices[d].node; };
  network_.nic_bytes_per_s = NodeNics(first_device, network_.link);
}

Link CostModel::LinkBetween(int a, int b) const {
  if (node_links_.empty() || a == b) return DerivedLinkBetween(a, b);
  const auto n = cluster_.nodes.size();
  return node_links_[static_cast<size_t>(cluster_.devices[static_cast<size_t>(a)].node) * n +
                     static_cast<size_t>(cluster_.devices[static_cast<size_t>(b)].node)];
}

Link CostModel::DerivedLinkBetween(int a, int b) const {
  Link link = cluster_.LinkBetween(a, b);
  if (link.kind == LinkKind::kSelf || measured_links_.empty()) return link;
  const int na = cluster_.devices[a].node, nb = cluster_.devices[b].node;
  auto it = measured_links_.find({std::min(na, nb), std::max(na, nb)});
  if (it != measured_links_.end()) {
    link.bandwidth_bytes_per_s = it->second->bandwidth_bytes_per_s;
    link.latency_s = it->second->latency_s;
    link.collective_overhead_s = it->second->collective_overhead_s;
  }
  return link;
}

const ProfileEntry* CostModel::Entry(int device) const { return entry_by_device_[device]; }

std::optional<int64_t> CostModel::MeasuredMaxMicrobatch(int device, int zero_stage, int dp_degree) const {
  const ProfileEntry* e = Entry(device);
  if (e == nullptr || !e->limits || zero_stage < 0 || zero_stage > 3) return std::nullopt;
  const MeasuredLimits& l = *e->limits;
  if (l.dp_degree != dp_degree || l.num_layers != model_.num_layers ||
      l.total_params != static_cast<double>(TotalParams(model_)) ||
      l.capacity_bytes != static_cast<int64_t>(cluster_.memory_bytes(device)))
    return std::nullopt;
  return l.max_microbatch_by_zero[zero_stage];
}

std::string CostModel::ComputeSource(int device) const { return Entry(device) ? "profile" : "roofline"; }

double CostModel::PeakFlops(int device) const { return peak_flops_[static_cast<size_t>(device)]; }

double CostModel::LayerForwardS(int device, double sequences) const {
  if (const ProfileEntry* e = Entry(device)) return e->ForwardS(sequences);
  return roofline_layer_forward_s_[static_cast<size_t>(device)] * sequences;
}

double CostModel::LayerBackwardS(int device, double sequences) const {
  if (const ProfileEntry* e = Entry(device)) {
    double b = e->BackwardS(sequences);
    if (e->backward_includes_recompute && !recompute_) b -= e->ForwardS(sequences);
    if (!e->backward_includes_recompute && recompute_) b += e->ForwardS(sequences);
    return b;
  }
  return (recompute_ ? 3.0 : 2.0) * LayerForwardS(device, sequences);
}

double CostModel::Slowdown(int device) const {
  const EmulationConfig* emu = cluster_.emulation(device);
  const auto measured = cluster_.measured_slowdown.find(device);
  return (emu != nullptr ? emu->speed_factor : 1.0) *
         (measured != cluster_.measured_slowdown.end() ? measured->second : 1.0);
}

double CostModel::ComputeS(int device, const Op& op) const {
  const double slowdown = Slowdown(device);
  const GpuSpec& spec = cluster_.spec(device);
  const double efficiency = config_.roofline.matmul_efficiency;
  double t = 0;
  const double layers = op.layer_end - op.layer_begin;
  const double tokens = static_cast<double>(op.sequences) * seq_len_;
  const double head_forward_s =
      op.head ? HeadForwardFlopsPerToken(model_) * tokens / (PeakFlops(device) * efficiency) : 0;
  const ProfileEntry* entry = Entry(device);
  const double mb = static_cast<double>(op.sequences);
  // With tensor parallelism a rank runs its share of each layer — measured at that degree when the
  // profile has it, else the whole layer's time divided by the degree — and its vocabulary columns
  // of the head (the head's time divided by the degree).
  const int tp = std::max<int>(1, op.tp_degree);
  switch (op.kind) {
    case OpKind::kForward: {
      const std::optional<double> share = entry && tp > 1 ? entry->TpForwardS(tp, mb) : std::nullopt;
      t = layers * (share ? *share : LayerForwardS(device, mb) / tp) +
          (op.head && entry && entry->HeadForwardS(mb) ? *entry->HeadForwardS(mb) : head_forward_s) / tp;
      break;
    }
    case OpKind::kBackward: {
      std::optional<double> share = entry && tp > 1 ? entry->TpBackwardS(tp, mb) : std::nullopt;
      if (share && entry->backward_includes_recompute && !recompute_) *share -= *entry->TpForwardS(tp, mb);
      if (share && !entry->backward_includes_recompute && recompute_) *share += *entry->TpForwardS(tp, mb);
      t = layers * (share ? *share : LayerBackwardS(device, mb) / tp) +
          (op.head && entry && entry->HeadBackwardS(mb) ? *entry->HeadBackwardS(mb) : 2 * head_forward_s) /
              tp;
      break;
    }
    case OpKind::kOuterStep:  // memory-bound: the piece, its anchor, momentum and average read and written
      t = std::max(op.flops / motley::PeakFlops(spec, MasterPrecision(precision_)),
                   op.bytes / spec.memory_bandwidth_bytes_per_s);
      break;
    case OpKind::kOptimizerStep:
      if (entry != nullptr && entry->optimizer_ms_per_mparam > 0) {
        t = op.params * 1e-6 * entry->optimizer_ms_per_mparam * 1e-3;  // measured
      } else {
        // Memory-bound: read and write parameters, gradients and optimizer state once.
        t = std::max(op.flops / motley::PeakFlops(spec, MasterPrecision(precision_)),
                     op.bytes / spec.memory_bandwidth_bytes_per_s);
      }
      break;
    default:
      return 0;
  }
  return t * slowdown;
}

double CostModel::CopyS(int device, double bytes) const { return HostCopyS(cluster_.spec(device), bytes); }

double CostModel::TransferS(int from, int to, double bytes) const {
  return motley::TransferS(LinkBetween(from, to), bytes);
}

double CostModel::CollectiveS(OpKind kind, const std::vector<int>& devices, double bytes) const {
  const CollectiveKind k = kind == OpKind::kReduceScatter ? CollectiveKind::kReduceScatter
                           : kind == OpKind::kAllGather   ? CollectiveKind::kAllGather
                                                          : CollectiveKind::kAllReduce;
  return motley::CollectiveS(k, devices, bytes, network_);
}

}  // namespace motley
