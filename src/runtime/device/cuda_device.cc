#include "runtime/device/cuda_device.h"

#include <c10/core/impl/VirtualGuardImpl.h>
#include <torch/cuda.h>

#ifdef MOTLEY_WITH_CUDA
#include <c10/cuda/CUDACachingAllocator.h>
#include <c10/cuda/CUDAException.h>
#include <cuda_runtime_api.h>
#endif

namespace motley {

#ifdef MOTLEY_WITH_CUDA
bool BuiltWithCuda() { return true; }

namespace {
// The caching allocator sets itself up on the first allocation; its statistics refuse a device
// before that ("Invalid device argument"): allocating one element first makes sure it has.
c10::DeviceIndex AllocatorReady(const torch::Device& device) {
  (void)torch::empty({1}, torch::TensorOptions().device(device));
  return device.has_index() ? device.index() : c10::impl::VirtualGuardImpl(device.type()).getDevice().index();
}
}  // namespace

void ResetPeakDeviceMemory(const torch::Device& device) {
  c10::cuda::CUDACachingAllocator::resetPeakStats(AllocatorReady(device));
}

int64_t PeakDeviceMemoryBytes(const torch::Device& device) {
  // allocated_bytes[0]: the aggregate over the small and large pools.
  return c10::cuda::CUDACachingAllocator::getDeviceStats(AllocatorReady(device)).allocated_bytes[0].peak;
}

int64_t PeakReservedDeviceMemoryBytes(const torch::Device& device) {
  return c10::cuda::CUDACachingAllocator::getDeviceStats(AllocatorReady(device)).reserved_bytes[0].peak;
}

int64_t ReservedDeviceMemoryBytes(const torch::Device& device) {
  return c10::cuda::CUDACachingAllocator::getDeviceStats(AllocatorReady(device)).reserved_bytes[0].current;
}

int64_t DeviceMemoryInUseBytes(const torch::Device& device) {
  const c10::DeviceIndex index = AllocatorReady(device);
  int previous = 0;
  C10_CUDA_CHECK(cudaGetDevice(&previous));
  C10_CUDA_CHECK(cudaSetDevice(index));
  size_t free = 0, total = 0;
  C10_CUDA_CHECK(cudaMemGetInfo(&free, &total));
  C10_CUDA_CHECK(cudaSetDevice(previous));
  return static_cast<int64_t>(total - free);
}

GpuIdentity IdentifyGpu(const torch::Device& device) {
  cudaDeviceProp props{};
  C10_CUDA_CHECK(cudaGetDeviceProperties(&props, device.index() < 0 ? 0 : device.index()));
  return {props.name, static_cast<int64_t>(props.totalGlobalMem)};
}

double EventSeconds(const c10::Event& from, const c10::Event& to) {
  float ms = 0;
  C10_CUDA_CHECK(cudaEventElapsedTime(&ms, static_cast<cudaEvent_t>(from.eventId()),
                                      static_cast<cudaEvent_t>(to.eventId())));
  return ms / 1e3;
}
#else
bool BuiltWithCuda() { return false; }
GpuIdentity IdentifyGpu(const torch::Device&) { return {}; }
void ResetPeakDeviceMemory(const torch::Device&) {}
int64_t PeakDeviceMemoryBytes(const torch::Device&) { return 0; }
int64_t PeakReservedDeviceMemoryBytes(const torch::Device&) { return 0; }
int64_t ReservedDeviceMemoryBytes(const torch::Device&) { return 0; }
int64_t DeviceMemoryInUseBytes(const torch::Device&) { return 0; }
double EventSeconds(const c10::Event&, const c10::Event&) { return 0; }
#endif

std::shared_ptr<c10::Event> RecordTimingEvent(const torch::Device& device) {
  c10::impl::VirtualGuardImpl impl(device.type());
  auto e = std::make_shared<c10::Event>(device.type(), c10::EventFlag::BACKEND_DEFAULT);
  e->record(impl.getStream(device));
  return e;
}

void SynchronizeDevice(const torch::Device& device) {
  if (!device.is_cuda()) return;
  torch::cuda::synchronize(device.index());
}

void SetCurrentDevice(const torch::Device& device) {
  if (!device.is_cuda()) return;
  c10::impl::VirtualGuardImpl(device.type()).setDevice(device);
}

}  // namespace motley
