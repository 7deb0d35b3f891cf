#include "cli/torch_helper.h"

#include <unistd.h>

#include <cerrno>
#include <cstdio>
#include <cstring>
#include <filesystem>

#include <fmt/format.h>

#include "cli/command.h"

namespace motley::cli {
namespace fs = std::filesystem;
namespace {

fs::path HelperPath() {
  std::error_code ec;
  const fs::path self = fs::read_symlink("/proc/self/exe", ec);
  return ec ? fs::path() : self.parent_path() / "motley-torch";
}

}  // namespace

bool HaveTorchHelper() {
  std::error_code ec;
  const fs::path helper = HelperPath();
  return !helper.empty() && fs::exists(helper, ec);
}

int ExecTorchHelper(const std::vector<std::string>& args) {
  const fs::path helper = HelperPath();
  if (!HaveTorchHelper()) {
    fmt::print(
        stderr,
        "motley {}: this command runs in 'motley-torch', the build of motley with libtorch, which is missing "
        "beside this executable (build it: ninja -C build motley-torch)\n",
        args.empty() ? std::string() : args.front());
    return kExitFailure;
  }
  std::vector<std::string> argv_s = {"motley"};
  argv_s.insert(argv_s.end(), args.begin(), args.end());
  std::vector<char*> argv;
  for (auto& a : argv_s) argv.push_back(a.data());
  argv.push_back(nullptr);
  std::fflush(stdout);
  std::fflush(stderr);
  ::execv(helper.c_str(), argv.data());
  fmt::print(stderr, "motley: cannot run {}: {}\n", helper.string(), std::strerror(errno));
  return kExitFailure;
}

}  // namespace motley::cli
