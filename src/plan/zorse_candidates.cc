// Zorse phase 2 (zorse.txt §4.3.3-§4.3.4): for one grouping of devices, every candidate — each
// tensor-parallel option, microbatch size and ministage count — scored by the latency model (Eq. 1)
// and kept if the memory model (Eq. 2, plan/memory_model.h) fits it on every device.
#include <algorithm>
#include <cmath>
#include <cstdint>
#include <limits>
#include <map>
#include <numeric>
#include <optional>
#include <utility>

#include <fmt/format.h>

#include "core/units.h"
#include "cost/state_bytes.h"
#include "plan/memory_model.h"
#include "plan/zorse_planner.h"
#include "plan/zorse_search.h"

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

// ", tensor parallel in runs of 4" (every group), ", tensor parallel per group: 4, 4, 1" or "".
std::string TensorParallelNote(const std::vector<int>& tp_of) {
  if (std::all_of(tp_of.begin(), tp_of.end(), [](int t) { return t == 1; })) return "";
  if (std::all_of(tp_of.begin(), tp_of.end(), [&](int t) { return t == tp_of[0]; }))
    return fmt::format(", tensor parallel in runs of {}", tp_of[0]);
  return fmt::format(", tensor parallel per group: {}", fmt::join(tp_of, ", "));
}

// What one grouping's candidates share: the cluster, the models, the request and the groups.
struct GroupingContext {
  const Cluster& cluster;
  const ModelSpec& model;
  const PlannerCosts& costs;
  const ZorseRequest& request;
  std::vector<std::vector<int>> groups;  // in pipeline order
  std::vector<int> layers;               // per group, by its speed
  int num_groups() const { return static_cast<int>(groups.size()); }
};

// Layers per second at a microbatch of one, summed over the group's devices.
double GroupSpeed(const GroupingContext& g, const std::vector<int>& devices) {
  double s = 0;
  for (int d : devices)
    s += 1.0 / ((g.costs.LayerForwardS(d, 1) + g.costs.LayerBackwardS(d, 1)) * g.costs.Slowdown(d));
  return s;
}

// Orders the groups by descending intra-group bandwidth (§4.3.3), faster first on ties, and gives
// each its layers in proportion to its speed.
void OrderGroupsAndSplitLayers(GroupingContext& g) {
  if (!g.request.keep_group_order)
    std::stable_sort(g.groups.begin(), g.groups.end(), [&](const auto& a, const auto& b) {
      const double ba = RingBandwidth(g.cluster, a), bb = RingBandwidth(g.cluster, b);
      if (ba != bb) return ba > bb;
      return GroupSpeed(g, a) > GroupSpeed(g, b);
    });
  std::vector<double> speeds;
  for (const auto& devices : g.groups) speeds.push_back(GroupSpeed(g, devices));
  const std::vector<int64_t> layers = Proportional(static_cast<int64_t>(g.model.num_layers), speeds, 1);
  g.layers.assign(layers.begin(), layers.end());
}

// Whether every run of `tp` consecutive devices of the group shares a node with NVLink or NVSwitch
// and the model's heads and feed-forward split `tp` ways.
bool GroupCanSplit(const GroupingContext& g, const std::vector<int>& devices, int tp) {
  const ModelSpec& m = g.model;
  if (m.num_heads % tp != 0 || m.num_kv_heads % tp != 0 || m.ffn_size % tp != 0) return false;
  if (devices.size() % tp != 0) return false;
  for (size_t i = 0; i < devices.size(); i += tp) {
    if (g.cluster.node_of(devices[i]).interconnect == Interconnect::kPcie) return false;
    for (int j = 1; j < tp; ++j)
      if (g.cluster.devices[devices[i + j]].node != g.cluster.devices[devices[i]].node) return false;
  }
  return true;
}

// Tensor parallelism of width 2, 4 or 8 inside a group where every run of that many consecutive
// devices shares a node with NVLink or NVSwitch (the layers, the embedding and the head split:
// runtime/model/tensor_parallel.h). A width w gives each group the widest such degree up to w — a
// group of NVLink nodes splits its layers, one on PCIe nodes does not — unless
// `uniform_tensor_parallel` (a symmetric mesh: w in every group, or not at all). Each option:
// (width, per-group degree); the first is no tensor parallelism.
std::vector<std::pair<int, std::vector<int>>> TensorParallelOptions(const GroupingContext& g) {
  const int n = g.num_groups();
  std::vector<std::pair<int, std::vector<int>>> options = {{1, std::vector<int>(n, 1)}};
  for (int w = 2; g.request.try_tensor_parallel && w <= g.request.max_tensor_parallel; w *= 2) {
    std::vector<int> per_group(n, 1);
    bool all = true;
    for (int k = 0; k < n; ++k) {
      for (int tp = w; tp > 1; tp /= 2)
        if (GroupCanSplit(g, g.groups[k], tp)) {
          per_group[k] = tp;
          break;
        }
      all = all && per_group[k] == w;
    }
    if (g.request.uniform_tensor_parallel && !all) continue;
    // Teams in a minority of the devices leave the pipeline's bottleneck where it was (on Zorse's
    // cluster C, its two NVLink nodes of sixteen: eight more kinds of candidate, none better).
    size_t in_teams = 0, devices = 0;
    for (int k = 0; k < n; ++k) {
      devices += g.groups[k].size();
      if (per_group[k] > 1) in_teams += g.groups[k].size();
    }
    if (2 * in_teams < devices) continue;
    if (per_group != options.back().second) options.push_back({w, per_group});
  }
  return options;
}

// At one microbatch size: per group and device, one layer's forward and backward time and the
// device's share of the microbatches (by its speed, or even where the request says so).
struct MicrobatchShares {
  std::vector<std::vector<int64_t>> counts;
  std::vector<std::vector<double>> fwd, bwd;  // per device, one layer, one microbatch
};

std::optional<MicrobatchShares> ShareMicrobatches(const GroupingContext& g, const std::vector<int>& tp_of,
                                                  int64_t b, int64_t num_mb) {
  MicrobatchShares out;
  out.fwd.resize(g.num_groups());
  out.bwd.resize(g.num_groups());
  for (int k = 0; k < g.num_groups(); ++k) {
    std::vector<double> rates;  // per tensor-parallel run (its leader)
    for (size_t i = 0; i < g.groups[k].size(); ++i) {
      const int d = g.groups[k][i];
      out.fwd[k].push_back(g.costs.LayerForwardS(d, static_cast<double>(b)) * g.costs.Slowdown(d) / tp_of[k]);
      out.bwd[k].push_back(g.costs.LayerBackwardS(d, static_cast<double>(b)) * g.costs.Slowdown(d) /
                           tp_of[k]);
      if (i % tp_of[k] == 0) rates.push_back(1.0 / (out.fwd[k].back() + out.bwd[k].back()));
    }
    std::vector<int64_t> per_run = Proportional(num_mb, rates, 0), per_device;
    if (g.request.even_microbatches) {
      if (num_mb % static_cast<int64_t>(rates.size()) != 0) return std::nullopt;  // cannot split evenly
      per_run.assign(rates.size(), num_mb / static_cast<int64_t>(rates.size()));
    }
    for (size_t i = 0; i < g.groups[k].size(); ++i) per_device.push_back(per_run[i / tp_of[k]]);
    out.counts.push_back(per_device);
  }
  return out;
}

Plan CandidatePlan(const GroupingContext& g, const std::vector<int>& tp_of,
                   const std::vector<std::vector<LayerRange>>& ranges, int64_t b,
                   const MicrobatchShares& shares) {
  Plan p;
  p.strategy = "zorse";
  p.seq_len = g.request.seq_len;
  p.precision = g.request.precision;
  p.schedule = g.request.schedule;
  p.zero_stage = 2;
  p.activation_checkpointing = g.request.activation_checkpointing;
  p.offload_params = g.request.offload;
  p.offload_activations = g.request.offload;
  for (int k = 0; k < g.num_groups(); ++k) {
    GroupPlan gp;
    gp.ministages = ranges[k];
    gp.tp_degree = tp_of[k];
    for (size_t i = 0; i < g.groups[k].size(); ++i)
      gp.devices.push_back({g.groups[k][i], b, shares.counts[k][i], 0});
    p.groups.push_back(gp);
  }
  // The cross-stage routing is left to the evaluator (routing_costs.h): only the few candidates
  // re-ranked need it, and it costs O(microbatches x devices).
  return p;
}

// The latency model (Eq. 1): (L_fwd + L_bwd) x N_ministages + L_startup.
double LatencyModelStepS(const GroupingContext& g, const std::vector<int>& tp_of,
                         const std::vector<std::vector<LayerRange>>& ranges, int64_t b, int s,
                         const MicrobatchShares& shares) {
  const StateBytesPerParam state = StateBytes(g.request.precision);
  const double act_per_seq =
      static_cast<double>(g.request.seq_len) * g.model.hidden_size * BytesPerElement(g.request.precision);
  double l_fwd = 0, l_bwd = 0, startup = 0;
  for (int k = 0; k < g.num_groups(); ++k) {
    const auto& devices = g.groups[k];
    double visit_f = 0, visit_b = 0;
    for (size_t i = 0; i < devices.size(); ++i) {
      visit_f = std::max(visit_f, shares.counts[k][i] * shares.fwd[k][i]);
      visit_b = std::max(visit_b, shares.counts[k][i] * shares.bwd[k][i]);
    }
    const double ms_layers = static_cast<double>(g.layers[k]) / s;
    const double ms_params = MinistageParams(g.model, ranges[k][0]) / tp_of[k];
    if (tp_of[k] > 1) {  // two all-reduces per layer and pass, per microbatch, not overlapped
      double most = 0;
      for (int64_t c : shares.counts[k]) most = std::max(most, static_cast<double>(c));
      const std::vector<int> run(devices.begin(), devices.begin() + tp_of[k]);
      const double ar = most * 2 * ms_layers * g.costs.CollectiveS(OpKind::kAllReduce, run, act_per_seq * b);
      visit_f += ar / ms_layers;
      visit_b += ar / ms_layers;
    }
    const double gather = g.costs.CollectiveS(OpKind::kAllGather, devices, ms_params * state.params);
    const double reduce = g.costs.CollectiveS(OpKind::kReduceScatter, devices, ms_params * state.grads);
    l_fwd = std::max(l_fwd, std::max(visit_f * ms_layers, gather));
    l_bwd = std::max(l_bwd, std::max(visit_b * ms_layers, gather + reduce));
    // Filling the pipeline: one microbatch through the group's first ministage, and the first
    // gather, which nothing hides.
    double one_mb = 0;
    for (double f : shares.fwd[k]) one_mb = std::max(one_mb, f * ms_layers);
    startup += one_mb;
    if (k == 0) startup += gather;
    if (k + 1 < g.num_groups())
      startup += g.costs.TransferS(devices.back(), g.groups[k + 1].front(), act_per_seq * b);
  }
  return (l_fwd + l_bwd) * s + startup;
}

// The memory model's verdict on a candidate: whether every device fits, the worst device's bytes,
// and where a measured limit disagrees with the model, a note saying so.
struct MemoryVerdict {
  bool fits = true;
  double worst_bytes = 0;
  std::string measured_note;
};

MemoryVerdict JudgeMemory(const GroupingContext& g, const std::vector<int>& tp_of,
                          const std::vector<std::vector<LayerRange>>& ranges, int64_t b, int s,
                          const MicrobatchShares& shares) {
  MemoryVerdict v;
  const ZorseRequest& request = g.request;
  for (int k = 0; k < g.num_groups() && v.fits; ++k) {
    PipelineMemoryInput in;
    in.model = &g.model;
    in.precision = request.precision;
    in.seq_len = request.seq_len;
    in.ministages = ranges[k];
    in.tp_degree = tp_of[k];
    in.dp_degree = static_cast<int>(g.groups[k].size()) / tp_of[k];
    for (const auto& r : ranges[k]) in.holds_head = in.holds_head || r.end == g.model.num_layers;
    in.offload = request.offload;
    in.gradient_clipping = request.gradient_clipping;
    in.one_f_one_b = request.schedule == PipelineSchedule::k1F1B;
    in.stages_from_here = g.num_groups() - k;
    std::map<int64_t, double> bytes_of_count;  // the devices' peaks differ only by their microbatches
    for (size_t i = 0; i < g.groups[k].size(); ++i) {
      const int device = g.groups[k][i];
      auto [at, first] = bytes_of_count.try_emplace(shares.counts[k][i], 0.0);
      if (first) at->second = PipelineDevicePeakBytes(in, b, shares.counts[k][i]);
      const double bytes = at->second;
      v.worst_bytes = std::max(v.worst_bytes, bytes);
      const bool modelled_fits = bytes <= g.cluster.usable_memory_bytes(device);
      // One group of every device, one ministage per layer, ZeRO-2 in place: the very step the
      // profiler's memory probe ran (profile/memory_probe.h). Its measured limit decides there;
      // the memory model elsewhere, and the difference is said.
      const int devices_used =
          request.devices.empty() ? g.cluster.num_devices() : static_cast<int>(request.devices.size());
      const std::optional<int64_t> measured =
          g.num_groups() == 1 && tp_of[k] == 1 && !request.offload && s == g.model.num_layers &&
                  static_cast<int>(g.groups[k].size()) == devices_used
              ? g.costs.MeasuredMaxMicrobatch(device, 2, static_cast<int>(g.groups[k].size()))
              : std::nullopt;
      if (measured) {
        if ((b <= *measured) != modelled_fits && v.measured_note.empty())
          v.measured_note = fmt::format(
              "; device {} fits at most {} sequences a microbatch (measured), where the memory model says {}",
              device, *measured, modelled_fits ? "it fits" : "it does not");
        if (b > *measured) v.fits = false;
      } else if (!modelled_fits) {
        v.fits = false;
      }
    }
  }
  return v;
}

// Phase 2 for one grouping: every candidate that fits, into `out`; or, with `best_step_s`, only the
// least model step among them (no plan made).
void CandidatesForGroups(const Cluster& cluster, const ModelSpec& model, const PlannerCosts& costs,
                         const ZorseRequest& request, std::vector<std::vector<int>> groups,
                         std::vector<ZorseCandidate>* out, double* best_step_s) {
  const int num_groups = static_cast<int>(groups.size());
  if (num_groups == 0 || num_groups > model.num_layers) return;
  GroupingContext g{cluster, model, costs, request, std::move(groups), {}};
  OrderGroupsAndSplitLayers(g);
  int max_ministages = *std::min_element(g.layers.begin(), g.layers.end());
  if (request.max_ministages > 0) max_ministages = std::min(max_ministages, request.max_ministages);
  for (const auto& [width, tp_of] : TensorParallelOptions(g)) {
    // A tied model sums its embedding's and head's gradients between ranks holding the same
    // vocabulary rows: the first group (the embedding's) and the last (the head's) split it alike.
    if (model.tie_embeddings && tp_of.front() != tp_of.back()) continue;
    for (int64_t b = 1; b <= std::min<int64_t>(request.max_microbatch, request.global_batch_sequences); ++b) {
      if (request.global_batch_sequences % b != 0) continue;
      const int64_t num_mb = request.global_batch_sequences / b;
      if (num_mb > kMaxMicrobatchesPerDevice) continue;  // more than any device runs in a step (plan.h)
      const std::optional<MicrobatchShares> shares = ShareMicrobatches(g, tp_of, b, num_mb);
      if (!shares) continue;
      for (int s = 1; s <= max_ministages; ++s) {
        const auto ranges = InterleavedMinistages(g.layers, std::vector<int>(num_groups, s));
        const MemoryVerdict memory = JudgeMemory(g, tp_of, ranges, b, s, *shares);
        if (!memory.fits) continue;
        const double step = LatencyModelStepS(g, tp_of, ranges, b, s, *shares);
        if (best_step_s != nullptr) {
          *best_step_s = std::min(*best_step_s, step);
          continue;
        }
        ZorseCandidate c;
        c.plan = CandidatePlan(g, tp_of, ranges, b, *shares);
        c.model_step_s = step;
        c.model_peak_bytes = memory.worst_bytes;
        c.tp_degree = width;
        c.microbatch = b;
        c.ministages = s;
        std::vector<std::string> sizes;
        for (int k = 0; k < num_groups; ++k)
          sizes.push_back(fmt::format("{}x{} layers", g.groups[k].size(), g.layers[k]));
        c.why = fmt::format(
                    "{} group(s) [{}], microbatch {} ({} microbatches), {} ministage(s) per group{}; "
                    "model: {} step, {} worst device",
                    num_groups, fmt::join(sizes, ", "), b, num_mb, s, TensorParallelNote(tp_of),
                    FormatDuration(step), FormatBytes(memory.worst_bytes)) +
                memory.measured_note;
        out->push_back(std::move(c));
      }
    }
  }
}

}  // namespace

std::vector<ZorseCandidate> ZorseCandidatesForGroups(const Cluster& cluster, const ModelSpec& model,
                                                     const PlannerCosts& costs, const ZorseRequest& request,
                                                     std::vector<std::vector<int>> groups) {
  std::vector<ZorseCandidate> out;
  CandidatesForGroups(cluster, model, costs, request, std::move(groups), &out, nullptr);
  return out;
}

double BestModelStepForGroups(const Cluster& cluster, const ModelSpec& model, const PlannerCosts& costs,
                              const ZorseRequest& request, std::vector<std::vector<int>> groups) {
  double best_s = std::numeric_limits<double>::infinity();
  CandidatesForGroups(cluster, model, costs, request, std::move(groups), nullptr, &best_s);
  return best_s;
}

}  // namespace motley
