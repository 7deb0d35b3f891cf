// RunGuarded: the last line of defence around a process's work (command.h).
#include <exception>
#include <new>

#include <fmt/format.h>

#include "cli/command.h"

namespace motley::cli {

int RunGuarded(const char* program, const std::function<int()>& body) {
  try {
    return body();
  } catch (const std::bad_alloc&) {
    fmt::print(stderr,
               "{}: out of host memory: the input asks for more than this machine has (a count or size far "
               "larger than the job needs?). Check the numbers in the files and flags given.\n",
               program);
  } catch (const std::exception& e) {
    fmt::print(stderr, "{}: {}\n", program, e.what());
  } catch (...) {
    fmt::print(stderr, "{}: failed with an unknown error\n", program);
  }
  return kExitFailure;
}

}  // namespace motley::cli
