// motley launch (--nproc N | --hosts H1:N1,H2:N2 [--remote "ssh {host}"]) [--master-port P] -- COMMAND
// [ARGS...]
#include <algorithm>
#include <filesystem>

#include <fmt/format.h>

#include "cli/args.h"
#include "cli/command.h"
#include "supervise/launcher.h"

namespace motley::cli {

int RunLaunch(const std::vector<std::string>& args) {
  CLI::App app(
      "Start N local ranks of a command (e.g. motley comm check), or ranks on several hosts, with RANK, "
      "WORLD_SIZE, "
      "LOCAL_RANK, MASTER_ADDR and MASTER_PORT set, prefix their output, and stop them all when one fails.",
      "motley launch");
  LaunchOptions options;
  std::string hosts;
  auto* nproc =
      app.add_option("--nproc", options.nproc, "ranks to start on this machine")->check(CLI::Range(1, 1024));
  auto* hosts_opt =
      app.add_option("--hosts", hosts,
                     "ranks on several hosts: NAME:RANKS,... (e.g. node1:4,node2:4), numbered host by "
                     "host; the rendezvous is on the first");
  nproc->excludes(hosts_opt);
  app.add_option(
         "--remote", options.remote,
         "how a host's ranks start: these words ({host}, {index} replaced), then one shell command line; "
         "for network-namespace hosts: --remote \"ip netns exec NAME{index} sh -c\"")
      ->capture_default_str();
  app.add_option("--master-addr", options.master_addr,
                 "the rendezvous address the ranks reach (default: 127.0.0.1, or the first of --hosts)");
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
    fmt::print(
        stderr,
        "motley launch: give the command after --, e.g. motley launch --nproc 4 -- motley comm check\n");
    return kExitUsage;
  }
  if (auto rc = ParseArgs(app, std::vector<std::string>(args.begin(), dashes))) return *rc;
  if (hosts.empty() && nproc->count() == 0) {
    fmt::print(stderr, "motley launch: give --nproc N (ranks on this machine) or --hosts NAME:RANKS,...\n");
    return kExitUsage;
  }
  if (!hosts.empty()) {
    Result<std::vector<LaunchHost>> parsed = ParseLaunchHosts(hosts);
    if (!parsed.ok()) {
      fmt::print(stderr, "motley launch: {}\n", parsed.status().message());
      return kExitUsage;
    }
    options.hosts = std::move(*parsed);
    if (options.remote.find_first_not_of(' ') == std::string::npos) {
      fmt::print(stderr,
                 "motley launch: --remote is empty; give the command that starts a rank on a host, e.g. "
                 "\"ssh {{host}}\"\n");
      return kExitUsage;
    }
  }
  options.command.assign(dashes + 1, args.end());
  if (options.command[0] == "motley") {  // this very binary, wherever it is installed
    std::error_code ec;
    const auto self = std::filesystem::read_symlink("/proc/self/exe", ec);
    if (!ec) options.command[0] = self.string();
  }
  return Launch(options) == 0 ? kExitOk : kExitFailure;
}

}  // namespace motley::cli
