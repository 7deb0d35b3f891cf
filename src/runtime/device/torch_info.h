// What libtorch this build runs on. The header is torch-free so the CLI can print it without
// compiling torch headers.
#pragma once

#include <cstdint>
#include <string>

namespace motley {

struct TorchInfo {
  std::string version;  // "1.13.0" (Debian) or "2.11.0" (PyTorch wheel)
  bool cuda_available = false;
  int cuda_device_count = 0;
  std::string cuda_device_name;   // the first GPU's, as CUDA names it ("NVIDIA H200"); empty without
  int64_t cuda_device_bytes = 0;  // its memory
};

TorchInfo GetTorchInfo();

}  // namespace motley
