#include "runtime/cuda_device.h"

#include <c10/core/impl/VirtualGuardImpl.h>
#include <torch/cuda.h>

#ifdef MOTLEY_WITH_CUDA
#include <c10/cuda/CUDACachingAllocator.h>
#endif

namespace motley {

#ifdef MOTLEY_WITH_CUDA
bool BuiltWithCuda() { return true; }

void ResetPeakDeviceMemory(const torch::Device& device) {
  c10::cuda::CUDACachingAllocator::resetPeakStats(device.index());
}

int64_t PeakDeviceMemoryBytes(const torch::Device& device) {
  // allocated_bytes[0]: the aggregate over the small and large pools.
  return c10::cuda::CUDACachingAllocator::getDeviceStats(device.index()).allocated_bytes[0].peak;
}
#else
bool BuiltWithCuda() { return false; }
void ResetPeakDeviceMemory(const torch::Device&) {}
int64_t PeakDeviceMemoryBytes(const torch::Device&) { return 0; }
#endif

void SynchronizeDevice(const torch::Device& device) {
  if (!device.is_cuda()) return;
  torch::cuda::synchronize(device.index());
}

void SetCurrentDevice(const torch::Device& device) {
  if (!device.is_cuda()) return;
  c10::impl::VirtualGuardImpl(device.type()).setDevice(device);
}

}  // namespace motley
