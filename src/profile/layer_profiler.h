// LayerProfiler: measures one device type for the planner and simulator (sim/profile.h) — the
// forward and backward time of one decoder layer and of the head (final norm, LM head, loss) at
// several microbatch sizes, exactly as the executor runs them (forward without a graph; backward
// recomputes the forward from the layer's input), and the largest microbatch that fits in the
// device's memory (Poplar, Algorithm 1: estimate from one run's memory growth, then grow
// exponentially and binary-search with out-of-memory detection).
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
#include "sim/profile.h"

namespace motley {

struct LayerProfilerConfig {
  std::vector<int64_t> microbatches = {1, 2, 4, 8, 16};  // measured sizes (those that fit, up to the cap)
  int warmup = 1;        // untimed runs per size
  int repeats = 5;       // timed runs per size; the median counts
  int64_t max_microbatch_cap = 256;  // the search stops here (a larger microbatch is never planned)
  /// CPU: measure under the load of the other emulated devices sharing this machine — one worker
  /// thread per entry, running the same layer with that device's speed factor as its duty cycle
  /// (compute, then sleep speed_factor - 1 times as long), as the ranks will. Empty: alone.
  std::vector<double> background_speed_factors;
  /// Tensor-parallel degrees whose share of a layer is also timed (those the model's heads allow).
  std::vector<int> tp_degrees = {2, 4, 8};
};

/// What fits: the whole model trained in data parallelism on one device (ZeRO-0: parameters,
/// gradients, AdamW state and one microbatch's activations with layer checkpointing).
/// Returns whether `microbatch` sequences fit in `capacity_bytes` (0 = no limit): of the ledger on
/// the CPU; on a GPU, the step must not run out of the GPU's memory and its peak (the caching
/// allocator's) must stay within `capacity_bytes` — a GPU standing in for a smaller one is held to
/// the smaller one's memory.
bool TrainingStepFits(const ModelSpec& model, int64_t seq_len, Precision precision, int64_t microbatch,
                      int64_t capacity_bytes);

/// The largest microbatch that fits (0 if not even one), by Algorithm 1, at most `cap`.
int64_t MaxMicrobatch(const ModelSpec& model, int64_t seq_len, Precision precision, int64_t capacity_bytes,
                      int64_t cap);

/// The device ProfileDeviceType measures on: the calling thread's current GPU, else the CPU.
c10::Device ProfilingDevice();

/// Measures a device type on ProfilingDevice(). `progress` is told what is being measured.
Result<ProfileEntry> ProfileDeviceType(const std::string& device_type, const ModelSpec& model, int64_t seq_len,
                                       Precision precision, int64_t memory_bytes, const LayerProfilerConfig& config,
                                       const std::function<void(const std::string&)>& progress = {});

}  // namespace motley
