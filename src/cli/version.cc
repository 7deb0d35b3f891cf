#include "cli/version.h"

#include <fmt/format.h>

#ifdef MOTLEY_WITH_TORCH
#include "runtime/device/torch_info.h"
#endif

namespace motley::cli {

std::string Version() { return MOTLEY_VERSION; }

std::string VersionLine() {
#ifdef MOTLEY_WITH_TORCH
  TorchInfo torch = GetTorchInfo();
  // The first GPU's name and memory as a cluster file would give them (tests and benchmarks
  // describe the GPU they run on from this line).
  const std::string gpu = torch.cuda_device_count > 0 ? fmt::format(": {}, {:.1f}GiB", torch.cuda_device_name,
                                                                    torch.cuda_device_bytes / double(1 << 30))
                                                      : std::string();
  return fmt::format("motley {} (libtorch {}, {})", Version(), torch.version,
                     torch.cuda_available ? fmt::format("CUDA, {} device(s){}", torch.cuda_device_count, gpu)
                                          : std::string("CPU"));
#else
  return fmt::format("motley {} (built without libtorch: planning and simulation only)", Version());
#endif
}

}  // namespace motley::cli
