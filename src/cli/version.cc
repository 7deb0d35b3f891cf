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
  return fmt::format(
      "motley {} (libtorch {}, {})", Version(), torch.version,
      torch.cuda_available ? fmt::format("CUDA, {} device(s)", torch.cuda_device_count) : std::string("CPU"));
#else
  return fmt::format("motley {} (built without libtorch: planning and simulation only)", Version());
#endif
}

}  // namespace motley::cli
