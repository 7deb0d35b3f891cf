#include "core/check.h"

#include <cstdio>
#include <cstdlib>

namespace motley::internal {

void CheckFailed(const char* file, int line, const std::string& what) {
  std::fprintf(stderr, "motley: internal check failed at %s:%d: %s\n", file, line, what.c_str());
  std::fflush(stderr);
  std::abort();
}

}  // namespace motley::internal
