// LayerProfiler: measures one device type for the planner and simulator (sim/profile.h) — the
// forward and backward time of one decoder layer and of the head (final norm, LM head, loss) at
// several microbatch sizes, exactly as the executor runs them (forward without a graph; backward
// recomputes the forward from the layer's input), and the largest microbatch that fits in the
// device's memory — of one layer with the embedding and the head, and of the whole model's
// data-parallel step at each ZeRO stage (memory_probe.h: Poplar's Algorithm 1, without ever
// holding the whole model).
//
// On CPU (emulated devices) the measurement is of this machine with one torch and one BLAS thread,
// as a rank under `motley launch` runs, in CPU time (what the emulation paces by), optionally
// under the load of the other emulated devices; the emulated speed factor is
// applied by the cost model, and the memory limit is the MemoryLedger's — so the search finds the
// ledger's limit exactly.
#pragma once

#include <cstdint>
#include <functional>
#include <string>
#include <vector>

#include <c10/core/Device.h>

#include "core/model.h"
#include "core/status.h"
#include "profile/profiling_model.h"
#include "runtime/model/llama_model.h"
#include "sim/profile.h"

namespace motley {

struct LayerProfilerConfig {
  std::vector<int64_t> microbatches = {1, 2, 4, 8, 16};  // measured sizes (those that fit, up to the cap)
  int warmup = 1;                                        // untimed runs per size
  int repeats = 5;                                       // timed runs per size; the median counts
  int64_t max_microbatch_cap = 256;  // the search stops here (a larger microbatch is never planned)
  /// CPU: measure under the load of the other emulated devices sharing this machine — one worker
  /// thread per entry, running the same layer with that device's speed factor as its duty cycle
  /// (compute, then sleep speed_factor - 1 times as long), as the ranks will. Empty: alone.
  std::vector<double> background_speed_factors;
  /// Tensor-parallel degrees whose share of a layer is also timed (those the model's heads allow).
  std::vector<int> tp_degrees = {2, 4, 8};
};

/// Where the device type is used, for its measured memory limits (memory_probe.h): the
/// data-parallel degree of the whole cluster and whether its collectives run over Gloo.
/// dp_degree 0: measure the pieces' limit only.
struct ProfileMemoryContext {
  int dp_degree = 0;
  bool gloo_reduce_scatter = false;
};

/// Measures a device type on ProfilingDevice(). `progress` is told what is being measured.
/// Only the embedding, one decoder layer and the head are built, so any model whose single layer
/// fits can be profiled; the memory limits come from memory_probe.h.
Result<ProfileEntry> ProfileDeviceType(const std::string& device_type, const ModelSpec& model,
                                       int64_t seq_len, Precision precision, int64_t memory_bytes,
                                       const LayerProfilerConfig& config,
                                       const ProfileMemoryContext& memory = {},
                                       const std::function<void(const std::string&)>& progress = {});

}  // namespace motley
