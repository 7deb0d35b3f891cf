// The devices this process can measure: CUDA GPUs when present, else the CPU (emulated devices).
#pragma once

#include <string>

namespace motley {

struct LocalDevices {
  int num_cuda_devices = 0;
  std::string describe;  // "2 CUDA devices" or "CPU only (devices are emulated)"
};

LocalDevices ProbeLocalDevices();

}  // namespace motley
