// motley launch --nproc N [--master-port P] -- COMMAND [ARGS...]
#include <algorithm>
#include <filesystem>

#include <fmt/format.h>

#include "cli/args.h"
#include "cli/command.h"
#include "cli/launcher.h"

namespace motley::cli {

int RunLaunch(const std::vector<std::string>& args) {
  CLI::App app(
      "Start N local ranks of a command (e.g. motley comm check) with RANK, WORLD_SIZE, LOCAL_RANK, "
      "MASTER_ADDR and MASTER_PORT set, prefix their output, and stop them all when one fails.",
      "motley launch");
  LaunchOptions options;
  app.add_option("--nproc", options.nproc, "ranks to start")->required()->check(CLI::Range(1, 1024));
  app.add_option("--master-port", options.master_port, "rendezvous port (default: a free one)");
  app.add_option("--stop-grace", options.stop_grace_s,
                 "seconds the other ranks get to stop on their own after one fails")
      ->capture_default_str()
      ->check(AtLeast(0));
  app.footer("Everything after -- is the command each rank runs.");
  auto dashes = std::find(args.begin(), args.end(), "--");
  if (dashes == args.end() || dashes + 1 == args.end()) {
    if (std::find(args.begin(), args.end(), "--help") != args.end() ||
        std::find(args.begin(), args.end(), "-h") != args.end())
      return ParseArgs(app, args).value_or(kExitOk);
    fmt::print(stderr, "motley launch: give the command after --, e.g. motley launch --nproc 4 -- motley comm check\n");
    return kExitUsage;
  }
  if (auto rc = ParseArgs(app, std::vector<std::string>(args.begin(), dashes))) return *rc;
  options.command.assign(dashes + 1, args.end());
  if (options.command[0] == "motley") {  // this very binary, wherever it is installed
    std::error_code ec;
    const auto self = std::filesystem::read_symlink("/proc/self/exe", ec);
    if (!ec) options.command[0] = self.string();
  }
  return Launch(options) == 0 ? kExitOk : kExitFailure;
}

}  // namespace motley::cli
