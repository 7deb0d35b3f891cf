#include "core/rendezvous.h"

#include "core/net.h"

#include <cstdlib>
#include <string>

#include <fmt/format.h>

namespace motley {
namespace {

Result<int> ReadInt(const GetEnv& getenv, const char* name, int min, int max) {
  const char* v = getenv(name);
  if (v == nullptr) return Status::NotFound(name);
  char* end = nullptr;
  const long x = std::strtol(v, &end, 10);
  if (*v == '\0' || *end != '\0' || x < min || x > max)
    return Status::InvalidArgument(
        fmt::format("environment variable {}={}: expected an integer in [{}, {}]", name, v, min, max));
  return static_cast<int>(x);
}

struct Names {
  const char* source;
  const char* rank;
  const char* world;
  const char* local_rank;
  const char* local_world;
};

}  // namespace

Result<Rendezvous> RendezvousFromEnv(const GetEnv& getenv) {
  static constexpr Names kLaunchers[] = {
      {"torchrun / motley launch", "RANK", "WORLD_SIZE", "LOCAL_RANK", "LOCAL_WORLD_SIZE"},
      {"Slurm", "SLURM_PROCID", "SLURM_NTASKS", "SLURM_LOCALID", "SLURM_NTASKS_PER_NODE"},
      {"Open MPI", "OMPI_COMM_WORLD_RANK", "OMPI_COMM_WORLD_SIZE", "OMPI_COMM_WORLD_LOCAL_RANK",
       "OMPI_COMM_WORLD_LOCAL_SIZE"},
  };
  Rendezvous r;
  const Names* found = nullptr;
  for (const Names& n : kLaunchers) {
    if (getenv(n.rank) != nullptr || getenv(n.world) != nullptr) {
      found = &n;
      break;
    }
  }
  if (found == nullptr) return r;
  r.source = found->source;
  if (getenv(found->rank) == nullptr || getenv(found->world) == nullptr)
    return Status::InvalidArgument(fmt::format("{} is set but {} is not; a launcher sets both ({})",
                                               getenv(found->rank) ? found->rank : found->world,
                                               getenv(found->rank) ? found->world : found->rank,
                                               found->source));
  MOTLEY_ASSIGN_OR_RETURN(r.world_size, ReadInt(getenv, found->world, 1, 1 << 20));
  MOTLEY_ASSIGN_OR_RETURN(r.rank, ReadInt(getenv, found->rank, 0, r.world_size - 1));
  r.launcher_rank = r.rank;
  if (getenv(found->local_rank) != nullptr) {
    MOTLEY_ASSIGN_OR_RETURN(r.local_rank, ReadInt(getenv, found->local_rank, 0, r.world_size - 1));
  }
  if (getenv(found->local_world) != nullptr) {
    // Slurm's SLURM_NTASKS_PER_NODE may read "4(x2)" on uneven layouts: only a plain number counts.
    Result<int> lw = ReadInt(getenv, found->local_world, 1, r.world_size);
    if (lw.ok()) r.local_world_size = *lw;
  }
  if (const char* addr = getenv("MASTER_ADDR")) {
    r.master_addr = addr;
  } else if (const char* slurm = getenv("SLURM_LAUNCH_NODE_IPADDR");
             slurm && r.source == std::string("Slurm")) {
    r.master_addr = slurm;
  } else if (r.world_size > 1 && r.source != std::string("torchrun / motley launch")) {
    return Status::InvalidArgument(
        fmt::format("{} started {} ranks but MASTER_ADDR is not set; export MASTER_ADDR=<the "
                    "host of rank 0> (mpirun: -x MASTER_ADDR=host)",
                    r.source, r.world_size));
  }
  if (getenv("MASTER_PORT") != nullptr) {
    MOTLEY_ASSIGN_OR_RETURN(r.master_port, ReadInt(getenv, "MASTER_PORT", 1, 65535));
  }
  const bool loopback =
      r.master_addr.starts_with("127.") || r.master_addr == "localhost" || r.master_addr == "::1";
  if (r.source == std::string("torchrun / motley launch") || r.world_size == 1 || loopback)
    r.hosts_store = r.rank == 0;
  else
    r.hosts_store = r.local_rank == 0 && IsThisHost(r.master_addr, FindThisHost());
  if (const char* outside = getenv(kStoreByLauncherEnv); outside != nullptr && std::string(outside) == "1") {
    r.store_by_launcher = true;
    r.hosts_store = false;
  }
  return r;
}

Result<Rendezvous> RendezvousFromEnv() {
  return RendezvousFromEnv([](const char* name) { return std::getenv(name); });
}

}  // namespace motley
