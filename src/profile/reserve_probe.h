// ReserveProbe: what a GPU keeps beyond the tensors a plan counts (GpuSpec::reserve_bytes),
// measured on the GPU `motley profile` runs on: CUDA's context (the driver's memory in use beyond
// the caching allocator's segments once the context exists), a communicator's buffers (what a
// one-rank NCCL group's first all-reduce adds; 0 where this build has no NCCL), and the allocator's
// fragmentation (its reserved-but-unallocated bytes at the peak of the steps measured since
// StartFragmentation). The profile keeps it per device type (sim/profile.h: MeasuredReserve) and
// `plan`, `simulate` and `train` subtract it in place of the catalog's default.
#pragma once

#include <torch/torch.h>

#include "core/status.h"
#include "sim/profile.h"

namespace motley {

class ReserveProbe {
 public:
  /// Measures the context and the communicator's buffers on `device` (a CUDA device; an error on
  /// any other), and starts the allocator's peaks for the fragmentation.
  static Result<ReserveProbe> Start(const torch::Device& device);
  /// Adds the fragmentation of the steps run since Start (their peak reserved less their peak
  /// allocated) and returns the three figures.
  MeasuredReserve Finish() const;

 private:
  torch::Device device_{torch::kCPU};
  MeasuredReserve measured_;
};

}  // namespace motley
