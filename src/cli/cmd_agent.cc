// motley agent --nproc N --rank-offset R --world-size W --master-addr A --master-port P -- COMMAND
// One host's part of a launch across hosts: started there by `motley launch --hosts` (through its
// remote-start command) or as one task a host by srun / mpirun, it starts the host's ranks, reports
// each one's end on stdout, and stops them when its launcher says "stop" or is gone.
#include <algorithm>

#include <fmt/format.h>

#include "cli/args.h"
#include "cli/command.h"
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
  app.add_option("--rank-offset", options.rank_offset, "the global rank of this host's first rank")
      ->required()
      ->check(CLI::Range(0, 1 << 20));
  app.add_option("--world-size", options.world_size, "ranks on every host together")
      ->required()
      ->check(CLI::Range(1, 1 << 20));
  app.add_option("--master-addr", options.master_addr, "the rendezvous address")->required();
  app.add_option("--master-port", options.master_port, "the rendezvous port")
      ->required()
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
