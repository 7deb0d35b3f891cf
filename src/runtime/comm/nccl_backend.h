// NCCL process groups for GPU tensors. Built only against a libtorch with CUDA and NCCL
// (MOTLEY_WITH_NCCL, set by CMake when it finds nccl.h beside the CUDA libtorch); elsewhere
// MakeNcclBackend says why there is none.
#pragma once

#include <torch/version.h>
#include <torch/csrc/distributed/c10d/Store.hpp>

#if TORCH_VERSION_MAJOR >= 2
#include <torch/csrc/distributed/c10d/Backend.hpp>
#else
#include <torch/csrc/distributed/c10d/ProcessGroup.hpp>
#endif

#include "core/status.h"

namespace motley {

/// The base class of c10d's process groups: ProcessGroup in libtorch 1.x, Backend in 2.x.
#if TORCH_VERSION_MAJOR >= 2
using CommBackend = c10d::Backend;
#else
using CommBackend = c10d::ProcessGroup;
#endif

/// A process group over NCCL of `size` ranks meeting in `store` (a prefix store per group).
/// The calling thread's current CUDA device is this rank's.
Result<c10::intrusive_ptr<CommBackend>> MakeNcclBackend(const c10::intrusive_ptr<c10d::Store>& store,
                                                        int rank, int size, double timeout_s);

}  // namespace motley
