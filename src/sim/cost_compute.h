// Compute cost when nothing was measured: an analytic roofline from the GPU catalog. A layer's
// time is its FLOPs at a fraction of the device's dense peak, but never less than the time to read
// its weights from device memory once (small microbatches are memory-bound).
#pragma once

#include <cstdint>

#include "core/gpu_catalog.h"
#include "core/model.h"

namespace motley {

struct RooflineConfig {
  /// Fraction of the dense peak that training matmuls reach. 0.5 is typical of well-tuned
  /// transformer layers on datacenter GPUs (measured A100 Llama-7B layers run at ~0.55).
  double matmul_efficiency = 0.5;
};

/// Forward time of one decoder layer on `microbatch` sequences of `seq_len` tokens, in seconds.
double RooflineLayerForwardS(const GpuSpec& gpu, const ModelSpec& model, int64_t seq_len, int64_t microbatch,
                             Precision precision, const RooflineConfig& config = {});
/// Backward time: twice the forward, plus one forward when activations are recomputed.
double RooflineLayerBackwardS(const GpuSpec& gpu, const ModelSpec& model, int64_t seq_len, int64_t microbatch,
                              Precision precision, bool recompute, const RooflineConfig& config = {});

}  // namespace motley
