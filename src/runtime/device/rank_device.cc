#include "runtime/device/rank_device.h"

#include <algorithm>
#include <cctype>

#include <fmt/format.h>
#include <fmt/ranges.h>

#include "core/units.h"

namespace motley {

Result<torch::Device> RankDevice(const std::string& name, const Rendezvous& rv, int visible_gpus) {
  const int gpus = visible_gpus >= 0             ? visible_gpus
                   : torch::cuda::is_available() ? static_cast<int>(torch::cuda::device_count())
                                                 : 0;
  if (name != "cuda" && name != "auto" && name != "cpu")
    return Status::InvalidArgument(fmt::format("--device {}: expected auto, cpu or cuda", name));
  if (name == "cpu" || (name == "auto" && gpus < rv.local_world_size)) return torch::Device(torch::kCPU);
  if (gpus < rv.local_world_size)
    return Status::InvalidArgument(
        fmt::format("--device cuda: {} ranks on this host but {} GPU(s) visible; each rank needs a GPU of "
                    "its own (NCCL refuses "
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

Result<int> PlanRankOnHost(const Schedule& schedule, const Cluster& cluster, const Rendezvous& rv,
                           const ThisHost& me) {
  const bool hosts = std::any_of(cluster.nodes.begin(), cluster.nodes.end(),
                                 [](const NodeSpec& n) { return !n.host.empty(); });
  if (!hosts) return PlanRankOf(schedule, cluster, rv.launcher_rank, rv.world_size);
  if (static_cast<int>(schedule.programs.size()) != rv.world_size)
    return Status::InvalidArgument(
        fmt::format("the plan runs {} ranks but the launcher started {}; start one rank per "
                    "device of the plan",
                    schedule.programs.size(), rv.world_size));
  // The plan's devices on this host, in the cluster file's order, and every host the plan uses.
  std::vector<int> here;
  std::vector<std::string> used;
  for (const Program& p : schedule.programs) {
    const NodeSpec& node = cluster.node_of(p.device);
    const std::string where = fmt::format("{} (node '{}')", node.host, node.name);
    if (std::find(used.begin(), used.end(), where) == used.end()) used.push_back(where);
    if (IsThisHost(node.host, me)) here.push_back(p.device);
  }
  std::sort(here.begin(), here.end());
  const std::string who =
      fmt::format("rank {} (local rank {} of {})", rv.launcher_rank, rv.local_rank, rv.local_world_size);
  if (here.empty())
    return Status::InvalidArgument(
        fmt::format("{} runs on {}, but the plan puts no device on this host: it expects its ranks on {}; "
                    "start the ranks on "
                    "those hosts, or name this host in the cluster file's [[nodes]] host",
                    who, me.Describe(), fmt::join(used, ", ")));
  if (rv.local_rank >= static_cast<int>(here.size()) || rv.local_world_size != static_cast<int>(here.size()))
    return Status::InvalidArgument(fmt::format(
        "{} runs on {}, where the plan has {} device(s) ({}): start exactly {} rank(s) on this host", who,
        me.Describe(), here.size(), fmt::join(here, ", "), here.size()));
  const int device = here[static_cast<size_t>(rv.local_rank)];
  for (const Program& p : schedule.programs)
    if (p.device == device) return p.rank;
  return Status::Internal(
      "a device of the plan has no program");  // unreachable: `here` came from the programs
}

Status CheckRankGpu(const Cluster& cluster, int device, int rank, const std::string& name,
                    int64_t total_bytes) {
  const GpuSpec& spec = cluster.spec(device);
  const NodeSpec& node = cluster.node_of(device);
  auto lower = [](std::string s) {
    std::string out;
    for (char c : s)
      if (c != ' ' && c != '-' && c != '_')
        out += static_cast<char>(std::tolower(static_cast<unsigned char>(c)));
    return out;
  };
  const std::string model = lower(spec.name.substr(0, spec.name.find('-')));
  const bool named = model.size() >= 2 && lower(spec.display_name).find(model) != std::string::npos;
  const double ratio = spec.memory_bytes > 0 ? static_cast<double>(total_bytes) / spec.memory_bytes : 1;
  if ((named && lower(name).find(model) == std::string::npos) || ratio < 0.9 || ratio > 1.1)
    return Status::InvalidArgument(fmt::format(
        "rank {} runs on a {} with {}, but the plan made its part for device {} of node '{}'{}: a {} with "
        "{}; start "
        "it on the host and GPU the plan expects, or describe this GPU in the cluster file",
        rank, name, FormatBytes(static_cast<double>(total_bytes)), device, node.name,
        node.host.empty() ? "" : " on " + node.host,
        spec.display_name.empty() ? spec.name : spec.display_name, FormatBytes(spec.memory_bytes)));
  return Status::Ok();
}

Status CheckClusterFitsThisHost(const Cluster& cluster, int visible_gpus, const std::string& job_file) {
  const int devices = cluster.num_devices();
  if (cluster.emulated() || visible_gpus == 0 || visible_gpus >= devices) return Status::Ok();
  return Status::InvalidArgument(fmt::format(
      "cluster {} has {} devices but this host sees {} GPU(s): its ranks cannot all start here. On several "
      "hosts, "
      "plan here (motley plan --cluster ... -o plan.toml, or take the plan.toml a run wrote beside its "
      "checkpoints) "
      "and start one rank per device on every host: torchrun --nnodes N --nproc-per-node G --no-python "
      "motley train "
      "{} --plan plan.toml (or srun / mpirun); or let CPU ranks stand in for the devices here: --device cpu",
      cluster.name, devices, visible_gpus, job_file.empty() ? "JOB" : job_file));
}

}  // namespace motley
