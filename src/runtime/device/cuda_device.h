// What needs CUDA's own headers: the caching allocator's peak and waiting for a device. The
// translation unit compiles them only when libtorch has CUDA (MOTLEY_WITH_CUDA, set by CMake when
// the torch_cuda target exists); the CPU-only build answers 0 and does nothing, and never calls
// them with a CUDA device (none exists there).
#pragma once

#include <cstdint>
#include <memory>
#include <string>

#include <c10/core/Event.h>
#include <torch/torch.h>

namespace motley {

/// True when this build links libtorch's CUDA part.
bool BuiltWithCuda();
/// Starts a new peak of `device`'s allocated memory.
void ResetPeakDeviceMemory(const torch::Device& device);
/// The largest amount of `device`'s memory allocated through torch since the last reset.
int64_t PeakDeviceMemoryBytes(const torch::Device& device);
/// The caching allocator's largest reserved amount (its segments, used or not) since the last reset.
int64_t PeakReservedDeviceMemoryBytes(const torch::Device& device);
/// The caching allocator's reserved amount now.
int64_t ReservedDeviceMemoryBytes(const torch::Device& device);
/// The device's memory in use by anything, as the driver counts it (total less free): the context,
/// libraries' buffers, the allocator's segments, other processes'.
int64_t DeviceMemoryInUseBytes(const torch::Device& device);
/// CUDA's name of `device` ("NVIDIA A100-SXM4-80GB") and its total memory; "" and 0 in the CPU-only build.
struct GpuIdentity {
  std::string name;
  int64_t total_bytes = 0;
};
GpuIdentity IdentifyGpu(const torch::Device& device);
/// The host waits for all work queued on `device`.
void SynchronizeDevice(const torch::Device& device);
/// Makes `device` the calling thread's current CUDA device.
void SetCurrentDevice(const torch::Device& device);
/// Records a timing event on `device`'s current stream (a traced step's clock on the device).
std::shared_ptr<c10::Event> RecordTimingEvent(const torch::Device& device);
/// Seconds from one completed timing event of a CUDA device to another (negative when `to` came
/// first); 0 in the CPU-only build.
double EventSeconds(const c10::Event& from, const c10::Event& to);

}  // namespace motley
