#include "plan/cephalo_planner.h"

#include <algorithm>
#include <cmath>
#include <functional>
#include <numeric>
#include <optional>
#include <utility>

#include <fmt/format.h>

#include "core/units.h"
#include "plan/memory_model.h"
#include "plan/poplar_allocator.h"
#include "plan/poplar_planner.h"

namespace motley {

std::vector<double> FillStateShares(const std::vector<double>& room_shares) {
  const size_t n = room_shares.size();
  if (n == 0 || std::accumulate(room_shares.begin(), room_shares.end(), 0.0) < 1) return {};
  // The level L with sum(min(room_i, L)) = 1: rooms ascending, each either below L (full) or not.
  std::vector<double> sorted = room_shares;
  std::sort(sorted.begin(), sorted.end());
  double left = 1, level = 0;
  for (size_t k = 0; k < n; ++k) {
    level = left / static_cast<double>(n - k);
    if (level <= sorted[k]) break;
    left -= sorted[k];
  }
  std::vector<double> out;
  for (double room : room_shares) out.push_back(std::min(room, level));
  return out;
}

namespace {

// Shares in millionths summing to exactly a million, as the plan file writes them (largest
// remainders round up; no share below one millionth).
std::vector<double> InMillionths(const std::vector<double>& shares) {
  constexpr int64_t kUnits = 1'000'000;
  std::vector<int64_t> units;
  std::vector<std::pair<double, size_t>> remainders;
  int64_t given = 0;
  for (size_t i = 0; i < shares.size(); ++i) {
    const double exact = shares[i] * kUnits;
    units.push_back(std::max<int64_t>(1, static_cast<int64_t>(std::floor(exact))));
    given += units.back();
    remainders.push_back({exact - std::floor(exact), i});
  }
  std::sort(remainders.begin(), remainders.end(), std::greater<>());
  for (size_t k = 0; given < kUnits; k = (k + 1) % remainders.size(), ++given) ++units[remainders[k].second];
  std::vector<double> out;
  for (int64_t u : units) out.push_back(static_cast<double>(u) / kUnits);
  return out;
}

// One device's memory as a function of its microbatch and its share of the state (linear in the
// share: the shard, its gradient and moments, and the buffers sized by it).
struct DeviceMemory {
  DataParallelMemoryInput in;
  double capacity = 0;
  double Without(int64_t microbatch) const {  // holding no state
    DataParallelMemoryInput x = in;
    x.state_share = 0;
    return DataParallelPeakBytes(x, microbatch);
  }
  double PerShare(int64_t microbatch) const {  // the bytes the whole state adds
    DataParallelMemoryInput x = in;
    x.state_share = 1;
    return DataParallelPeakBytes(x, microbatch) - Without(microbatch);
  }
  // The share of the state that fits beside a microbatch (a device with none still gathers).
  double Room(int64_t microbatch) const {
    const int64_t b = std::max<int64_t>(1, microbatch);
    return std::max(0.0, (capacity - Without(b)) / PerShare(b));
  }
  // The largest microbatch that fits beside `share` of the state (0 if none).
  int64_t LargestMicrobatch(int64_t limit, double share = 0) const {
    auto fits = [&](int64_t b) { return Without(b) + share * PerShare(b) <= capacity; };
    if (!fits(1)) return 0;
    int64_t lo = 1, hi = limit;
    while (lo < hi) {
      const int64_t mid = lo + (hi - lo + 1) / 2;
      if (fits(mid))
        lo = mid;
      else
        hi = mid - 1;
    }
    return lo;
  }
};

}  // namespace

Result<std::vector<CephaloPlan>> PlanCephalo(const Cluster& cluster, const ModelSpec& model,
                                             const PlannerCosts& costs, const CephaloRequest& request) {
  std::vector<int> devices = request.devices;
  if (devices.empty())
    for (int d = 0; d < cluster.num_devices(); ++d) devices.push_back(d);
  const int n = static_cast<int>(devices.size());
  const DataParallelMemoryInput layout = PerLayerDataParallel(
      model, request.precision, 3, n, request.seq_len, request.activation_checkpointing, cluster.emulated());
  std::vector<DeviceMemory> memory;
  std::vector<int64_t> caps, even_caps;
  for (int d : devices) {
    memory.push_back({layout, cluster.usable_memory_bytes(d)});
    caps.push_back(memory.back().LargestMicrobatch(request.max_microbatch));
    even_caps.push_back(memory.back().LargestMicrobatch(request.max_microbatch, 1.0 / n));
    if (caps.back() == 0)
      return Status::OutOfMemory(fmt::format(
          "cephalo: device {} ({}, {}) cannot hold a microbatch of 1 sequence of {} tokens of {} even with "
          "none of "
          "the training state ({} needed); shorten the sequences or use a pipeline (strategy zorse)",
          d, cluster.spec(d).name, FormatBytes(cluster.usable_memory_bytes(d)) + " usable", request.seq_len,
          model.name, FormatBytes(memory.back().Without(1))));
  }
  const double sync_s = DataParallelSyncS(costs, devices, model, request.precision, 3);
  const double state_bytes = memory.front().PerShare(1);

  // The plan for microbatch caps, if its state fits beside the batches; `rooms` the shares that fit.
  std::vector<double> rooms;
  auto propose = [&](const std::vector<int64_t>& limits, const std::string& how,
                     PoplarAllocation* allocation) -> Result<std::optional<CephaloPlan>> {
    std::vector<PoplarDeviceCurve> curves;
    for (int i = 0; i < n; ++i) curves.push_back(SpeedCurve(costs, model, devices[i], limits[i]));
    MOTLEY_ASSIGN_OR_RETURN(*allocation, PoplarAllocate(curves, 3, request.global_batch_sequences, sync_s));
    rooms.clear();
    for (int i = 0; i < n; ++i) rooms.push_back(memory[i].Room(allocation->devices[i].microbatch_size));
    const std::vector<double> shares = FillStateShares(rooms);
    if (shares.empty()) return std::optional<CephaloPlan>();
    CephaloPlan out;
    Plan& p = out.plan;
    p.strategy = "cephalo";
    p.seq_len = request.seq_len;
    p.precision = request.precision;
    p.schedule = PipelineSchedule::kGPipe;
    p.zero_stage = 3;
    p.activation_checkpointing = request.activation_checkpointing;
    GroupPlan g;
    const int layers = static_cast<int>(model.num_layers);
    g.ministages = SplitLayers(0, layers, layers);
    g.devices = allocation->devices;
    // Even shares are left out of the plan (even, padded shards).
    const bool even =
        std::all_of(shares.begin(), shares.end(), [&](double s) { return std::abs(s - 1.0 / n) < 1e-9; });
    if (!even) g.state_shares = InMillionths(shares);
    p.groups = {g};
    const auto [lo, hi] = std::minmax_element(shares.begin(), shares.end());
    out.explain =
        fmt::format("ZeRO-3; batches by speed{} ({}); state by memory: {}", how, allocation->explain,
                    even ? "even shards (every device has room for its even share)"
                         : fmt::format("shares {:.2f}%..{:.2f}% of {} (even: {:.2f}%)", 100 * *lo, 100 * *hi,
                                       FormatBytes(state_bytes), 100.0 / n));
    return std::optional<CephaloPlan>(std::move(out));
  };

  std::vector<CephaloPlan> out;
  PoplarAllocation allocation;
  // Microbatches capped so that even shards fit (Poplar's ZeRO-3), where every device can.
  if (std::all_of(even_caps.begin(), even_caps.end(), [](int64_t c) { return c > 0; })) {
    MOTLEY_ASSIGN_OR_RETURN(std::optional<CephaloPlan> p,
                            propose(even_caps, ", capped for even shards", &allocation));
    if (p) out.push_back(std::move(*p));
  }
  // Microbatches capped by the activations alone, the state placed where room is left; while it
  // does not fit, or fits only unevenly, the largest microbatches shrink by a quarter: each
  // candidate trades a faster compute split against the uneven gathers' time.
  constexpr int kUnevenCandidates = 4;
  int uneven = 0;
  for (int round = 0; round < 64 && uneven < kUnevenCandidates; ++round) {
    const std::string how = round == 0 ? "" : fmt::format(", microbatches shrunk {} time(s)", round);
    MOTLEY_ASSIGN_OR_RETURN(std::optional<CephaloPlan> p, propose(caps, how, &allocation));
    if (p) {
      const bool even = p->plan.groups[0].state_shares.empty();
      if (std::none_of(out.begin(), out.end(), [&](const CephaloPlan& q) { return q.plan == p->plan; }))
        out.push_back(std::move(*p));
      if (even) break;  // shrinking further only slows the compute
      ++uneven;
    }
    bool shrunk = false;
    for (int i = 0; i < n; ++i) {
      const int64_t b = allocation.devices[i].microbatch_size;
      if (b > 1 && allocation.devices[i].num_microbatches > 0) {
        caps[i] = std::min(caps[i], b - std::max<int64_t>(1, b / 4));
        shrunk = true;
      }
    }
    if (!shrunk) break;
  }
  if (out.empty()) {
    const double room = std::accumulate(rooms.begin(), rooms.end(), 0.0);
    return Status::OutOfMemory(fmt::format(
        "cephalo: the training state of {} ({}) does not fit in the memory {} devices have left beside "
        "microbatches of 1 sequence of {} tokens ({} in all); add devices or use a pipeline with offload "
        "(strategy zorse)",
        model.name, FormatBytes(state_bytes), n, request.seq_len, FormatBytes(room * state_bytes)));
  }
  return out;
}

}  // namespace motley
