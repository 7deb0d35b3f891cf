#include "plan/zorse_planner.h"

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <functional>
#include <limits>
#include <map>
#include <numeric>
#include <optional>
#include <set>
#include <tuple>

#include <fmt/format.h>

#include "core/units.h"
#include "cost/state_bytes.h"
#include "plan/device_subsets.h"
#include "plan/evaluate_all.h"
#include "plan/min_k_cut.h"

namespace motley {
namespace {

// Splits `total` into integer shares proportional to `weights` (largest remainder), each share at
// least `min_share`. REQUIRES: total >= min_share * weights.size().
std::vector<int64_t> Proportional(int64_t total, const std::vector<double>& weights, int64_t min_share) {
  const size_t n = weights.size();
  std::vector<int64_t> share(n, min_share);
  const int64_t rest = total - min_share * static_cast<int64_t>(n);
  const double sum = std::accumulate(weights.begin(), weights.end(), 0.0);
  std::vector<std::pair<double, size_t>> remainders;
  int64_t given = 0;
  for (size_t i = 0; i < n; ++i) {
    const double exact = rest * weights[i] / sum;
    const int64_t whole = static_cast<int64_t>(std::floor(exact));
    share[i] += whole;
    given += whole;
    remainders.push_back({exact - whole, i});
  }
  std::sort(remainders.begin(), remainders.end(),
            [](const auto& a, const auto& b) { return a.first > b.first; });
  for (int64_t k = 0; k < rest - given; ++k) ++share[remainders[k % n].second];
  return share;
}

// The slowest link of a ring over the group (infinite for one device: no data-parallel traffic).
double RingBandwidth(const Cluster& c, const std::vector<int>& devices) {
  double bw = std::numeric_limits<double>::infinity();
  if (devices.size() < 2) return bw;
  for (size_t i = 0; i < devices.size(); ++i)
    bw = std::min(bw, c.LinkBetween(devices[i], devices[(i + 1) % devices.size()]).bandwidth_bytes_per_s);
  return bw;
}

double StageParams(const ModelSpec& m, const LayerRange& r) {
  double p = static_cast<double>(r.size()) * ParamsPerLayer(m);
  if (r.begin == 0) p += EmbeddingParams(m);
  if (r.end == m.num_layers) p += HeadParams(m);
  if (r.end == m.num_layers && r.begin > 0) p += TiedCopyParams(m);  // the model is split: the head's copy
  return p;
}

// A partition numbered by first appearance (0 for the first vertex's part, ...), so equal
// partitions compare equal.
std::vector<int> CanonicalPartition(const std::vector<int>& part) {
  std::map<int, int> renumber;
  std::vector<int> out;
  for (int p : part) out.push_back(renumber.emplace(p, static_cast<int>(renumber.size())).first->second);
  return out;
}

// ", tensor parallel in runs of 4" (every group), ", tensor parallel per group: 4, 4, 1" or "".
std::string TensorParallelNote(const std::vector<int>& tp_of) {
  if (std::all_of(tp_of.begin(), tp_of.end(), [](int t) { return t == 1; })) return "";
  if (std::all_of(tp_of.begin(), tp_of.end(), [&](int t) { return t == tp_of[0]; }))
    return fmt::format(", tensor parallel in runs of {}", tp_of[0]);
  return fmt::format(", tensor parallel per group: {}", fmt::join(tp_of, ", "));
}

}  // namespace

std::vector<ZorseCandidate> ZorseCandidatesForGroups(const Cluster& cluster, const ModelSpec& model,
                                                     const PlannerCosts& costs, const ZorseRequest& request,
                                                     std::vector<std::vector<int>> groups) {
  std::vector<ZorseCandidate> out;
  const int num_layers = static_cast<int>(model.num_layers);
  const int num_groups = static_cast<int>(groups.size());
  if (num_groups == 0 || num_groups > num_layers) return out;
  const StateBytesPerParam state = StateBytes(request.precision);
  const double act_per_seq =
      static_cast<double>(request.seq_len) * model.hidden_size * BytesPerElement(request.precision);

  // Order groups by descending intra-group bandwidth (§4.3.3), faster first on ties.
  auto layer_rate = [&](int d) {  // layers per second at a microbatch of one
    return 1.0 / ((costs.LayerForwardS(d, 1) + costs.LayerBackwardS(d, 1)) * costs.Slowdown(d));
  };
  auto group_speed = [&](const std::vector<int>& g) {
    double s = 0;
    for (int d : g) s += layer_rate(d);
    return s;
  };
  if (!request.keep_group_order)
    std::stable_sort(groups.begin(), groups.end(), [&](const auto& a, const auto& b) {
      const double ba = RingBandwidth(cluster, a), bb = RingBandwidth(cluster, b);
      if (ba != bb) return ba > bb;
      return group_speed(a) > group_speed(b);
    });
  std::vector<double> speeds;
  for (const auto& g : groups) speeds.push_back(group_speed(g));
  const std::vector<int64_t> layers64 = Proportional(num_layers, speeds, 1);
  const std::vector<int> layers(layers64.begin(), layers64.end());
  int max_ministages = *std::min_element(layers.begin(), layers.end());
  if (request.max_ministages > 0) max_ministages = std::min(max_ministages, request.max_ministages);
  // Tensor parallelism of width 2, 4 or 8 inside a group where every run of that many consecutive
  // devices shares a node with NVLink or NVSwitch (the layers, the embedding and the head split:
  // runtime/model/tensor_parallel.h). A width w gives each group the widest such degree up to w — a
  // group of NVLink nodes splits its layers, one on PCIe nodes does not — unless
  // `uniform_tensor_parallel` (a symmetric mesh: w in every group, or not at all).
  const auto group_can_split = [&](const std::vector<int>& g, int tp) {
    if (model.num_heads % tp != 0 || model.num_kv_heads % tp != 0 || model.ffn_size % tp != 0) return false;
    if (g.size() % tp != 0) return false;
    for (size_t i = 0; i < g.size(); i += tp) {
      if (cluster.node_of(g[i]).interconnect == Interconnect::kPcie) return false;
      for (int j = 1; j < tp; ++j)
        if (cluster.devices[g[i + j]].node != cluster.devices[g[i]].node) return false;
    }
    return true;
  };
  std::vector<std::pair<int, std::vector<int>>> tp_options = {{1, std::vector<int>(num_groups, 1)}};
  for (int w = 2; request.try_tensor_parallel && w <= request.max_tensor_parallel; w *= 2) {
    std::vector<int> per_group(num_groups, 1);
    bool all = true;
    for (int g = 0; g < num_groups; ++g) {
      for (int tp = w; tp > 1; tp /= 2)
        if (group_can_split(groups[g], tp)) {
          per_group[g] = tp;
          break;
        }
      all = all && per_group[g] == w;
    }
    if (request.uniform_tensor_parallel && !all) continue;
    // Teams in a minority of the devices leave the pipeline's bottleneck where it was (on Zorse's
    // cluster C, its two NVLink nodes of sixteen: eight more kinds of candidate, none better).
    size_t in_teams = 0, devices = 0;
    for (int g = 0; g < num_groups; ++g) {
      devices += groups[g].size();
      if (per_group[g] > 1) in_teams += groups[g].size();
    }
    if (2 * in_teams < devices) continue;
    if (per_group != tp_options.back().second) tp_options.push_back({w, per_group});
  }
  for (const auto& [width, tp_of] : tp_options) {
    // A tied model sums its embedding's and head's gradients between ranks holding the same
    // vocabulary rows: the first group (the embedding's) and the last (the head's) split it alike.
    if (model.tie_embeddings && tp_of.front() != tp_of.back()) continue;
    for (int64_t b = 1; b <= std::min<int64_t>(request.max_microbatch, request.global_batch_sequences); ++b) {
      if (request.global_batch_sequences % b != 0) continue;
      const int64_t num_mb = request.global_batch_sequences / b;
      if (num_mb > kMaxMicrobatchesPerDevice) continue;  // more than any device runs in a step (plan.h)
      // Each device's share of the microbatches follows its speed at this size.
      std::vector<std::vector<int64_t>> counts;
      std::vector<std::vector<double>> fwd(num_groups),
          bwd(num_groups);  // per device, one layer, one microbatch
      for (int g = 0; g < num_groups; ++g) {
        std::vector<double> rates;  // per tensor-parallel run (its leader)
        for (size_t i = 0; i < groups[g].size(); ++i) {
          const int d = groups[g][i];
          fwd[g].push_back(costs.LayerForwardS(d, static_cast<double>(b)) * costs.Slowdown(d) / tp_of[g]);
          bwd[g].push_back(costs.LayerBackwardS(d, static_cast<double>(b)) * costs.Slowdown(d) / tp_of[g]);
          if (i % tp_of[g] == 0) rates.push_back(1.0 / (fwd[g].back() + bwd[g].back()));
        }
        std::vector<int64_t> per_run = Proportional(num_mb, rates, 0), per_device;
        if (request.even_microbatches) {
          if (num_mb % static_cast<int64_t>(rates.size()) != 0)
            per_run.clear();
          else
            per_run.assign(rates.size(), num_mb / static_cast<int64_t>(rates.size()));
        }
        if (per_run.empty()) break;
        for (size_t i = 0; i < groups[g].size(); ++i) per_device.push_back(per_run[i / tp_of[g]]);
        counts.push_back(per_device);
      }
      if (static_cast<int>(counts.size()) != num_groups) continue;  // this size cannot be split evenly
      for (int s = 1; s <= max_ministages; ++s) {
        Plan p;
        p.strategy = "zorse";
        p.seq_len = request.seq_len;
        p.precision = request.precision;
        p.schedule = request.schedule;
        p.zero_stage = 2;
        p.activation_checkpointing = request.activation_checkpointing;
        p.offload_params = request.offload;
        p.offload_activations = request.offload;
        std::vector<int> ministages(num_groups, s);
        auto ranges = InterleavedMinistages(layers, ministages);
        for (int g = 0; g < num_groups; ++g) {
          GroupPlan gp;
          gp.ministages = ranges[g];
          gp.tp_degree = tp_of[g];
          for (size_t i = 0; i < groups[g].size(); ++i)
            gp.devices.push_back({groups[g][i], b, counts[g][i], 0});
          p.groups.push_back(gp);
        }
        // The cross-stage routing is left to the evaluator (routing_costs.h): only the few candidates
        // re-ranked need it, and it costs O(microbatches x devices).
        // Latency model (Eq. 1): (L_fwd + L_bwd) x N_ministages + L_startup.
        double l_fwd = 0, l_bwd = 0, startup = 0;
        for (int g = 0; g < num_groups; ++g) {
          double visit_f = 0, visit_b = 0;
          for (size_t i = 0; i < groups[g].size(); ++i) {
            visit_f = std::max(visit_f, counts[g][i] * fwd[g][i]);
            visit_b = std::max(visit_b, counts[g][i] * bwd[g][i]);
          }
          const double ms_layers = static_cast<double>(layers[g]) / s;
          const double ms_params = StageParams(model, ranges[g][0]) / tp_of[g];
          if (tp_of[g] > 1) {  // two all-reduces per layer and pass, per microbatch, not overlapped
            double most = 0;
            for (int64_t c : counts[g]) most = std::max(most, static_cast<double>(c));
            const std::vector<int> run(groups[g].begin(), groups[g].begin() + tp_of[g]);
            const double ar =
                most * 2 * ms_layers * costs.CollectiveS(OpKind::kAllReduce, run, act_per_seq * b);
            visit_f += ar / ms_layers;
            visit_b += ar / ms_layers;
          }
          const double gather = costs.CollectiveS(OpKind::kAllGather, groups[g], ms_params * state.params);
          const double reduce = costs.CollectiveS(OpKind::kReduceScatter, groups[g], ms_params * state.grads);
          l_fwd = std::max(l_fwd, std::max(visit_f * ms_layers, gather));
          l_bwd = std::max(l_bwd, std::max(visit_b * ms_layers, gather + reduce));
          // Filling the pipeline: one microbatch through the group's first ministage, and the first
          // gather, which nothing hides.
          double one_mb = 0;
          for (double f : fwd[g]) one_mb = std::max(one_mb, f * ms_layers);
          startup += one_mb;
          if (g == 0) startup += gather;
          if (g + 1 < num_groups)
            startup += costs.TransferS(groups[g].back(), groups[g + 1].front(), act_per_seq * b);
        }
        const double step = (l_fwd + l_bwd) * s + startup;

        // Memory model (Eq. 2) per device: two ministages of parameters gathered, their shards and
        // optimizer state, one ministage of full gradients, activations and working memory.
        double worst = 0;
        bool fits = true;
        std::string measured_note;
        std::vector<bool> holds_head(num_groups, false);
        for (int g = 0; g < num_groups; ++g)
          for (const auto& r : ranges[g]) holds_head[g] = holds_head[g] || r.end == model.num_layers;
        for (int g = 0; g < num_groups && fits; ++g) {
          const double d = static_cast<double>(groups[g].size()) / tp_of[g];
          double ms_params = 0;
          for (const auto& r : ranges[g]) ms_params = std::max(ms_params, StageParams(model, r) / tp_of[g]);
          const int ms_layers = (layers[g] + s - 1) / s;
          for (size_t i = 0; i < groups[g].size(); ++i) {
            double bytes = 0;
            if (request.offload && request.gradient_clipping) {
              // Two ministages gathered; every ministage's gradient shard held from its backward
              // visit until the updates after the global norm, which bring back the shard and
              // moments of two ministages at a time (plan/lower_state.cc).
              bytes += 2 * ms_params * state.params + 2 * ms_params / d * (state.params + state.optimizer);
              for (const auto& r : ranges[g]) bytes += StageParams(model, r) / tp_of[g] / d * state.grads;
            } else if (request.offload) {
              bytes += 2 * ms_params * state.params + 2 * ms_params / d * (state.params + state.optimizer);
            } else {  // ZeRO-2: full parameters stay, gradients and optimizer state sharded
              for (const auto& r : ranges[g]) {
                bytes += ZeroStateBytes(StageParams(model, r) / tp_of[g], d, 2, request.precision).device;
              }
            }
            // One ministage's full gradients, and the larger checkpointed piece's backward (a
            // layer's, or the head's where the group holds it).
            bytes += ms_params * state.grads;
            const double act = act_per_seq * b;
            // Without offload every microbatch in flight keeps its layers' boundary activations: all
            // of them under GPipe; under 1F1B a device's warm-up, as many as the stages from its
            // group on (pipeline_order.cc).
            const double in_flight =
                request.schedule == PipelineSchedule::k1F1B
                    ? static_cast<double>(std::min<int64_t>(counts[g][i], num_groups - g))
                    : static_cast<double>(counts[g][i]);
            const double saved = request.offload ? 2.0 * ms_layers * act : in_flight * layers[g] * act;
            bytes +=
                saved + 4 * act +
                CheckpointedBackwardBytes(model, request.seq_len, request.precision,
                                          static_cast<double>(b) * request.seq_len, holds_head[g], tp_of[g]);
            worst = std::max(worst, bytes);
            const bool modelled_fits = bytes <= cluster.usable_memory_bytes(groups[g][i]);
            // One group of every device, one ministage per layer, ZeRO-2 in place: the very step the
            // profiler's memory probe ran (profile/memory_probe.h). Its measured limit decides there;
            // the memory model elsewhere, and the difference is said.
            const std::optional<int64_t> measured =
                num_groups == 1 && tp_of[g] == 1 && !request.offload && s == model.num_layers &&
                        static_cast<int>(groups[g].size()) == (request.devices.empty()
                                                                   ? cluster.num_devices()
                                                                   : static_cast<int>(request.devices.size()))
                    ? costs.MeasuredMaxMicrobatch(groups[g][i], 2, static_cast<int>(groups[g].size()))
                    : std::nullopt;
            if (measured) {
              if ((b <= *measured) != modelled_fits && measured_note.empty())
                measured_note = fmt::format(
                    "; device {} fits at most {} sequences a microbatch (measured), where the "
                    "memory model says {}",
                    groups[g][i], *measured, modelled_fits ? "it fits" : "it does not");
              if (b > *measured) fits = false;
            } else if (!modelled_fits) {
              fits = false;
            }
          }
        }
        if (!fits) continue;
        ZorseCandidate c;
        c.plan = std::move(p);
        c.model_step_s = step;
        c.model_peak_bytes = worst;
        c.tp_degree = width;
        c.microbatch = b;
        c.ministages = s;
        std::vector<std::string> sizes;
        for (int g = 0; g < num_groups; ++g)
          sizes.push_back(fmt::format("{}x{} layers", groups[g].size(), layers[g]));
        c.why =
            fmt::format(
                "{} group(s) [{}], microbatch {} ({} microbatches), {} ministage(s) per group{}; model: {} "
                "step, {} worst device",
                num_groups, fmt::join(sizes, ", "), b, num_mb, s, TensorParallelNote(tp_of),
                FormatDuration(step), FormatBytes(worst)) +
            measured_note;
        out.push_back(std::move(c));
      }
    }
  }
  return out;
}

Result<ZorsePlan> PlanZorse(const Cluster& cluster, const ModelSpec& model, const PlannerCosts& costs,
                            const ZorseRequest& request, const PlanEvaluator& evaluate) {
  if (request.global_batch_sequences < 1) return Status::InvalidArgument("zorse planner: empty global batch");
  if (request.global_batch_sequences / request.max_microbatch > kMaxMicrobatchesPerDevice)
    return Status::InvalidArgument(
        fmt::format("zorse planner: a global batch of {} sequences needs at least {} microbatches (of up to "
                    "{} sequences), more "
                    "than motley runs in one step ({}); use a smaller global batch",
                    request.global_batch_sequences,
                    (request.global_batch_sequences + request.max_microbatch - 1) / request.max_microbatch,
                    request.max_microbatch, kMaxMicrobatchesPerDevice));
  // Phase 1: cut the graph of the nodes it may use into k groups for every k.
  std::vector<bool> allowed(cluster.num_devices(), request.devices.empty());
  for (int d : request.devices) allowed[d] = true;
  std::vector<std::vector<int>> node_devices;  // per used node, its devices
  std::vector<std::string> node_class;         // ... and its class (nodes of a class are interchangeable)
  {
    int d = 0;
    for (int n = 0; n < static_cast<int>(cluster.nodes.size()); ++n) {
      std::vector<int> mine;
      const int first = d;
      for (int i = 0; i < cluster.nodes[n].num_devices; ++i, ++d)
        if (allowed[d]) mine.push_back(d);
      if (!mine.empty()) {
        node_class.push_back(fmt::format("{}|{}", NodeClass(cluster, n, first), mine.size()));
        node_devices.push_back(std::move(mine));
      }
    }
  }
  const WeightedGraph graph = NodeBandwidthGraph(cluster, node_devices);
  // The groupings: SPLIT's cut into k for every k; and, on a few nodes, every way to group them
  // (SPLIT keeps fast links inside groups, which is not always what pays: a slow node may do
  // better as a stage of its own than beside a fast one). No more groups than layers: a stage
  // holds one at least.
  const int max_k = std::min<int>(
      request.max_groups > 0 ? std::min<int>(request.max_groups, graph.num_vertices) : graph.num_vertices,
      static_cast<int>(model.num_layers));
  const auto partitions = SplitMinKCuts(graph, max_k);
  std::vector<std::pair<std::vector<int>, std::string>> groupings;  // node -> group, and how it was found
  for (int k = 1; k <= max_k; ++k)
    groupings.push_back({partitions[k - 1], fmt::format("cut into {} by SPLIT", k)});
  if (graph.num_vertices <= request.exhaustive_groupings_up_to_nodes) {
    std::set<std::vector<int>> seen;
    for (const auto& [part, _] : groupings) seen.insert(CanonicalPartition(part));
    std::vector<int> part(graph.num_vertices, 0);
    std::function<void(int, int)> visit = [&](int v, int used) {
      if (v == graph.num_vertices) {
        if (used <= max_k && seen.insert(part).second)
          groupings.push_back({part, fmt::format("{} group(s) of nodes", used)});
        return;
      }
      for (int p = 0; p <= used; ++p) {
        part[v] = p;
        visit(v + 1, std::max(used, p + 1));
      }
    };
    visit(0, 0);
  }
  // Each grouping as groups of devices.
  std::vector<std::pair<std::vector<std::vector<int>>, std::string>> device_groupings;
  std::vector<int> split_of_grouping;  // 1: whole nodes; f: nodes split in f; 0: found by the climb below
  std::set<std::vector<std::vector<int>>> seen_groups;
  auto add_grouping = [&](const std::vector<std::vector<int>>& parts, const std::vector<int>& part,
                          const std::string& how, int split = 1) {
    const int k = *std::max_element(part.begin(), part.end()) + 1;
    std::vector<std::vector<int>> groups(k);
    for (size_t v = 0; v < part.size(); ++v)
      for (int d : parts[v]) groups[part[v]].push_back(d);
    std::vector<std::vector<int>> key = groups;
    for (auto& g : key) std::sort(g.begin(), g.end());
    std::sort(key.begin(), key.end());
    if (seen_groups.insert(key).second) {
      device_groupings.push_back({std::move(groups), how});
      split_of_grouping.push_back(split);
    }
  };
  for (const auto& [part, how] : groupings) add_grouping(node_devices, part, how);
  // Nodes split into 2, 4, ... equal parts (a node whose devices do not divide stays whole), and
  // SPLIT's cuts of the parts: as many stages as parts at most, each of at least one layer.
  for (int f = 2; f <= request.split_nodes_up_to; f *= 2) {
    std::vector<std::vector<int>> parts;
    for (const auto& devices : node_devices) {
      const int n = static_cast<int>(devices.size());
      const int pieces = n % f == 0 ? f : 1;
      for (int p = 0; p < pieces; ++p)
        parts.emplace_back(devices.begin() + p * (n / pieces), devices.begin() + (p + 1) * (n / pieces));
    }
    // No node divides, or more parts than layers (a stage holds at least one).
    if (parts.size() == node_devices.size() || parts.size() > static_cast<size_t>(model.num_layers)) break;
    const WeightedGraph split_graph = NodeBandwidthGraph(cluster, parts);
    const int most = std::min<int>({split_graph.num_vertices, static_cast<int>(model.num_layers),
                                    request.max_groups > 0 ? request.max_groups : split_graph.num_vertices});
    const auto split_partitions = SplitMinKCuts(split_graph, most);
    for (int k = graph.num_vertices + 1; k <= most; ++k)
      add_grouping(parts, split_partitions[k - 1],
                   fmt::format("nodes split in {}, cut into {} by SPLIT", f, k), f);
  }
  std::vector<ZorseCandidate> all;
  // Phase 2, for every grouping (on every core; the models are read-only).
  std::vector<std::vector<ZorseCandidate>> per_grouping(device_groupings.size());
  ForEachOnEveryCore(device_groupings.size(), [&](size_t gi) {
    per_grouping[gi] = ZorseCandidatesForGroups(cluster, model, costs, request, device_groupings[gi].first);
  });
  for (size_t gi = 0; gi < device_groupings.size(); ++gi) {
    const std::string& how = device_groupings[gi].second;
    auto& candidates = per_grouping[gi];
    for (auto& c : candidates) {
      c.why = fmt::format("{}: {}", how, c.why);
      c.grouping = static_cast<int>(gi);
    }
    all.insert(all.end(), std::make_move_iterator(candidates.begin()),
               std::make_move_iterator(candidates.end()));
  }
  // On more nodes than every grouping can be tried on, the latency model also climbs from the
  // groupings it likes best to their neighbours: one node of a class moved to another group or to a
  // group of its own (SPLIT keeps fast links inside groups; a mix of kinds of node may balance
  // better, and the model may know it).
  if (graph.num_vertices > request.exhaustive_groupings_up_to_nodes && request.grouping_climb_rounds > 0) {
    auto canonical = [](std::vector<int> part) { return CanonicalPartition(part); };
    // Which nodes of each class a group holds does not matter: a grouping is its class counts.
    auto signature = [&](const std::vector<int>& part) {
      std::map<int, std::map<std::string, int>> counts;
      for (size_t v = 0; v < part.size(); ++v) ++counts[part[v]][node_class[v]];
      std::vector<std::map<std::string, int>> out;
      for (auto& [_, c] : counts) out.push_back(std::move(c));
      std::sort(out.begin(), out.end());
      return out;
    };
    auto best_step = [&](const std::vector<int>& part, std::vector<ZorseCandidate>* candidates) {
      const int k = *std::max_element(part.begin(), part.end()) + 1;
      std::vector<std::vector<int>> groups(k);
      for (size_t v = 0; v < part.size(); ++v)
        for (int d : node_devices[v]) groups[part[v]].push_back(d);
      *candidates = ZorseCandidatesForGroups(cluster, model, costs, request, groups);
      double best = std::numeric_limits<double>::infinity();
      for (const auto& c : *candidates) best = std::min(best, c.model_step_s);
      return best;
    };
    std::set<std::vector<std::map<std::string, int>>> visited;
    for (const auto& [part, _] : groupings) visited.insert(signature(part));
    // The starts: the whole-node groupings whose best candidate the model likes best.
    std::vector<std::pair<double, size_t>> liked_groupings;
    for (size_t gi = 0; gi < groupings.size(); ++gi) {
      double best = std::numeric_limits<double>::infinity();
      for (const auto& c : all)
        if (c.grouping == static_cast<int>(gi)) best = std::min(best, c.model_step_s);
      if (best < std::numeric_limits<double>::infinity()) liked_groupings.push_back({best, gi});
    }
    std::sort(liked_groupings.begin(), liked_groupings.end());
    for (size_t start = 0; start < std::min<size_t>(liked_groupings.size(), 2); ++start) {
      std::vector<int> part = groupings[liked_groupings[start].second].first;
      double current = liked_groupings[start].first;
      for (int round = 0; round < request.grouping_climb_rounds; ++round) {
        const int k = *std::max_element(part.begin(), part.end()) + 1;
        std::vector<int> best_part;
        std::vector<ZorseCandidate> best_candidates;
        double best = current;
        std::set<std::pair<std::string, std::pair<int, int>>> tried;  // (class, (from, to))
        std::vector<std::vector<int>> neighbours;
        for (size_t v = 0; v < part.size(); ++v)
          for (int to = 0; to <= std::min(k, max_k - 1); ++to) {
            if (to == part[v] || !tried.insert({node_class[v], {part[v], to}}).second) continue;
            std::vector<int> next = part;
            next[v] = to;
            next = canonical(next);
            if (!visited.insert(signature(next)).second) continue;
            neighbours.push_back(std::move(next));
          }
        // Judged on every core (each neighbour's candidates dropped: a thousand devices' plans
        // each, they are made again for the one taken); the first of the best, in the order above.
        std::vector<double> steps(neighbours.size());
        ForEachOnEveryCore(neighbours.size(), [&](size_t i) {
          std::vector<ZorseCandidate> candidates;
          steps[i] = best_step(neighbours[i], &candidates);
        });
        for (size_t i = 0; i < neighbours.size(); ++i)
          if (steps[i] < best) {
            best = steps[i];
            best_part = neighbours[i];
          }
        if (!best_part.empty()) best_step(best_part, &best_candidates);
        if (best_part.empty()) break;
        part = std::move(best_part);
        current = best;
        const int gi = static_cast<int>(device_groupings.size());
        add_grouping(node_devices, part, "climbed by the latency model from SPLIT's cuts", /*split=*/0);
        if (static_cast<int>(device_groupings.size()) == gi) break;  // (the same groups as one tried)
        for (auto& c : best_candidates) {
          c.why = fmt::format("{}: {}", device_groupings[gi].second, c.why);
          c.grouping = gi;
          all.push_back(std::move(c));
        }
      }
    }
  }
  if (all.empty())
    return Status::Infeasible(
        fmt::format("zorse planner: no grouping, microbatch size and ministage count fits {} "
                    "on this cluster's memory",
                    model.name));
  std::sort(all.begin(), all.end(),
            [](const ZorseCandidate& a, const ZorseCandidate& b) { return a.model_step_s < b.model_step_s; });
  ZorsePlan out;
  if (request.candidates_to_evaluate == 0) {  // search only: trust the latency model
    out.plan = all.front().plan;
    out.predicted_step_s = all.front().model_step_s;
    out.explain = all.front().why;
    out.considered.push_back(all.front());
    return out;
  }
  // Re-rank the best few with the evaluator; keep the fastest that fits. The best few of each kind
  // of candidate (tensor-parallel width; nodes whole, split, or grouped by the climb — of these,
  // half as many): the latency model misranks kinds against each other, so a wider search must not
  // crowd out the plans a narrower one would judge. Judged in rounds: the first few of every
  // kind, then more only of the kinds whose best so far is near the best of all (a kind the
  // simulator finds far slower is not one the latency model's next choices will rescue).
  double best = std::numeric_limits<double>::infinity();
  size_t at = 0;  // the best candidate judged so far
  const size_t per_kind = static_cast<size_t>(std::max(1, request.candidates_to_evaluate));
  struct Kind {
    std::vector<size_t> queue;  // its candidates, best by the model first, up to its share
    size_t taken = 0;
    double best = std::numeric_limits<double>::infinity();
  };
  std::map<std::pair<int, int>, Kind> kinds;  // (tp, split)
  auto kind_of = [&](size_t i) {
    return std::make_pair(all[i].tp_degree, split_of_grouping[all[i].grouping]);
  };
  // A tensor-parallel candidate is judged only where its teams pay in the latency model: where the
  // same plan without them (grouping, microbatch, ministages) fits and steps no slower, the teams
  // only add all-reduces to groups that are not the bottleneck. (On Zorse's cluster C teams fit only
  // its two NVLink nodes: dozens of such candidates judged for nothing tripled HexiScale's time.)
  std::map<std::tuple<int, int64_t, int>, double> without_teams;  // (grouping, microbatch, ministages)
  for (const ZorseCandidate& c : all)
    if (c.tp_degree == 1) without_teams[{c.grouping, c.microbatch, c.ministages}] = c.model_step_s;
  for (size_t i = 0; i < all.size(); ++i) {
    if (all[i].tp_degree > 1) {
      auto twin = without_teams.find({all[i].grouping, all[i].microbatch, all[i].ministages});
      if (twin != without_teams.end() && twin->second <= all[i].model_step_s) continue;
    }
    Kind& k = kinds[kind_of(i)];
    if (k.queue.size() < (kind_of(i).second == 0 ? per_kind / 2 + 1 : per_kind)) k.queue.push_back(i);
  }
  std::vector<size_t> chosen;  // every candidate judged, in the order judged
  std::vector<std::pair<double, size_t>> evaluated;
  // With a plan from elsewhere (request.bound), candidates are simulated only until they are
  // beyond the slack of it, and a kind is near the best when near the better of the two: a kind
  // whose plans all stopped is not (a strategy that cannot win judges only its first few).
  const EvaluateBound stop{request.bound.stop_after_s * (1 + request.kind_slack)};
  const auto first = static_cast<size_t>(std::max(1, request.first_judged_per_kind));
  const auto more = static_cast<size_t>(std::max(1, request.more_judged_per_kind));
  for (size_t batch = first;; batch = more) {
    std::vector<size_t> next;
    for (auto& [_, k] : kinds) {
      const double near = std::min(best, request.bound.stop_after_s);
      const bool promising =
          k.taken == 0 || !std::isfinite(near) || k.best <= near * (1 + request.kind_slack);
      if (!promising) continue;
      for (size_t n = 0; n < batch && k.taken < k.queue.size(); ++n) next.push_back(k.queue[k.taken++]);
    }
    if (next.empty()) break;
    std::vector<Plan> plans;
    for (size_t i : next) plans.push_back(all[i].plan);
    // Beyond the slack of the best so far (here or elsewhere) a candidate can neither win nor keep
    // its kind near the best: its simulation stops there.
    const EvaluateBound stop_now{std::min(request.bound.stop_after_s, best) * (1 + request.kind_slack)};
    const std::vector<Result<PlanEvaluation>> evaluations = EvaluateAll(plans, evaluate, stop_now);
    for (size_t k = 0; k < next.size(); ++k) {
      const size_t i = next[k];
      chosen.push_back(i);
      if (!evaluations[k].ok()) return evaluations[k].status();
      const PlanEvaluation& e = *evaluations[k];
      if (!e.fits_memory) continue;
      evaluated.push_back({e.step_time_s, i});
      Kind& kind = kinds[kind_of(i)];
      kind.best = std::min(kind.best, e.step_time_s);
      if (e.step_time_s < best || (e.step_time_s == best && i < at)) {
        best = e.step_time_s;
        at = i;
        out.plan = all[i].plan;
        out.predicted_step_s = e.step_time_s;
        out.explain = all[i].why;
      }
    }
  }
  const size_t n = chosen.size();
  if (evaluated.empty())
    return Status::Infeasible(fmt::format(
        "zorse planner: the {} best candidates by the memory model all ran out of memory in the simulator",
        n));
  // Climb: the latency model misranks neighbours of the best plan it found (another ministage
  // count, microbatch size or grouping), so the evaluator judges those too.
  std::map<std::tuple<int, int, int64_t, int>, size_t> index;  // (grouping, tp, microbatch, ministages)
  std::map<int, std::vector<int64_t>> sizes;                   // per grouping, its microbatch sizes
  std::vector<int> liked;                                      // groupings by their best model step
  for (size_t i = 0; i < all.size(); ++i) {
    const ZorseCandidate& c = all[i];
    index.emplace(std::make_tuple(c.grouping, c.tp_degree, c.microbatch, c.ministages), i);
    sizes[c.grouping].push_back(c.microbatch);
    if (std::find(liked.begin(), liked.end(), c.grouping) == liked.end()) liked.push_back(c.grouping);
  }
  for (auto& [_, v] : sizes) {
    std::sort(v.begin(), v.end());
    v.erase(std::unique(v.begin(), v.end()), v.end());
  }
  std::set<size_t> judged(chosen.begin(), chosen.end());
  for (int round = 0; round < request.climb_rounds; ++round) {
    const ZorseCandidate& c = all[at];
    std::vector<size_t> next;
    auto consider = [&](int g, int64_t b, int s) {
      auto it = index.find({g, c.tp_degree, b, s});
      if (it != index.end() && judged.insert(it->second).second) next.push_back(it->second);
    };
    for (int s : {c.ministages * 2, c.ministages / 2, c.ministages + 1, c.ministages - 1})
      consider(c.grouping, c.microbatch, s);
    const auto& b = sizes[c.grouping];
    const auto pos = std::lower_bound(b.begin(), b.end(), c.microbatch) - b.begin();
    if (pos > 0) consider(c.grouping, b[pos - 1], c.ministages);
    if (pos + 1 < static_cast<std::ptrdiff_t>(b.size())) consider(c.grouping, b[pos + 1], c.ministages);
    for (size_t k = 0, other = 0; k < liked.size() && other < 3; ++k)
      if (liked[k] != c.grouping) {
        consider(liked[k], c.microbatch, c.ministages);
        ++other;
      }
    if (next.empty()) break;
    std::vector<Plan> more;
    for (size_t i : next) more.push_back(all[i].plan);
    // Only a faster plan moves the climb: a slower one's simulation stops at the best.
    const std::vector<Result<PlanEvaluation>> answers =
        EvaluateAll(more, evaluate, EvaluateBound{std::min(stop.stop_after_s, best)});
    const size_t was = at;
    for (size_t k = 0; k < next.size(); ++k) {
      if (!answers[k].ok()) return answers[k].status();
      if (!answers[k]->fits_memory) continue;
      evaluated.push_back({answers[k]->step_time_s, next[k]});
      if (answers[k]->step_time_s < best) {
        best = answers[k]->step_time_s;
        at = next[k];
        out.plan = all[at].plan;
        out.predicted_step_s = best;
        out.explain = all[at].why + "; found by climbing from the latency model's choices";
      }
    }
    if (at == was) break;
  }
  std::sort(evaluated.begin(), evaluated.end());
  for (const auto& [t, i] : evaluated) out.considered.push_back(all[i]);
  return out;
}

}  // namespace motley
