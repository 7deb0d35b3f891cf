// RankDevice: the device a rank of a launched run computes and communicates on — its own GPU,
// chosen by its local rank, or the CPU (emulated clusters, CPU-only machines).
#pragma once

#include <string>

#include <torch/torch.h>

#include "core/status.h"
#include "runtime/rendezvous.h"

namespace motley {

/// `name`: "auto" takes a GPU per rank when every rank on this host can have one (NCCL refuses two
/// ranks on one GPU), else the CPU; "cuda" insists on a GPU (an error says why there is none);
/// "cpu" is the CPU. `visible_gpus` < 0: as many as torch sees.
Result<torch::Device> RankDevice(const std::string& name, const Rendezvous& rv, int visible_gpus = -1);

}  // namespace motley
