// Launcher: starts N local ranks of a command — or ranks on several hosts, one agent a host started
// through a remote-start command (ssh by default) — with the torchrun-style environment (RANK, WORLD_SIZE,
// LOCAL_RANK, LOCAL_WORLD_SIZE, MASTER_ADDR, MASTER_PORT), prefixes their output with
// "[rank r]", and watches them. With several ranks each gets OMP_NUM_THREADS=1 and
// OPENBLAS_NUM_THREADS=1 unless the environment sets them (as torchrun does). When one fails, it says which
// and how, gives the others `stop_grace_s` to notice and exit on their own (their watchdogs name the dead
// rank), then terminates the rest. Torch-free.
#pragma once

#include <functional>
#include <optional>
#include <string>
#include <string_view>
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
  std::string master_addr;           // the rendezvous; empty: 127.0.0.1, or with hosts the first host
  int master_port = 0;               // 0 = a free port
  double stop_grace_s = 20;          // after a failure, before SIGTERM to the rest
  double kill_grace_s = 5;           // after SIGTERM, before SIGKILL
  int* failed_rank = nullptr;        // when given: the rank blamed for a failure, or -1
  // Live islands (supervise/island_supervisor.h): when a rank fails, the ranks that fall with it (its
  // island's: stopped at once, the others go on, and the launch succeeds when they end well), or none
  // (the launch fails, as without it). `fallen`, when given, gets every rank that fell so.
  std::function<std::vector<int>(int rank)> falls_with;
  std::vector<int>* fallen = nullptr;
  // ... and told at once of the ranks that fell with the rendezvous they share and why (the first's
  // end, in words): the island supervisor reports their failure in its store, so that the ranks going
  // on count them lost within a heartbeat, not after the heartbeat timeout (a killed rank says nothing).
  std::function<void(const std::string& master_addr, int master_port, const std::vector<int>& ranks,
                     const std::string& why)>
      on_fallen;
  // As one host's agent (motley agent): the local ranks are ranks rank_offset... of a world of
  // world_size (0: nproc); each rank's end is reported on stdout as "motley-agent: rank R status S"
  // (S: its waitpid status); nothing else of the agent's own is printed. With stop_on_stdin the
  // ranks are stopped when stdin says "stop" or closes (the launcher across hosts is gone).
  bool agent = false;
  bool stop_on_stdin = false;
  int rank_offset = 0;
  int world_size = 0;
  // With hosts: the motley binary each host's agent runs (default: this one, at the same path —
  // the hosts share the filesystem, as they do the working directory).
  std::string agent_binary;
};

/// Runs the ranks to completion; returns 0 when all exit 0, else 1. With hosts, one agent a host
/// (started through `remote`) starts and watches that host's ranks (LaunchOnHosts).
int Launch(const LaunchOptions& options);

/// Launch across `options.hosts`: one `motley agent` a host, each started by the remote-start
/// command, reporting its ranks' ends; a failure stops every agent's ranks, a host whose agent is
/// gone before its ranks reported is named (its ranks lost).
int LaunchOnHosts(const LaunchOptions& options);

/// One line of an agent's output: a rank's end ("motley-agent: rank R status S") or not.
struct AgentReport {
  int rank = -1;
  int status = 0;
};
std::optional<AgentReport> ParseAgentReport(std::string_view line);
std::string AgentReportLine(int rank, int status);

/// "h1:2,h2:2" as hosts (a host without ":N" runs one rank); an error names the part and the fix.
Result<std::vector<LaunchHost>> ParseLaunchHosts(const std::string& text);

/// The argv that starts `o.command` on host `host_index` (a host's agent): `remote`'s words, then
/// one shell line "cd DIR && exec env NAME=VALUE... COMMAND..." quoted for a POSIX shell.
std::vector<std::string> RemoteRankArgv(const LaunchOptions& o, int host_index,
                                        const std::vector<std::string>& env, const std::string& working_dir);

/// `s` quoted for a POSIX shell (as is when it needs no quoting).
std::string ShellQuote(const std::string& s);

}  // namespace motley
