// GpuCatalog: public spec figures of the GPU types motley knows, each entry citing its source.
// Cluster files can add types or override figures (see cluster_parse.cc, [device_types.NAME]).
#pragma once

#include <cstdint>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "core/precision.h"

namespace motley {

struct GpuSpec {
  std::string name;                  // catalog key used in cluster files: "a100-80gb"
  std::string display_name;          // "NVIDIA A100 SXM4 80GB"
  std::vector<std::string> aliases;  // other spellings, e.g. the Zorse measurement names ("a100x80")
  double memory_bytes = 0;           // nominal capacity (GB on the datasheet as GiB, as the driver reports)
  double memory_bandwidth_bytes_per_s = 0;  // HBM / GDDR
  double peak_fp16_flops = 0;        // dense fp16/bf16 tensor-core FLOP/s (datasheet "with sparsity" / 2)
  double peak_fp32_flops = 0;        // dense fp32 FLOP/s (non-tensor)
  double peak_fp64_flops = 0;        // dense fp64 FLOP/s (fp64 tensor cores where the type has them)
  bool supports_bf16 = true;         // false before Ampere: fp16 (with loss scaling) instead
  double host_link_bytes_per_s = 0;  // PCIe to the host, per direction
  double nvlink_bytes_per_s = 0;     // NVLink per GPU, per direction; 0 when the type has none
  std::string source;                // where the figures come from
  /// Memory a training process cannot use for its own tensors: the CUDA context (with cuBLAS's and
  /// cuDNN's workspaces), NCCL's buffers, and what the caching allocator holds reserved but unused
  /// at training's peaks (fragmentation). Planners, the memory model and the simulator plan within
  /// memory_bytes - reserve_bytes. A catalog default per GPU generation, overridden per device
  /// type in a cluster file (`reserve = "2GiB"`), or measured by `motley profile` on the GPU
  /// (sim/profile.h: MeasuredReserve; a cluster file's figure stands over it).
  double reserve_bytes = 0;
  std::string reserve_source;  // where the reserve comes from
};

/// The type's peak FLOP/s for compute in precision `p` (fp16 and bf16 share the tensor-core figure).
double PeakFlops(const GpuSpec& spec, Precision p);

class GpuCatalog {
 public:
  /// The built-in table (gpu_catalog.cc).
  static const GpuCatalog& Builtin();

  /// Finds a type by name or alias, case-insensitively.
  const GpuSpec* Find(std::string_view name) const;
  /// Adds a type, or replaces the one with the same name.
  void Upsert(GpuSpec spec);
  const std::vector<GpuSpec>& specs() const { return specs_; }
  /// Names the catalog's contents: a copy has its copy's, every Upsert makes a new one (from a
  /// process-wide count), so that where a type was found can be trusted while it is the same.
  uint64_t version() const { return version_; }
  /// Names and aliases, for "did you mean".
  std::vector<std::string> AllNames() const;

 private:
  static uint64_t NextVersion();
  std::vector<GpuSpec> specs_;
  uint64_t version_ = NextVersion();
};

}  // namespace motley
