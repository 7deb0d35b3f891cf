// Profile: measured per-layer compute times per device type, the largest microbatch that fits,
// and measured links. The profiler writes it; the planner and the simulator read the same file.
//
// File format (JSON, "format": "motley-profile-1"):
//   {"format": "motley-profile-1",
//    "entries": [{"device_type": "a100-80gb", "model": "llama-7b", "hidden_size": 4096,
//                 "seq_len": 1024, "precision": "fp16", "backward_includes_recompute": true,
//                 "points": [{"microbatch": 1, "forward_ms": 2.54, "backward_ms": 7.42}, ...],
//                 "fit": {"forward": [slope_ms, intercept_ms], "backward": [slope_ms, intercept_ms]},
//                 "head_points": [{"microbatch": 1, "forward_ms": 0.9, "backward_ms": 2.1}, ...],
//                 "max_microbatch": 12,
//                 "limits": {"dp_degree": 4, "num_layers": 32, "total_params": 6.7e9,
//                            "capacity_bytes": 85899345920, "max_microbatch_by_zero": [0, 0, 3, 9]}}],
//    "links": [{"between": ["node-a", "node-b"], "bandwidth_bytes_per_s": 5e9, "latency_s": 2e-5,
//               "collective_overhead_s": 1e-4}]}
// Measured links replace the cluster file's figures between those two nodes in the cost model.
// Times are of ONE decoder layer. Between measured points a time is interpolated linearly (which is
// monotone when the points are); beyond them it follows "fit" when given, else the line through
// the last two points.
#pragma once

#include <array>
#include <cstdint>
#include <optional>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include <nlohmann/json.hpp>

#include "core/cluster.h"
#include "core/model.h"
#include "core/status.h"

namespace motley {

struct ProfilePoint {
  double microbatch = 0;  // sequences
  double forward_ms = 0;
  double backward_ms = 0;
};

struct LinearFit {
  double slope_ms = 0;
  double intercept_ms = 0;
  double at(double x) const { return slope_ms * x + intercept_ms; }
};

/// The largest microbatch of the whole model's data-parallel training step (checkpointed; one
/// ministage per layer at ZeRO-2/3) that fits on one device of the type, by ZeRO stage, measured by
/// the profiler (profile/memory_probe.h) for this data-parallel degree, model and capacity
/// ("limits"; 0 = not even one sequence fits at that stage).
struct MeasuredLimits {
  int dp_degree = 0;
  int64_t num_layers = 0;
  double total_params = 0;
  int64_t capacity_bytes = 0;
  std::array<int64_t, 4> max_microbatch_by_zero{};
};

/// What CUDA, a communicator and the caching allocator kept on a GPU of the entry's type, measured
/// by `motley profile` on it (profile/reserve_probe.h; "reserve": {"context_bytes": ...,
/// "communication_bytes": ..., "fragmentation_bytes": ...}): the driver's memory in use beyond
/// torch's once the context exists; what a one-rank NCCL group's first all-reduce added; the
/// allocator's reserved-but-unallocated bytes at the profile's peak step.
struct MeasuredReserve {
  double context_bytes = 0;
  double communication_bytes = 0;
  double fragmentation_bytes = 0;
  double total_bytes() const { return context_bytes + communication_bytes + fragmentation_bytes; }
};

struct ProfileEntry {
  std::string device_type;  // catalog name
  std::string model;        // for people; matching uses the shape (hidden size) below
  int64_t hidden_size = 0;
  int64_t seq_len = 0;
  Precision precision = Precision::kBf16;
  bool backward_includes_recompute = true;  // measured with activation checkpointing
  std::vector<ProfilePoint> points;         // ascending microbatch
  /// The final norm, LM head and loss at the same microbatch sizes ("head_points"; optional —
  /// without them the head is costed by the roofline model).
  std::vector<ProfilePoint> head_points;
  /// One rank's share of a decoder layer split over `tp` tensor-parallel ranks (its heads and MLP
  /// columns; the all-reduces are the schedule's own ops), by degree ("tp_points"; optional —
  /// without them a layer's time is divided by the degree).
  std::map<int, std::vector<ProfilePoint>> tp_points;
  std::optional<LinearFit> forward_fit, backward_fit;
  /// The largest microbatch one layer with the embedding and the head trains with on the device
  /// (the least any plan needs); 0 = unknown.
  int64_t max_microbatch = 0;
  std::optional<MeasuredLimits> limits;
  /// AdamW's update, per million parameters of the shard ("optimizer_ms_per_mparam"; 0 = not
  /// measured: costed from the device's memory bandwidth).
  double optimizer_ms_per_mparam = 0;
  /// ZERO-resizing's own cost on the device (FlexTP's pre-test, runtime/flextp/resize_pretest.h):
  /// (pruning ratio, the pruned MLP's extra time as a fraction of the unpruned one's), measured on
  /// a tensor-parallel rank's MLP slice ("resize_overhead": [[ratio, fraction], ...]; optional —
  /// without it the simulator prices resizing as free).
  std::vector<std::pair<double, double>> resize_overhead;
  /// Migration's borrowed compute on the device (runtime/flextp/resize_pretest.h: TimeBorrowedCost):
  /// what a unit computed for another rank costs against one of the rank's own, on a tensor-parallel
  /// rank's MLP slice ("borrowed_cost"; 0 = not measured: the simulator prices it as an own unit).
  double borrowed_cost = 0;
  /// Measured on a GPU only ("reserve"; absent on a CPU or emulated device: the catalog's default).
  std::optional<MeasuredReserve> reserve;

  /// Layer times at `microbatch` sequences, in seconds.
  double ForwardS(double microbatch) const;
  double BackwardS(double microbatch) const;
  /// The head's times (backward includes its recomputation), or nullopt when not measured.
  std::optional<double> HeadForwardS(double microbatch) const;
  std::optional<double> HeadBackwardS(double microbatch) const;
  /// One tensor-parallel rank's share of a layer, or nullopt when not measured at that degree.
  std::optional<double> TpForwardS(int tp, double microbatch) const;
  std::optional<double> TpBackwardS(int tp, double microbatch) const;
};

struct ProfileLink {
  std::string a, b;  // node names
  double bandwidth_bytes_per_s = 0;
  double latency_s = 0;
  double collective_overhead_s = 0;  // a two-rank all-reduce's time beyond its ring latency (link_probe.h)
  std::string library = "";  // what carried the probe's collectives: "gloo" or "nccl" ("": not recorded)
};

struct Profile {
  std::vector<ProfileEntry> entries;
  std::vector<ProfileLink> links;

  /// The entry for a device type, model shape, sequence length and precision; fp16 and bf16
  /// stand in for each other.
  const ProfileEntry* Find(std::string_view device_type, const ModelSpec& model, int64_t seq_len,
                           Precision precision) const;
};

/// A profile's measured reserves (ProfileEntry::reserve; the largest of a type's entries) replace
/// the catalog's defaults for those device types in `cluster`, named as measured by `file` — not a
/// reserve the cluster file gives (the user's word stands). An error when a measured reserve is not
/// less than the type's memory.
Status ApplyMeasuredReserves(const Profile& profile, const std::string& file, Cluster* cluster);

Result<Profile> ParseProfileJson(std::string_view text, const std::string& file);
Result<Profile> LoadProfileFile(const std::string& path);
nlohmann::json ProfileToJson(const Profile& profile);

/// Reads the Zorse authors' published measurements (shared/data/zorse-measured/
/// model_latencies.json) for the Llama models, mapping their GPU names to catalog types and their
/// model names to presets (deepspeedllama_7b -> llama-7b, ...). Entries are fp16 with
/// recomputation in the backward.
Result<Profile> ImportZorseMeasured(std::string_view latencies_json, const std::string& file);

}  // namespace motley
