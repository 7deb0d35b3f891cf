// Launcher: starts N local ranks of a command with the torchrun-style environment (RANK,
// WORLD_SIZE, LOCAL_RANK, LOCAL_WORLD_SIZE, MASTER_ADDR, MASTER_PORT), prefixes their output with
// "[rank r]", and watches them. With several ranks each gets OMP_NUM_THREADS=1 and
// OPENBLAS_NUM_THREADS=1 unless the environment sets them (as torchrun does). When one fails, it says which and how, gives the others
// `stop_grace_s` to notice and exit on their own (their watchdogs name the dead rank), then
// terminates the rest. Torch-free.
#pragma once

#include <string>
#include <vector>

namespace motley::cli {

struct LaunchOptions {
  int nproc = 1;
  std::vector<std::string> command;   // argv of each rank
  std::string master_addr = "127.0.0.1";
  int master_port = 0;                // 0 = a free port
  double stop_grace_s = 20;           // after a failure, before SIGTERM to the rest
  double kill_grace_s = 5;            // after SIGTERM, before SIGKILL
  int* failed_rank = nullptr;         // when given: the rank blamed for a failure, or -1
};

/// Runs the ranks to completion; returns 0 when all exit 0, else 1.
int Launch(const LaunchOptions& options);

}  // namespace motley::cli
