// motley: plan and run LLM training on heterogeneous GPU clusters.
// The main flow: find the subcommand in the table (commands.cc) and hand it the rest of the line.
#include <cstdio>
#include <string>
#include <vector>

#if defined(__GLIBC__)
#include <malloc.h>
#endif
#if defined(__GLIBC__) && !defined(MOTLEY_WITH_TORCH)
#include <unistd.h>

#include <cstdlib>
#include <cstring>
#endif

#include <fmt/format.h>

#include "cli/command.h"
#include "cli/torch_helper.h"
#include "cli/version.h"
#include "core/suggest.h"

namespace motley::cli {
namespace {

void PrintUsage() {
  fmt::print("motley {} - plan and run LLM training on heterogeneous GPU clusters\n\n", Version());
  fmt::print("Usage: motley <command> [flags]   (motley <command> --help for its flags)\n\nCommands:\n");
  for (const auto& c : Commands()) fmt::print("  {:<10}  {}\n", c.name, c.help);
  fmt::print("\nGlobal flags:\n  --help      this text\n  --version   motley's version and its libtorch\n");
}

int Main(const std::vector<std::string>& args) {
  if (args.empty() || args[0] == "--help" || args[0] == "-h" || args[0] == "help") {
    PrintUsage();
    return kExitOk;
  }
  if (args[0] == "--version" || args[0] == "version") {
#ifdef MOTLEY_TORCH_HELPER
    if (HaveTorchHelper()) return ExecTorchHelper(args);  // it names its libtorch
#endif
    fmt::print("{}\n", VersionLine());
    return kExitOk;
  }
  for (const auto& c : Commands()) {
    if (c.name == args[0]) return c.run(std::vector<std::string>(args.begin() + 1, args.end()));
  }
  std::vector<std::string> names;
  for (const auto& c : Commands()) names.emplace_back(c.name);
  if (args[0].starts_with("-")) {
    fmt::print(stderr, "motley: unknown flag '{}'{} Run 'motley --help' for the commands.\n", args[0],
               DidYouMeanOrPeriod(args[0], std::vector<std::string>{"--help", "--version"}));
  } else {
    fmt::print(stderr, "motley: unknown command '{}'{} Commands: {}\n", args[0],
               DidYouMeanOrPeriod(args[0], names), JoinNames(names));
  }
  return kExitUsage;
}

#if defined(__GLIBC__) && !defined(MOTLEY_WITH_TORCH)
// The commands that lower and simulate schedules by the dozen (the planner's candidates).
bool Plans(int argc, char** argv) {
  if (argc < 2) return false;
  for (const char* name : {"plan", "simulate", "schedule"})
    if (std::strcmp(argv[1], name) == 0) return true;
  return false;
}

// Their memory comes in huge pages: glibc reads this switch (`glibc.malloc.hugetlb=1`: transparent
// huge pages for the heap) only from the environment at start, so the process starts itself again
// once with it. On Zorse's C, `motley plan` took 30k page faults without it and ~760 with it, and
// 0.81x the wall time (seven paired runs). Where the kernel has no transparent huge pages it changes
// nothing; where the exec fails the command runs as it is.
void RestartWithHugePages(char** argv) {
  const char* tunables = std::getenv("GLIBC_TUNABLES");
  if (tunables != nullptr && std::strstr(tunables, "glibc.malloc.hugetlb") != nullptr)
    return;  // set (by us or the user)
  std::string value = "glibc.malloc.hugetlb=1";
  if (tunables != nullptr && *tunables != '\0') value = std::string(tunables) + ":" + value;
  if (::setenv("GLIBC_TUNABLES", value.c_str(), 1) != 0) return;
  ::execv("/proc/self/exe", argv);  // returns only if it failed
}
#endif

}  // namespace
}  // namespace motley::cli

int main(int argc, char** argv) {
#if defined(__GLIBC__) && !defined(MOTLEY_WITH_TORCH)
  if (motley::cli::Plans(argc, argv)) motley::cli::RestartWithHugePages(argv);
  // Planning lowers, simulates and frees schedules of tens of megabytes by the dozen. glibc maps
  // large blocks and unmaps them on free, so each lowering faulted its memory in anew (a quarter
  // of `motley plan`'s time in the kernel on Zorse's C); kept in the heap, they are reused.
  mallopt(M_MMAP_THRESHOLD, 256 << 20);
  mallopt(M_TRIM_THRESHOLD, 512 << 20);
  mallopt(M_TOP_PAD, 64 << 20);
#elif defined(__GLIBC__)
  // A rank allocates and frees the same activations and gradients every step. With glibc's
  // defaults blocks of a few hundred KB were mapped and unmapped, and the heap's top handed back,
  // so every step faulted its pages in anew: on CPU ranks twice the page faults a run and 8-20% of
  // the step (the FlexTP bench's team, paired, bench/reports/flextp_stragglers.md, session 73). Kept in
  // the heap, they are reused. Blocks over 32 MiB (weights being loaded, checkpoint buffers) still
  // go back to the system when freed. All three together: a trim threshold alone fixes the mmap
  // threshold at its 128 KiB default, and the step ran 3x slower.
  mallopt(M_MMAP_THRESHOLD, 32 << 20);
  mallopt(M_TRIM_THRESHOLD, 256 << 20);
  mallopt(M_TOP_PAD, 16 << 20);
#endif
  const std::vector<std::string> args(argv + 1, argv + argc);
  return motley::cli::RunGuarded("motley", [&] { return motley::cli::Main(args); });
}
