// The Poplar planner: data parallelism over a set of devices with a batch size per device
// (poplar_allocator.h), at the lowest ZeRO stage where every device fits a microbatch of one
// (Poplar raises the stage when it does not), as a Plan.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "core/cluster.h"
#include "core/model.h"
#include "core/status.h"
#include "plan/plan.h"
#include "plan/planner_costs.h"
#include "plan/poplar_allocator.h"

namespace motley {

struct PoplarRequest {
  int64_t global_batch_sequences = 0;
  int64_t seq_len = 1024;
  Precision precision = Precision::kBf16;
  bool activation_checkpointing = true;
  int zero_stage = 0;            // the stage to start from; raised while a device cannot fit one sequence
  std::vector<int> devices;      // empty = every device of the cluster
  int64_t max_microbatch = 256;  // search limit per device
};

struct PoplarPlan {
  Plan plan;
  PoplarAllocation allocation;
  std::vector<int64_t> max_microbatch;  // per device, at the chosen stage
  std::string explain;
};

/// Communication of one synchronisation of the whole model's state at a ZeRO stage (lower.h says
/// what each stage moves), over `devices` with even shards.
double DataParallelSyncS(const PlannerCosts& costs, const std::vector<int>& devices, const ModelSpec& model,
                         Precision p, int zero_stage);

/// A device's speed curve: forward and backward of every layer at microbatches of 1, 2, 4, ... up
/// to `max_microbatch` (>= 1).
PoplarDeviceCurve SpeedCurve(const PlannerCosts& costs, const ModelSpec& model, int device,
                             int64_t max_microbatch);

Result<PoplarPlan> PlanPoplar(const Cluster& cluster, const ModelSpec& model, const PlannerCosts& costs,
                              const PoplarRequest& request);

}  // namespace motley
