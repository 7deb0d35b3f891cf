#include "plan/poplar_allocator.h"

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <limits>
#include <memory>
#include <set>

#include <fmt/format.h>

#include "plan/monotone_spline.h"

namespace motley {
namespace {

// A device's speed (sequences per second) as a spline through its measured points, and the time
// of a microbatch derived from it.
// Devices measured alike (the same sizes, times and largest microbatch: a node's devices, a type's)
// share one: its time of every microbatch size, evaluated once.
struct CurveKind {
  MonotoneSpline speed;
  std::vector<double> time_s;           // [b]: a microbatch of b sequences (time_s[0] = 0)
  std::vector<double> sorted_time_s;    // the times ascending ...
  std::vector<int64_t> largest_within;  // ... and the largest microbatch taking at most each

  // The largest microbatch done within t (find(g_i, t) in Poplar's Algorithm 2); 0 when none is.
  int64_t Within(double t) const {
    const auto it = std::upper_bound(sorted_time_s.begin(), sorted_time_s.end(), t * (1 + 1e-12));
    return it == sorted_time_s.begin() ? 0
                                       : largest_within[static_cast<size_t>(it - sorted_time_s.begin() - 1)];
  }
};

// A device's speed (sequences per second) as a spline through its measured points, and the time
// of a microbatch derived from it.
struct Curve {
  int device;
  int64_t max_microbatch;
  const CurveKind* kind;
  double Speed(int64_t b) const { return kind->speed(static_cast<double>(b)); }
  double TimeS(int64_t b) const {
    if (b <= 0) return 0;
    if (b < static_cast<int64_t>(kind->time_s.size())) return kind->time_s[static_cast<size_t>(b)];
    return b / Speed(b);
  }
};

std::vector<Curve> MakeCurves(const std::vector<PoplarDeviceCurve>& in,
                              std::vector<std::unique_ptr<CurveKind>>* kinds) {
  std::vector<Curve> out;
  std::vector<const PoplarDeviceCurve*> first_of_kind;
  for (const auto& c : in) {
    size_t k = 0;
    while (k < first_of_kind.size() &&
           !(first_of_kind[k]->sizes == c.sizes && first_of_kind[k]->times_s == c.times_s &&
             first_of_kind[k]->max_microbatch == c.max_microbatch))
      ++k;
    if (k == first_of_kind.size()) {
      first_of_kind.push_back(&c);
      std::vector<double> speeds;
      for (size_t i = 0; i < c.sizes.size(); ++i) speeds.push_back(c.sizes[i] / c.times_s[i]);
      auto kind = std::make_unique<CurveKind>(CurveKind{MonotoneSpline(c.sizes, speeds), {0.0}, {}, {}});
      std::vector<std::pair<double, int64_t>> by_time;
      for (int64_t b = 1; b <= c.max_microbatch; ++b) {
        kind->time_s.push_back(b / kind->speed(static_cast<double>(b)));
        by_time.push_back({kind->time_s.back(), b});
      }
      std::sort(by_time.begin(), by_time.end());
      int64_t largest = 0;
      for (const auto& [t, b] : by_time) {
        largest = std::max(largest, b);
        kind->sorted_time_s.push_back(t);
        kind->largest_within.push_back(largest);
      }
      kinds->push_back(std::move(kind));
    }
    out.push_back({c.device, c.max_microbatch, (*kinds)[k].get()});
  }
  return out;
}

DevicePlan Split(int device, int64_t sequences, int64_t microbatch) {
  DevicePlan d{device, std::max<int64_t>(1, microbatch), 0, 0};
  if (sequences == 0) return d;
  d.microbatch_size = std::min(microbatch, sequences);
  d.num_microbatches = (sequences + d.microbatch_size - 1) / d.microbatch_size;
  const int64_t last = sequences - (d.num_microbatches - 1) * d.microbatch_size;
  d.last_microbatch_size = last == d.microbatch_size ? 0 : last;
  return d;
}

double DeviceTimeS(const Curve& c, const DevicePlan& d) {
  double t = 0;
  for (int64_t k = 0; k < d.num_microbatches; ++k) t += c.TimeS(d.microbatch_size_at(k));
  return t;
}

PoplarAllocation Zero01(const std::vector<Curve>& curves, int64_t gbs, double sync_s) {
  const size_t n = curves.size();
  std::vector<int64_t> best_b(n);
  std::vector<double> peak(n);
  double cluster_speed = 0;
  for (size_t i = 0; i < n; ++i) {
    best_b[i] = 1;
    if (i > 0 && curves[i].kind == curves[i - 1].kind) {  // measured alike: the same best
      best_b[i] = best_b[i - 1];
    } else {
      for (int64_t b = 1; b <= curves[i].max_microbatch; ++b)
        if (curves[i].Speed(b) >= curves[i].Speed(best_b[i]) * (1 - 1e-9)) best_b[i] = b;  // ties: the larger
    }
    peak[i] = curves[i].Speed(best_b[i]);
    cluster_speed += peak[i];
  }
  // Shares in proportion to peak speed, then the remainder one sequence at a time to the device
  // that would finish first.
  const double optimal_s = gbs / cluster_speed;
  std::vector<int64_t> share(n);
  int64_t assigned = 0;
  for (size_t i = 0; i < n; ++i) assigned += share[i] = static_cast<int64_t>(std::floor(optimal_s * peak[i]));
  for (int64_t left = gbs - assigned; left > 0; --left) {
    size_t pick = 0;
    for (size_t i = 1; i < n; ++i)
      if ((share[i] + 1) / peak[i] < (share[pick] + 1) / peak[pick]) pick = i;
    ++share[pick];
  }
  PoplarAllocation a;
  double slowest = 0;
  for (size_t i = 0; i < n; ++i) {
    a.devices.push_back(Split(curves[i].device, share[i], best_b[i]));
    slowest = std::max(slowest, DeviceTimeS(curves[i], a.devices.back()));
  }
  a.predicted_step_s = slowest + sync_s;
  a.explain = fmt::format(
      "ZeRO-0/1: {:.4g} sequences/s in all at each device's best microbatch; optimal step {:.4g} s",
      cluster_speed, optimal_s);
  return a;
}

PoplarAllocation Zero23(const std::vector<Curve>& curves, int64_t gbs, double sync_s) {
  const size_t n = curves.size();
  // The kinds of device and how many of each.
  std::vector<std::pair<const CurveKind*, int64_t>> kinds;
  for (const Curve& c : curves) {
    auto it = std::find_if(kinds.begin(), kinds.end(), [&](const auto& k) { return k.first == c.kind; });
    if (it == kinds.end())
      kinds.push_back({c.kind, 1});
    else
      ++it->second;
  }
  std::set<double> candidates;
  for (const auto& [kind, count] : kinds) candidates.insert(kind->time_s.begin() + 1, kind->time_s.end());
  double best_wall = std::numeric_limits<double>::infinity();
  int64_t best_steps = 0;
  double best_t = 0;
  for (double t : candidates) {
    int64_t per_step = 0;
    for (const auto& [kind, count] : kinds) per_step += count * kind->Within(t);
    if (per_step == 0) continue;
    const int64_t steps = (gbs + per_step - 1) / per_step;
    const double wall = steps * (t + sync_s);
    if (wall < best_wall) {
      best_wall = wall;
      best_steps = steps;
      best_t = t;
    }
  }
  std::vector<int64_t> best(n, 0);
  if (best_steps > 0)
    for (size_t i = 0; i < n; ++i) best[i] = curves[i].kind->Within(best_t);
  // The last step: the remaining sequences in proportion to the chosen sizes.
  int64_t per_step = 0;
  for (int64_t b : best) per_step += b;
  const int64_t remainder = gbs - (best_steps - 1) * per_step;
  std::vector<int64_t> last(n, 0);
  int64_t given = 0;
  for (size_t i = 0; i < n; ++i) given += last[i] = remainder * best[i] / per_step;
  for (int64_t left = remainder - given; left > 0; --left) {
    size_t pick = n;
    for (size_t i = 0; i < n; ++i) {
      if (last[i] >= best[i]) continue;
      if (pick == n || curves[i].TimeS(last[i] + 1) < curves[pick].TimeS(last[pick] + 1)) pick = i;
    }
    ++last[pick];
  }
  PoplarAllocation a;
  a.accumulation_steps = best_steps;
  double last_step = 0;
  for (size_t i = 0; i < n; ++i) {
    DevicePlan d{curves[i].device, std::max<int64_t>(1, best[i]), 0, 0};
    if (best[i] > 0) {
      d.num_microbatches = last[i] > 0 ? best_steps : best_steps - 1;
      d.last_microbatch_size = last[i] > 0 && last[i] < best[i] ? last[i] : 0;
    }
    last_step = std::max(last_step, curves[i].TimeS(last[i]));
    a.devices.push_back(d);
  }
  a.predicted_step_s = (best_steps - 1) * (best_t + sync_s) + last_step + sync_s;
  a.explain = fmt::format(
      "ZeRO-2/3: step time t = {:.4g} s fits {} sequences per accumulation step; {} steps, "
      "last step {} sequences",
      best_t, per_step, best_steps, remainder);
  return a;
}

}  // namespace

Result<PoplarAllocation> PoplarAllocate(const std::vector<PoplarDeviceCurve>& curves, int zero_stage,
                                        int64_t global_batch, double sync_s) {
  if (curves.empty()) return Status::InvalidArgument("Poplar allocation needs at least one device");
  if (global_batch < 1)
    return Status::InvalidArgument("Poplar allocation needs a global batch of at least 1");
  for (const auto& c : curves) {
    if (c.sizes.empty() || c.sizes.size() != c.times_s.size())
      return Status::InvalidArgument(fmt::format("device {}: no speed measurements", c.device));
    if (c.max_microbatch < 1)
      return Status::OutOfMemory(fmt::format(
          "device {}: a microbatch of 1 sequence does not fit at ZeRO-{}; raise the ZeRO stage or leave the "
          "device out",
          c.device, zero_stage));
  }
  std::vector<std::unique_ptr<CurveKind>> kinds;
  std::vector<Curve> built = MakeCurves(curves, &kinds);
  PoplarAllocation a =
      zero_stage <= 1 ? Zero01(built, global_batch, sync_s) : Zero23(built, global_batch, sync_s);
  a.zero_stage = zero_stage;
  return a;
}

}  // namespace motley
