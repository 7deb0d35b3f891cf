// Plan: everything about *how* to train, as one serialisable data object (docs/design.md). Planners
// produce Plans; the schedule lowering, the simulator and the runtime read nothing else.
//
// A plan is a pipeline of groups. Each group does data parallelism (ZeRO) over its devices and owns
// some ministages: ranges of decoder layers. Sorted by layer, all ministages of all groups are the
// pipeline's *ministages*; they cover the model exactly once. GPipe and 1F1B give each group
// one contiguous range; Zorse interleaves them round-robin across groups (§4.1, Figure 4). The
// ministage holding layer 0 also runs the embedding, the one holding the last layer the final
// norm and LM head. With one group the plan is pure data parallelism (Poplar).
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
    return microbatch_size * (num_microbatches - 1) +
           (last_microbatch_size > 0 ? last_microbatch_size : microbatch_size);
  }
  int64_t microbatch_size_at(int64_t i) const {
    return (i == num_microbatches - 1 && last_microbatch_size > 0) ? last_microbatch_size : microbatch_size;
  }
  bool operator==(const DevicePlan&) const = default;
};

/// Decoder layers [begin, end).
struct LayerRange {
  int begin = 0;
  int end = 0;
  int size() const { return end - begin; }
  bool operator==(const LayerRange&) const = default;
};

struct GroupPlan {
  std::vector<LayerRange> ministages;  // in increasing layer order
  /// Tensor-parallel ranks per replica: consecutive runs of tp_degree devices split each layer's
  /// matrices (Megatron-style) and process the same microbatches; data parallelism runs across
  /// the runs. The first device of a run (its leader) carries the run's microbatches in routing.
  /// Simulated (compute split, two all-reduces per layer and pass, memory split); the runtime
  /// executes it with FlexTP.
  int tp_degree = 1;
  std::vector<DevicePlan> devices;
  /// Pipelines: the device of this group that processes each global microbatch (size = number of
  /// microbatches). Empty for pure data parallelism.
  std::vector<int> routing;
  /// The share of the group's ZeRO state (parameter shard, gradient shard, AdamW moments) each
  /// device holds, apart from its share of the batch (Cephalo; plan/state_shares.h). Empty: even
  /// shards. Given: one per device, > 0, a tensor-parallel team's alike, its teams' summing to 1;
  /// needs zero_stage >= 1.
  std::vector<double> state_shares;

  int num_ministages() const { return static_cast<int>(ministages.size()); }
  int num_layers() const;
  /// Microbatches and sequences of the group per step, counted once per tensor-parallel run.
  int64_t num_microbatches() const;
  int64_t sequences() const;
  bool is_tp_leader(size_t device_index) const { return device_index % tp_degree == 0; }
  bool operator==(const GroupPlan&) const = default;
};

struct Plan {
  std::string strategy = "manual";  // the planner that made it
  std::string model;    // the model it was made for: a preset or a path ("" = give it when using the plan)
  std::string cluster;  // the cluster: a built-in name or a path ("" = give it when using the plan)
  int64_t seq_len = 1024;
  Precision precision = Precision::kBf16;
  PipelineSchedule schedule = PipelineSchedule::kGPipe;
  int zero_stage = 2;  // 0..3, inside each group
  bool activation_checkpointing = true;
  bool offload_params = false;       // keep only the current and next ministage on the device
  bool offload_activations = false;  // layer-boundary activations to host memory in forward
  /// Clip gradients to a global norm (a job with [optimizer] grad_clip_norm > 0; the two must
  /// agree). The norm needs every gradient, so every update — and the gathers and parameter
  /// offloads after it — waits for the end of the backward pass instead of following its
  /// ministage's backward (Zorse's interleaved updates; lower.h). false: no clipping.
  bool gradient_clipping = true;
  /// Dynamic loss scaling (always with fp16; in another precision only when asked — tests check the
  /// mechanism in fp64). Every rank must skip or apply the same step, so as with clipping every
  /// update waits for the kGradNorm collective, whose sum holds each rank's found-inf (a non-finite
  /// gradient makes the global norm non-finite on every rank at once).
  bool loss_scaling = false;
  bool loss_scaled() const { return loss_scaling || precision == Precision::kFp16; }
  /// FlexTP in the plan's tensor-parallel teams (runtime/flextp, cost/flextp_balancer.h): "off",
  /// "migrate", "resize" or "semi"; "" (none given): the job's [tensor_parallel] mode when it trains,
  /// "off" when simulated. The simulator predicts a straggling team's step under it.
  std::string flextp_mode;
  std::vector<GroupPlan> groups;  // pipeline order

  bool is_pipeline() const { return groups.size() > 1; }
  int64_t global_batch_sequences() const { return groups.empty() ? 0 : groups.front().sequences(); }
  int64_t global_batch_tokens() const { return global_batch_sequences() * seq_len; }
  int num_devices() const;
  /// The devices it uses, ascending.
  std::vector<int> devices() const;
  bool operator==(const Plan&) const = default;
};

/// The most microbatches one device processes in a step (a step's program holds a few ops per
/// microbatch and ministage; a global batch of billions of sequences would exhaust memory lowering it).
inline constexpr int64_t kMaxMicrobatchesPerDevice = int64_t{1} << 16;

/// Checks a plan against a cluster and a model: layers cover the model in order, every device
/// exists and appears once, batch sizes agree across the pipeline, the routing is consistent.
/// Messages name the group, the device and every factor.
Status ValidatePlan(const Plan& plan, const Cluster& cluster, const ModelSpec& model);

/// `num_layers` layers from `begin` in `k` contiguous ministages, as even as possible (earlier
/// ones take the extra layer).
std::vector<LayerRange> SplitLayers(int begin, int num_layers, int k);

/// Zorse's layer assignment (§4.3.3): group g gets `layers_per_group[g]` layers in
/// `ministages_per_group[g]` even ministages, and the ministages take the model's layers round-robin
/// across groups (g0's first, g1's first, ..., g0's second, ...). REQUIRES: sizes match, every
/// group has 1 <= ministages <= layers.
std::vector<std::vector<LayerRange>> InterleavedMinistages(const std::vector<int>& layers_per_group,
                                                           const std::vector<int>& ministages_per_group);

/// A ministage of the plan, placed: which group runs it, its position among the group's
/// ministages, its layers. (Glossary: a group's stage is its layers; a ministage a contiguous
/// slice of them scheduled as a unit.)
struct PlacedMinistage {
  int group = 0;
  int index = 0;
  LayerRange layers;
};
/// All ministages of all groups sorted by layer. REQUIRES: a plan that passed ValidatePlan.
std::vector<PlacedMinistage> MinistagesByLayer(const Plan& plan);

/// The default cross-stage routing of a pipeline group when a plan gives none: microbatches dealt
/// to devices (tensor-parallel leaders) in order, each taking its num_microbatches consecutive ones.
std::vector<int> BlockRouting(const GroupPlan& group);

}  // namespace motley
