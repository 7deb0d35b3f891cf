#include "profile/link_probe.h"

#include <algorithm>
#include <array>
#include <chrono>
#include <cmath>
#include <map>

#include <fmt/format.h>

#include "core/message_tags.h"
#include "core/units.h"
#include "runtime/device/cuda_device.h"
#include "runtime/emulation/device_emulation.h"

namespace motley {
namespace {

using Clock = std::chrono::steady_clock;
double Since(Clock::time_point t) { return std::chrono::duration<double>(Clock::now() - t).count(); }

struct Fit {
  double bandwidth_bytes_per_s = 0, latency_s = 0;
};

// The bandwidth: the least-squares slope of one-way seconds over bytes (the large messages weigh
// most). The latency: what the smallest message took beyond its bytes at that bandwidth — its
// direct measure, where the line's intercept can fall below zero when small messages travel faster
// than the slope says (a token bucket lets a burst through at the wire's speed).
Fit FitLine(const std::vector<double>& bytes, const std::vector<double>& seconds) {
  const double n = static_cast<double>(bytes.size());
  double mx = 0, my = 0;
  for (size_t i = 0; i < bytes.size(); ++i) mx += bytes[i] / n, my += seconds[i] / n;
  double cov = 0, var = 0;
  for (size_t i = 0; i < bytes.size(); ++i)
    cov += (bytes[i] - mx) * (seconds[i] - my), var += (bytes[i] - mx) * (bytes[i] - mx);
  Fit f;
  const double slope = var > 0 ? cov / var : 0;
  if (slope > 0) {
    f.bandwidth_bytes_per_s = 1 / slope;
    f.latency_s = std::max(0.0, seconds.front() - slope * bytes.front());
  } else {  // noise swamped the sizes: the largest message's average rate
    f.bandwidth_bytes_per_s = bytes.back() / seconds.back();
    f.latency_s = 0;
  }
  return f;
}

}  // namespace

std::string NodeConfigKey(const Cluster& cluster, int node) {
  const NodeSpec& n = cluster.nodes[node];
  std::string key = fmt::format("{}|{}|{}|{:g}|{:g}|{}", n.device_type, static_cast<int>(n.interconnect),
                                n.num_devices >= 2 ? 2 : 1, n.intra_bandwidth_bytes_per_s,
                                n.nic_bandwidth_bytes_per_s, n.region);
  for (const EmulationConfig& e : n.emulation)
    key += fmt::format("|{:g}", e.link_bandwidth_bytes_per_s.value_or(0));
  // A node named in a link override has links of its own.
  for (const LinkOverride& o : cluster.overrides)
    if (o.a == n.name || o.b == n.name) key += "|" + n.name;
  return key;
}

namespace {

// Configurations in order of first appearance, with their nodes.
std::vector<std::vector<int>> ConfigGroups(const Cluster& cluster, std::vector<int>* config_of_node) {
  std::map<std::string, int> index;
  std::vector<std::vector<int>> groups;
  config_of_node->assign(cluster.nodes.size(), -1);
  for (size_t n = 0; n < cluster.nodes.size(); ++n) {
    auto [it, fresh] =
        index.emplace(NodeConfigKey(cluster, static_cast<int>(n)), static_cast<int>(groups.size()));
    if (fresh) groups.emplace_back();
    groups[it->second].push_back(static_cast<int>(n));
    (*config_of_node)[n] = it->second;
  }
  return groups;
}

int FirstDevice(const Cluster& cluster, int node, int local = 0) {
  for (const Device& d : cluster.devices)
    if (d.node == node && d.local_index == local) return d.id;
  return -1;
}

// The representative pairs with the configurations they stand for: (config a, config b), a == b
// with `intra` for a node's own devices.
struct ProbePair {
  int a = 0, b = 0;  // devices
  int config_a = 0, config_b = 0;
  bool intra = false;
};

std::vector<ProbePair> Pairs(const Cluster& cluster, std::vector<int>* config_of_node) {
  const std::vector<std::vector<int>> groups = ConfigGroups(cluster, config_of_node);
  std::vector<ProbePair> pairs;
  for (size_t c = 0; c < groups.size(); ++c) {
    const int node = groups[c].front();
    if (cluster.nodes[node].num_devices >= 2)
      pairs.push_back({FirstDevice(cluster, node, 0), FirstDevice(cluster, node, 1), static_cast<int>(c),
                       static_cast<int>(c), true});
  }
  for (size_t c = 0; c < groups.size(); ++c)
    for (size_t e = c; e < groups.size(); ++e) {
      if (c == e && groups[c].size() < 2) continue;
      const int na = groups[c][0], nb = c == e ? groups[c][1] : groups[e][0];
      pairs.push_back({FirstDevice(cluster, na), FirstDevice(cluster, nb), static_cast<int>(c),
                       static_cast<int>(e), false});
    }
  return pairs;
}

// Every node pair takes its configurations' figures (`results`: per probed pair, bandwidth, latency
// and a collective's overhead).
std::vector<ProfileLink> NodeLinks(const Cluster& cluster, const std::vector<ProbePair>& pairs,
                                   const std::vector<int>& config_of_node, const torch::Tensor& results) {
  using Figures = std::array<double, 3>;  // bandwidth, latency, collective overhead
  std::map<std::pair<int, int>, Figures> by_config;
  std::map<int, Figures> intra;
  for (size_t k = 0; k < pairs.size(); ++k) {
    const Figures r{results[static_cast<int64_t>(k)][0].item<double>(),
                    results[static_cast<int64_t>(k)][1].item<double>(),
                    results[static_cast<int64_t>(k)][2].item<double>()};
    if (pairs[k].intra) {
      intra[pairs[k].config_a] = r;
    } else {
      by_config[{pairs[k].config_a, pairs[k].config_b}] = r;
      by_config[{pairs[k].config_b, pairs[k].config_a}] = r;
    }
  }
  std::vector<ProfileLink> links;
  for (size_t a = 0; a < cluster.nodes.size(); ++a)
    for (size_t b = a; b < cluster.nodes.size(); ++b) {
      Figures r;
      if (a == b) {
        auto it = intra.find(config_of_node[a]);
        if (it == intra.end()) continue;  // one device: no link inside
        r = it->second;
      } else {
        r = by_config.at({config_of_node[a], config_of_node[b]});
      }
      links.push_back({cluster.nodes[a].name, cluster.nodes[b].name, r[0], r[1], r[2]});
    }
  return links;
}

}  // namespace

std::vector<std::pair<int, int>> LinkProbePairs(const Cluster& cluster) {
  std::vector<int> config_of_node;
  std::vector<std::pair<int, int>> out;
  for (const ProbePair& p : Pairs(cluster, &config_of_node)) out.push_back({p.a, p.b});
  return out;
}

Result<std::vector<ProfileLink>> MeasureLinks(Communicator& comm, const Cluster& cluster,
                                              const LinkProbeConfig& config) {
  if (comm.world_size() != cluster.num_devices())
    return Status::InvalidArgument(
        fmt::format("measuring links needs one rank per device of {} ({} devices) but {} ranks were started "
                    "(motley launch --nproc {})",
                    cluster.name, cluster.num_devices(), comm.world_size(), cluster.num_devices()));
  std::vector<int> config_of_node;
  const std::vector<ProbePair> pairs = Pairs(cluster, &config_of_node);
  const int me = comm.rank();
  const DeviceEmulation emulation(cluster, me);
  // Each pair's own group, for its all-reduces (every rank creates every group, in the same order).
  std::vector<CommGroup*> pair_groups;
  for (const ProbePair& p : pairs) {
    MOTLEY_ASSIGN_OR_RETURN(CommGroup * g, comm.NewGroup({p.a, p.b}));
    pair_groups.push_back(g);
  }
  // Per pair: bandwidth, latency and a collective's overhead, filled by the pair's first rank and
  // summed over the world.
  torch::Tensor results = torch::zeros({static_cast<int64_t>(pairs.size()), 3}, torch::kFloat64);
  for (size_t k = 0; k < pairs.size(); ++k) {
    const ProbePair& p = pairs[k];
    if (config.progress && me == 0)
      config.progress(fmt::format("link {} <-> {} ({})", cluster.nodes[cluster.devices[p.a].node].name,
                                  cluster.nodes[cluster.devices[p.b].node].name,
                                  p.intra ? "within the node" : "between nodes"));
    if (me != p.a && me != p.b) continue;
    const int peer = me == p.a ? p.b : p.a;
    const Link nominal = cluster.LinkBetween(p.a, p.b);
    std::vector<double> sizes, one_way;
    int64_t tag = MessageTag(TagRange::kLinkProbe, static_cast<int64_t>(k) * 4096);
    for (int64_t bytes = config.min_bytes; bytes <= config.max_bytes; bytes *= 8) {
      const double predicted = nominal.latency_s + static_cast<double>(bytes) / nominal.bandwidth_bytes_per_s;
      if (sizes.size() >= 2 && predicted > config.max_transfer_s) break;
      torch::Tensor buffer =
          torch::zeros({bytes / 4}, torch::TensorOptions().dtype(torch::kFloat32).device(config.device));
      // Noise on a loaded host only ever adds time, and it weighs most on the small messages, whose
      // inflated times flatten the fitted line (a link that seems faster than it is): each size is
      // timed often enough to fill `min_time_per_size_s` (both ranks count alike, from the cluster
      // file's figures) and its fastest round trip counts.
      const int repeats =
          std::clamp(static_cast<int>(std::ceil(config.min_time_per_size_s / (2 * predicted))),
                     config.repeats, std::max(config.repeats, config.max_repeats));
      std::vector<double> trips;
      for (int rep = 0; rep <= repeats; ++rep, ++tag) {
        const auto t = Clock::now();
        for (int leg = 0; leg < 2; ++leg) {
          const bool sending = (leg == 0) == (me == p.a);
          if (sending) {
            SleepSeconds(
                emulation.TransferSeconds(static_cast<double>(bytes), peer));  // as the executor paces sends
            MOTLEY_ASSIGN_OR_RETURN(PendingTransfer s, comm.Send(buffer, peer, tag));
            MOTLEY_RETURN_IF_ERROR(s.Wait());
          } else {
            MOTLEY_ASSIGN_OR_RETURN(PendingTransfer r, comm.Recv(buffer, peer, tag));
            MOTLEY_RETURN_IF_ERROR(r.Wait());
          }
          // On NCCL a wait only holds the device's stream: the host waits for the device itself.
          if (config.device.is_cuda()) SynchronizeDevice(config.device);
        }
        if (rep > 0) trips.push_back(Since(t));  // the first is a warm-up
      }
      sizes.push_back(static_cast<double>(bytes));
      one_way.push_back(*std::min_element(trips.begin(), trips.end()) / 2);
    }
    // A collective call costs more than its ring's messages: the library synchronises the members
    // and hands the work between its threads (Gloo on a loaded CPU host: ~1 ms a call, where a
    // message's latency is ~0.1 ms). A small all-reduce over the pair, less what the fitted line
    // says its two ring steps take, is that overhead; a tensor-parallel team pays it at every
    // layer (Collective::calls).
    const Fit f = FitLine(sizes, one_way);
    torch::Tensor small = torch::zeros({config.collective_bytes / 4},
                                       torch::TensorOptions().dtype(torch::kFloat32).device(config.device));
    std::vector<double> calls;
    for (int rep = 0; rep <= config.collective_calls; ++rep) {
      const auto t = Clock::now();
      MOTLEY_RETURN_IF_ERROR(comm.AllReduceSum(*pair_groups[k], small));
      if (config.device.is_cuda()) SynchronizeDevice(config.device);
      SleepSeconds(emulation.CollectiveSeconds(static_cast<double>(config.collective_bytes), {p.a, p.b},
                                               CollectiveKind::kAllReduce) -
                   Since(t));
      if (rep > 0) calls.push_back(Since(t));
    }
    // The calls' times are bimodal on a host whose cores idle between them (a CPU host: 0.2-0.4 ms
    // when the members' threads are awake, 1.5-8 ms when the scheduler must wake one, in about
    // equal shares): the lower quartile is the library's own cost, stable from run to run.
    std::nth_element(calls.begin(), calls.begin() + calls.size() / 4, calls.end());
    const double ring_s =
        2 * (f.latency_s + static_cast<double>(config.collective_bytes) / 2 / f.bandwidth_bytes_per_s);
    if (me == p.a) {
      results[static_cast<int64_t>(k)][0] = f.bandwidth_bytes_per_s;
      results[static_cast<int64_t>(k)][1] = f.latency_s;
      results[static_cast<int64_t>(k)][2] = std::max(0.0, calls[calls.size() / 4] - ring_s);
    }
  }
  MOTLEY_RETURN_IF_ERROR(comm.AllReduceSum(comm.world(), results));

  std::vector<ProfileLink> links = NodeLinks(cluster, pairs, config_of_node, results);
  for (ProfileLink& l : links) l.library = config.device.is_cuda() ? "nccl" : "gloo";
  return links;
}

}  // namespace motley
