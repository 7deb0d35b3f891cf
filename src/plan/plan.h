// Plan: everything about *how* to train, as one serialisable data object (DESIGN.md). Planners
// produce Plans; the schedule lowering, the simulator and the runtime read nothing else.
//
// A plan is a pipeline of groups. Each group owns a contiguous range of decoder layers (the first
// group also runs the embedding, the last the final norm and LM head), splits them into
// ministages, and does data parallelism (ZeRO) over its devices. With one group the plan is pure
// data parallelism (Poplar); with several it is a pipeline (Zorse, GPipe, 1F1B).
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "core/cluster.h"
#include "core/model.h"
#include "core/status.h"

namespace motley {

/// The order of forward and backward work inside a pipeline.
enum class PipelineSchedule {
  kGPipe,        // all forwards, then all backwards, per stage
  k1F1B,         // one forward one backward in steady state (PipeDream-flush)
  kInterleaved,  // Zorse §4.1: GPipe order inside each ministage, ministages one after another
};
std::string_view PipelineScheduleName(PipelineSchedule s);

/// What one device does in its group.
struct DevicePlan {
  int device = 0;                    // global device id in the cluster
  int64_t microbatch_size = 1;       // sequences per microbatch
  int64_t num_microbatches = 1;      // per step (gradient-accumulation steps in data parallelism)
  int64_t last_microbatch_size = 0;  // size of the last microbatch when it differs; 0 = the same

  /// Sequences this device processes per step.
  int64_t sequences() const {
    if (num_microbatches == 0) return 0;
    return microbatch_size * (num_microbatches - 1) + (last_microbatch_size > 0 ? last_microbatch_size : microbatch_size);
  }
  int64_t microbatch_size_at(int64_t i) const {
    return (i == num_microbatches - 1 && last_microbatch_size > 0) ? last_microbatch_size : microbatch_size;
  }
  bool operator==(const DevicePlan&) const = default;
};

struct GroupPlan {
  int layer_begin = 0;  // decoder layers [layer_begin, layer_end)
  int layer_end = 0;
  int num_ministages = 1;  // contiguous slices of the layers, scheduled as units
  int tp_degree = 1;       // tensor-parallel ranks per replica (costed only, for now)
  std::vector<DevicePlan> devices;
  /// Pipelines: the device of this group that processes each global microbatch (size = number of
  /// microbatches). Empty for pure data parallelism.
  std::vector<int> routing;

  int num_layers() const { return layer_end - layer_begin; }
  /// Layers [begin, end) of ministage `s`: the layers split as evenly as possible, earlier
  /// ministages taking the extra layer.
  std::pair<int, int> ministage_layers(int s) const;
  int64_t num_microbatches() const;
  int64_t sequences() const;
  bool operator==(const GroupPlan&) const = default;
};

struct Plan {
  std::string strategy = "manual";  // the planner that made it
  int64_t seq_len = 1024;
  Precision precision = Precision::kBf16;
  PipelineSchedule schedule = PipelineSchedule::kGPipe;
  int zero_stage = 2;  // 0..3, inside each group
  bool activation_checkpointing = true;
  bool offload_params = false;       // keep only the current and next ministage on the device
  bool offload_activations = false;  // layer-boundary activations to host memory in forward
  std::vector<GroupPlan> groups;     // pipeline order

  bool is_pipeline() const { return groups.size() > 1; }
  int64_t global_batch_sequences() const { return groups.empty() ? 0 : groups.front().sequences(); }
  int64_t global_batch_tokens() const { return global_batch_sequences() * seq_len; }
  int num_devices() const;
  bool operator==(const Plan&) const = default;
};

/// Checks a plan against a cluster and a model: layers cover the model in order, every device
/// exists and appears once, batch sizes agree across the pipeline, the routing is consistent.
/// Messages name the group, the device and every factor.
Status ValidatePlan(const Plan& plan, const Cluster& cluster, const ModelSpec& model);

/// The default cross-stage routing of a pipeline group when a plan gives none: microbatches dealt
/// to devices in order, each device taking its num_microbatches consecutive ones.
std::vector<int> BlockRouting(const GroupPlan& group);

}  // namespace motley
