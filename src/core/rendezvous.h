// Where this process sits in a multi-process run, read from the environment as the common
// launchers set it: torchrun and `motley launch` (RANK, WORLD_SIZE, LOCAL_RANK, LOCAL_WORLD_SIZE,
// MASTER_ADDR, MASTER_PORT), Slurm's srun (SLURM_PROCID, SLURM_NTASKS, SLURM_LOCALID, ...) and
// Open MPI's mpirun (OMPI_COMM_WORLD_RANK, ...). Explicit RANK/WORLD_SIZE win over the others.
// With none of them set, the process is rank 0 of 1. Torch-free.
#pragma once

#include <functional>
#include <string>

#include "core/status.h"

namespace motley {

struct Rendezvous {
  int rank = 0;           // this process's rank in the run (a plan may renumber it: PlanRankOf)
  int launcher_rank = 0;  // the rank the launcher gave it
  // Whether this process hosts the rendezvous store at MASTER_ADDR: launcher rank 0 under torchrun
  // and `motley launch` (which put it there); under mpirun and srun, which may place rank 0 on any
  // host, the rank with local rank 0 on MASTER_ADDR's host.
  bool hosts_store = true;
  // Whether the store lives outside the ranks (MOTLEY_STORE_BY_LAUNCHER=1: the supervising `motley
  // train` of live islands hosts it, so that it outlives any rank): then no rank hosts it.
  bool store_by_launcher = false;
  int world_size = 1;
  int local_rank = 0;
  int local_world_size = 1;
  std::string master_addr = "127.0.0.1";
  int master_port = 29500;                // torchrun's default
  std::string source = "single process";  // which launcher's variables were read
};

/// The variable a launcher that hosts the rendezvous store itself sets in its ranks' environment.
inline constexpr char kStoreByLauncherEnv[] = "MOTLEY_STORE_BY_LAUNCHER";

using GetEnv = std::function<const char*(const char*)>;
Result<Rendezvous> RendezvousFromEnv(const GetEnv& getenv);
Result<Rendezvous> RendezvousFromEnv();

}  // namespace motley
