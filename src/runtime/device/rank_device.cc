#include "runtime/device/rank_device.h"

#include <fmt/format.h>

namespace motley {

Result<torch::Device> RankDevice(const std::string& name, const Rendezvous& rv, int visible_gpus) {
  const int gpus = visible_gpus >= 0             ? visible_gpus
                   : torch::cuda::is_available() ? static_cast<int>(torch::cuda::device_count())
                                                 : 0;
  if (name != "cuda" && name != "auto" && name != "cpu")
    return Status::InvalidArgument(fmt::format("--device {}: expected auto, cpu or cuda", name));
  if (name == "cpu" || (name == "auto" && gpus < rv.local_world_size)) return torch::Device(torch::kCPU);
  if (gpus < rv.local_world_size)
    return Status::InvalidArgument(fmt::format(
        "--device cuda: {} ranks on this host but {} GPU(s) visible; each rank needs a GPU of its own (NCCL refuses "
        "two ranks on one GPU) — start at most {} ranks per host, or use --device cpu",
        rv.local_world_size, gpus, gpus));
  return torch::Device(torch::kCUDA, static_cast<c10::DeviceIndex>(rv.local_rank));
}

int PlanRankOf(const Schedule& schedule, const Cluster& cluster, int launcher_rank, int world_size) {
  if (cluster.emulated() || world_size != cluster.num_devices() ||
      static_cast<int>(schedule.programs.size()) != world_size)
    return launcher_rank;
  for (const Program& p : schedule.programs)
    if (p.device == launcher_rank) return p.rank;
  return launcher_rank;
}

Status CheckClusterFitsThisHost(const Cluster& cluster, int visible_gpus, const std::string& job_file) {
  const int devices = cluster.num_devices();
  if (cluster.emulated() || visible_gpus == 0 || visible_gpus >= devices) return Status::Ok();
  return Status::InvalidArgument(fmt::format(
      "cluster {} has {} devices but this host sees {} GPU(s): its ranks cannot all start here. On several hosts, "
      "plan here (motley plan --cluster ... -o plan.toml, or take the plan.toml a run wrote beside its checkpoints) "
      "and start one rank per device on every host: torchrun --nnodes N --nproc-per-node G --no-python motley train "
      "{} --plan plan.toml (or srun / mpirun); or let CPU ranks stand in for the devices here: --device cpu",
      cluster.name, devices, visible_gpus, job_file.empty() ? "JOB" : job_file));
}

}  // namespace motley
