#include "runtime/comm/nccl_backend.h"

#include <chrono>

#ifdef MOTLEY_WITH_NCCL
#include <torch/csrc/distributed/c10d/ProcessGroupNCCL.hpp>
#endif

#include <fmt/format.h>

namespace motley {

Result<c10::intrusive_ptr<CommBackend>> MakeNcclBackend(const c10::intrusive_ptr<c10d::Store>& store,
                                                        int rank, int size, double timeout_s) {
#ifdef MOTLEY_WITH_NCCL
  try {
    auto opts = c10d::ProcessGroupNCCL::Options::create();
    opts->timeout = std::chrono::milliseconds(static_cast<int64_t>(timeout_s * 1000));
    c10::intrusive_ptr<CommBackend> pg = c10::make_intrusive<c10d::ProcessGroupNCCL>(store, rank, size, opts);
    return pg;
  } catch (const std::exception& e) {
    return Status::IoError(fmt::format("rank {}: cannot create the NCCL process group: {}", rank,
                                       std::string(e.what()).substr(0, 300)));
  }
#else
  (void)store;
  (void)size;
  (void)timeout_s;
  return Status::InvalidArgument(
      fmt::format("rank {}: this build of motley has no NCCL (its libtorch has no CUDA): GPU tensors cannot "
                  "be communicated; "
                  "build with scripts/build-gpu.sh on a GPU machine, or train with --device cpu",
                  rank));
#endif
}

}  // namespace motley
