// What planners need to know about speed, as an interface: the simulator's CostModel implements it
// (sim/cost_model.h), tests can plug in their own. Keeps planners below the simulator.
#pragma once

#include <cstdint>
#include <optional>
#include <vector>

#include "plan/schedule.h"

namespace motley {

class PlannerCosts {
 public:
  virtual ~PlannerCosts() = default;
  /// One decoder layer on `sequences` sequences on `device`, without emulated slowdown.
  virtual double LayerForwardS(int device, double sequences) const = 0;
  virtual double LayerBackwardS(int device, double sequences) const = 0;
  /// How many times slower an emulated device computes (1 for a real one).
  virtual double Slowdown(int device) const = 0;
  /// A point-to-point transfer.
  virtual double TransferS(int from, int to, double bytes) const = 0;
  /// A ring collective over `devices` with `bytes` of payload.
  virtual double CollectiveS(OpKind kind, const std::vector<int>& devices, double bytes) const = 0;
  /// The largest microbatch of the whole model's data-parallel step at `zero_stage` over
  /// `dp_degree` devices that the profiler measured to fit on `device`, or nullopt when not
  /// measured for this model, degree and memory (then a planner uses its memory model).
  virtual std::optional<int64_t> MeasuredMaxMicrobatch(int /*device*/, int /*zero_stage*/,
                                                       int /*dp_degree*/) const {
    return std::nullopt;
  }
};

}  // namespace motley
