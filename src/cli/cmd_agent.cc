// motley agent --nproc N [--rank-offset R --world-size W --master-addr A --master-port P] -- COMMAND
// One host's part of a launch across hosts: started there by `motley launch --hosts` (through its
// remote-start command) or as one task a host by srun / mpirun, it starts the host's ranks, reports
// each one's end on stdout, and stops them when its launcher says "stop" or is gone.
#include <algorithm>

#include <fmt/format.h>

#include "cli/args.h"
#include "cli/command.h"
#include "core/rendezvous.h"
#include "supervise/launcher.h"

namespace motley::cli {

int RunAgent(const std::vector<std::string>& args) {
  CLI::App app(
      "Start this host's ranks of a launch across hosts (motley launch --hosts starts one agent a host): "
      "ranks R.. of W with the rendezvous set, their output prefixed, each one's end reported on stdout as "
      "'motley-agent: rank R status S'.",
      "motley agent");
  LaunchOptions options;
  options.agent = true;
  app.add_option("--nproc", options.nproc, "ranks on this host")->required()->check(CLI::Range(1, 1024));
  auto* offset = app.add_option("--rank-offset", options.rank_offset,
                                "the global rank of this host's first rank (default: under srun or mpirun "
                                "with one task a host, that task's rank x --nproc)")
                     ->check(CLI::Range(0, 1 << 20));
  auto* world =
      app.add_option("--world-size", options.world_size,
                     "ranks on every host together (default: under srun or mpirun, tasks x --nproc)")
          ->check(CLI::Range(1, 1 << 20));
  app.add_option("--master-addr", options.master_addr,
                 "the rendezvous address (default: MASTER_ADDR, or Slurm's launch node)");
  app.add_option("--master-port", options.master_port, "the rendezvous port (default: MASTER_PORT)")
      ->check(CLI::Range(1, 65535));
  app.add_flag("--stop-on-stdin", options.stop_on_stdin,
               "stop the ranks when stdin says stop or closes (motley launch --hosts passes it: its line to "
               "the agent)");
  app.footer("Everything after -- is the command each rank runs.");
  auto dashes = std::find(args.begin(), args.end(), "--");
  if (auto rc = ParseArgs(app, std::vector<std::string>(args.begin(), dashes))) return *rc;
  if (dashes == args.end() || dashes + 1 == args.end()) {
    fmt::print(stderr, "motley agent: give the command after --\n");
    return kExitUsage;
  }
  // Started by srun or mpirun as one task a host: the task's place gives this host's ranks theirs.
  if (offset->count() == 0 || world->count() == 0 || options.master_addr.empty() ||
      options.master_port == 0) {
    Result<Rendezvous> task = RendezvousFromEnv();
    if (!task.ok() || task->source == Rendezvous().source ||
        (offset->count() == 0) != (world->count() == 0)) {
      fmt::print(stderr,
                 "motley agent: give --rank-offset, --world-size, --master-addr and --master-port, or start "
                 "it as one task a host under srun or mpirun (with MASTER_PORT set){}\n",
                 task.ok() ? "" : ": " + task.status().message());
      return kExitUsage;
    }
    if (offset->count() == 0) {
      options.rank_offset = task->rank * options.nproc;
      options.world_size = task->world_size * options.nproc;
    }
    if (options.master_addr.empty()) options.master_addr = task->master_addr;
    if (options.master_port == 0) options.master_port = task->master_port;
    if (options.master_addr.empty() || options.master_port == 0) {
      fmt::print(stderr,
                 "motley agent: under {} the rendezvous needs MASTER_ADDR and MASTER_PORT (or give "
                 "--master-addr and --master-port)\n",
                 task->source);
      return kExitUsage;
    }
  }
  if (options.rank_offset + options.nproc > options.world_size) {
    fmt::print(stderr,
               "motley agent: ranks {}..{} are not in a world of {} (--rank-offset, --nproc, --world-size)\n",
               options.rank_offset, options.rank_offset + options.nproc - 1, options.world_size);
    return kExitUsage;
  }
  options.command.assign(dashes + 1, args.end());
  return Launch(options) == 0 ? kExitOk : kExitFailure;
}

}  // namespace motley::cli
