// The `motley` executable links no libtorch, so the commands that plan, simulate and check files
// start at once; the commands that run tensors (train, eval, profile, comm) are the same program
// built with libtorch, `motley-torch` beside it, which `motley` runs in its place (execv: the same
// process, arguments, environment and exit code).
#pragma once

#include <string>
#include <vector>

namespace motley::cli {

/// Replaces this process with `motley-torch` beside this executable, running `args` (the command
/// line after the program name). Returns only when that fails: the exit code to return.
int ExecTorchHelper(const std::vector<std::string>& args);

/// Whether `motley-torch` is beside this executable.
bool HaveTorchHelper();

}  // namespace motley::cli
