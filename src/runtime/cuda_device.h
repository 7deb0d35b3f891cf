// What needs CUDA's own headers: the caching allocator's peak and waiting for a device. The
// translation unit compiles them only when libtorch has CUDA (MOTLEY_WITH_CUDA, set by CMake when
// the torch_cuda target exists); the CPU-only build answers 0 and does nothing, and never calls
// them with a CUDA device (none exists there).
#pragma once

#include <cstdint>

#include <torch/torch.h>

namespace motley {

/// True when this build links libtorch's CUDA part.
bool BuiltWithCuda();
/// Starts a new peak of `device`'s allocated memory.
void ResetPeakDeviceMemory(const torch::Device& device);
/// The largest amount of `device`'s memory allocated through torch since the last reset.
int64_t PeakDeviceMemoryBytes(const torch::Device& device);
/// The host waits for all work queued on `device`.
void SynchronizeDevice(const torch::Device& device);
/// Makes `device` the calling thread's current CUDA device.
void SetCurrentDevice(const torch::Device& device);

}  // namespace motley
