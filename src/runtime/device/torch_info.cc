#include "runtime/device/torch_info.h"

#include <torch/cuda.h>
#include <torch/version.h>

#include "runtime/device/cuda_device.h"

namespace motley {

TorchInfo GetTorchInfo() {
  TorchInfo info;
  info.version = TORCH_VERSION;
  info.cuda_available = torch::cuda::is_available();
  info.cuda_device_count = info.cuda_available ? static_cast<int>(torch::cuda::device_count()) : 0;
  if (info.cuda_device_count > 0) {
    const GpuIdentity gpu = IdentifyGpu(torch::Device(torch::kCUDA, 0));
    info.cuda_device_name = gpu.name;
    info.cuda_device_bytes = gpu.total_bytes;
  }
  return info;
}

}  // namespace motley
