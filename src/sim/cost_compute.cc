#include "sim/cost_compute.h"

#include <algorithm>
#include <cstdint>

namespace motley {

double RooflineLayerForwardS(const GpuSpec& gpu, const ModelSpec& model, int64_t seq_len, int64_t microbatch,
                             Precision precision, const RooflineConfig& config) {
  const double tokens = static_cast<double>(seq_len) * microbatch;
  const double flops = LayerForwardFlopsPerToken(model, seq_len) * tokens;
  const double peak = PeakFlops(gpu, precision);
  const double compute_s = flops / (peak * config.matmul_efficiency);
  const double weight_bytes = static_cast<double>(ParamsPerLayer(model)) * BytesPerElement(precision);
  const double memory_s = weight_bytes / gpu.memory_bandwidth_bytes_per_s;
  return std::max(compute_s, memory_s);
}

double RooflineLayerBackwardS(const GpuSpec& gpu, const ModelSpec& model, int64_t seq_len, int64_t microbatch,
                              Precision precision, bool recompute, const RooflineConfig& config) {
  const double forward = RooflineLayerForwardS(gpu, model, seq_len, microbatch, precision, config);
  return (recompute ? 3.0 : 2.0) * forward;
}

}  // namespace motley
