// RankDevice: the device a rank of a launched run computes and communicates on — its own GPU,
// chosen by its local rank, or the CPU (emulated clusters, CPU-only machines).
#pragma once

#include <string>

#include <torch/torch.h>

#include "core/cluster.h"
#include "core/status.h"
#include "runtime/rendezvous.h"

namespace motley {

/// `name`: "auto" takes a GPU per rank when every rank on this host can have one (NCCL refuses two
/// ranks on one GPU), else the CPU; "cuda" insists on a GPU (an error says why there is none);
/// "cpu" is the CPU. `visible_gpus` < 0: as many as torch sees.
Result<torch::Device> RankDevice(const std::string& name, const Rendezvous& rv, int visible_gpus = -1);

/// Whether one rank per device of `cluster` may all start on this host, which sees `visible_gpus`
/// GPUs: yes for an emulated cluster, with no GPU at all (CPU ranks stand in for the devices), or
/// with a GPU per device. A cluster of more GPUs than this host has spans several hosts: the error
/// says how to plan here and start the ranks on every host (`job_file` for the command).
Status CheckClusterFitsThisHost(const Cluster& cluster, int visible_gpus, const std::string& job_file);

}  // namespace motley
