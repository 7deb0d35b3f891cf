// RankDevice: the device a rank of a launched run computes and communicates on — its own GPU,
// chosen by its local rank, or the CPU (emulated clusters, CPU-only machines).
#pragma once

#include <string>

#include <torch/torch.h>

#include "core/cluster.h"
#include "core/net.h"
#include "core/rendezvous.h"
#include "core/status.h"
#include "plan/schedule.h"

namespace motley {

/// `name`: "auto" takes a GPU per rank when every rank on this host can have one (NCCL refuses two
/// ranks on one GPU), else the CPU; "cuda" insists on a GPU (an error says why there is none);
/// "cpu" is the CPU. `visible_gpus` < 0: as many as torch sees.
Result<torch::Device> RankDevice(const std::string& name, const Rendezvous& rv, int visible_gpus = -1);

/// The rank a process runs in a plan's schedule, whose ranks are in plan order (groups in pipeline
/// order). On a cluster of real devices started as one process per device in the cluster file's
/// order (launcher rank q on device q: hosts in node order, local ranks in device order), process q
/// runs the program of device q, wherever the plan put that device — so a plan's work for an A100
/// runs on the A100. Elsewhere (an emulated cluster, whose ranks all share this host; a plan over
/// some of the devices) the launcher's rank.
int PlanRankOf(const Schedule& schedule, const Cluster& cluster, int launcher_rank, int world_size);

/// Where the cluster file names its nodes' hosts: the rank this process runs, found from the host
/// it runs on (`me`) and its local rank — the plan's devices on this host, in the cluster file's
/// order, one per local rank — whatever order the launcher numbered the hosts in. An error, before
/// any step, names the rank, where it runs and where the plan expected it: a host the plan puts no
/// device on, more ranks started here than the plan has devices here, or fewer. Without hosts in
/// the cluster file: PlanRankOf.
Result<int> PlanRankOnHost(const Schedule& schedule, const Cluster& cluster, const Rendezvous& rv,
                           const ThisHost& me);

/// Whether the GPU this rank found (CUDA's `name` and total memory) is the kind the plan made its
/// part for (`device` of `cluster`): its memory within 10% of the type's, and its name holding the
/// type's model (a100, h100, t4, ...: the catalog name's first word, where the type's display name
/// has it). A mismatch — a launcher that put the rank on another host or GPU — is one error naming
/// the rank, what it found and what the plan expected.
Status CheckRankGpu(const Cluster& cluster, int device, int rank, const std::string& name,
                    int64_t total_bytes);

/// Whether one rank per device of `cluster` may all start on this host, which sees `visible_gpus`
/// GPUs: yes for an emulated cluster, with no GPU at all (CPU ranks stand in for the devices), or
/// with a GPU per device. A cluster of more GPUs than this host has spans several hosts: the error
/// says how to plan here and start the ranks on every host (`job_file` for the command).
Status CheckClusterFitsThisHost(const Cluster& cluster, int visible_gpus, const std::string& job_file);

}  // namespace motley
