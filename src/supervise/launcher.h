// Launcher: starts N local ranks of a command — or ranks on several hosts through a remote-start
// command (ssh by default) — with the torchrun-style environment (RANK, WORLD_SIZE, LOCAL_RANK,
// LOCAL_WORLD_SIZE, MASTER_ADDR, MASTER_PORT), prefixes their output with
// "[rank r]", and watches them. With several ranks each gets OMP_NUM_THREADS=1 and
// OPENBLAS_NUM_THREADS=1 unless the environment sets them (as torchrun does). When one fails, it says which
// and how, gives the others `stop_grace_s` to notice and exit on their own (their watchdogs name the dead
// rank), then terminates the rest. Torch-free.
#pragma once

#include <string>
#include <vector>

#include "core/status.h"

namespace motley {

/// One host of a multi-host launch and how many ranks start there.
struct LaunchHost {
  std::string name;  // what the remote command reaches it by (ssh's host, an address)
  int nproc = 1;
};

struct LaunchOptions {
  int nproc = 1;  // without hosts: ranks on this machine
  // With hosts: each host's ranks in turn (ranks 0..n0-1 on the first, ...), started by `remote`
  // (its words, with {host} and {index} replaced, then one shell command line: the rank's
  // environment, the working directory and the command); MASTER_ADDR defaults to the first host.
  std::vector<LaunchHost> hosts;
  std::string remote = "ssh {host}";
  std::vector<std::string> command;  // argv of each rank
  std::string master_addr = "127.0.0.1";
  int master_port = 0;         // 0 = a free port
  double stop_grace_s = 20;    // after a failure, before SIGTERM to the rest
  double kill_grace_s = 5;     // after SIGTERM, before SIGKILL
  int* failed_rank = nullptr;  // when given: the rank blamed for a failure, or -1
};

/// Runs the ranks to completion; returns 0 when all exit 0, else 1.
int Launch(const LaunchOptions& options);

/// "h1:2,h2:2" as hosts (a host without ":N" runs one rank); an error names the part and the fix.
Result<std::vector<LaunchHost>> ParseLaunchHosts(const std::string& text);

/// The argv that starts rank `rank` (host `host_index`, local rank `local_rank`) on its host:
/// `remote`'s words, then one shell line "cd DIR && exec env NAME=VALUE... COMMAND..." quoted for
/// a POSIX shell.
std::vector<std::string> RemoteRankArgv(const LaunchOptions& o, int host_index,
                                        const std::vector<std::string>& env, const std::string& working_dir);

/// `s` quoted for a POSIX shell (as is when it needs no quoting).
std::string ShellQuote(const std::string& s);

}  // namespace motley
