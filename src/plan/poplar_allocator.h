// Poplar's batch allocation (poplar.txt, Algorithm 2): a batch size per device for data parallelism
// at a given ZeRO stage, from each device's speed curve and its largest microbatch.
//
//  * ZeRO-0/1 (one synchronisation per step): every device runs at its peak speed; the global
//    batch is split in proportion to those speeds, the integer remainder goes one sequence at a
//    time to the device that would finish first, and each device's share is cut into microbatches
//    of its best size plus a last, smaller one.
//  * ZeRO-2/3 (a reduction after every accumulation step): search the step time t over every
//    device's time at every microbatch size; at each t a device takes the largest microbatch it
//    finishes within t; the accumulation steps needed for the global batch times (t + the
//    step's communication) is the wall time to minimise. The last step's sequences are spread in
//    proportion to the chosen sizes.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "core/status.h"
#include "plan/plan.h"

namespace motley {

struct PoplarDeviceCurve {
  int device = 0;
  int64_t max_microbatch = 0;   // the largest microbatch that fits (memory model or profiler)
  std::vector<double> sizes;    // measured microbatch sizes, ascending
  std::vector<double> times_s;  // seconds for forward + backward of one microbatch at each size
};

struct PoplarAllocation {
  int zero_stage = 0;
  std::vector<DevicePlan> devices;  // in the order of the curves
  double predicted_step_s = 0;
  int64_t accumulation_steps = 0;  // ZeRO-2/3: the common number of steps
  std::string explain;             // how it was chosen, for --explain
};

/// `sync_s`: the communication of one synchronisation (ZeRO-0/1: once per step; ZeRO-2/3: once
/// per accumulation step). REQUIRES: every curve has at least one point.
Result<PoplarAllocation> PoplarAllocate(const std::vector<PoplarDeviceCurve>& curves, int zero_stage,
                                        int64_t global_batch, double sync_s);

}  // namespace motley
