#include "profile/device_probe.h"

#include <fmt/format.h>

#include "runtime/device/torch_info.h"

namespace motley {

LocalDevices ProbeLocalDevices() {
  LocalDevices d;
  TorchInfo torch = GetTorchInfo();
  d.num_cuda_devices = torch.cuda_device_count;
  d.describe = d.num_cuda_devices > 0 ? fmt::format("{} CUDA device(s)", d.num_cuda_devices)
                                      : std::string("CPU only (devices are emulated)");
  return d;
}

}  // namespace motley
