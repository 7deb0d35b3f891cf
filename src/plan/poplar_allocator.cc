#include "plan/poplar_allocator.h"

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <limits>
#include <set>

#include <fmt/format.h>

#include "plan/monotone_spline.h"

namespace motley {
namespace {

// A device's speed (sequences per second) as a spline through its measured points, and the time
// of a microbatch derived from it.
struct Curve {
  int device;
  int64_t max_microbatch;
  MonotoneSpline speed;
  double TimeS(int64_t b) const { return b <= 0 ? 0 : b / speed(static_cast<double>(b)); }
};

std::vector<Curve> MakeCurves(const std::vector<PoplarDeviceCurve>& in) {
  std::vector<Curve> out;
  for (const auto& c : in) {
    std::vector<double> speeds;
    for (size_t i = 0; i < c.sizes.size(); ++i) speeds.push_back(c.sizes[i] / c.times_s[i]);
    out.push_back({c.device, c.max_microbatch, MonotoneSpline(c.sizes, speeds)});
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
    for (int64_t b = 1; b <= curves[i].max_microbatch; ++b)
      if (curves[i].speed(b) >= curves[i].speed(best_b[i]) * (1 - 1e-9)) best_b[i] = b;  // ties: the larger
    peak[i] = curves[i].speed(best_b[i]);
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
  std::set<double> candidates;
  for (const auto& c : curves)
    for (int64_t b = 1; b <= c.max_microbatch; ++b) candidates.insert(c.TimeS(b));
  double best_wall = std::numeric_limits<double>::infinity();
  std::vector<int64_t> best(n, 0);
  int64_t best_steps = 0;
  double best_t = 0;
  for (double t : candidates) {
    std::vector<int64_t> b(n, 0);
    int64_t per_step = 0;
    for (size_t i = 0; i < n; ++i) {
      // find(g_i, t): the largest microbatch done within t.
      for (int64_t s = curves[i].max_microbatch; s >= 1; --s) {
        if (curves[i].TimeS(s) <= t * (1 + 1e-12)) {
          b[i] = s;
          break;
        }
      }
      per_step += b[i];
    }
    if (per_step == 0) continue;
    const int64_t steps = (gbs + per_step - 1) / per_step;
    const double wall = steps * (t + sync_s);
    if (wall < best_wall) {
      best_wall = wall;
      best = b;
      best_steps = steps;
      best_t = t;
    }
  }
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
  std::vector<Curve> built = MakeCurves(curves);
  PoplarAllocation a =
      zero_stage <= 1 ? Zero01(built, global_batch, sync_s) : Zero23(built, global_batch, sync_s);
  a.zero_stage = zero_stage;
  return a;
}

}  // namespace motley
