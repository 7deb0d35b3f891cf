#include "supervise/rank_exits.h"

#include <sys/wait.h>

#include <algorithm>
#include <cstring>

#include <fmt/format.h>

#include "core/exit_codes.h"

namespace motley {

std::string DescribeExit(int status) {
  if (WIFEXITED(status)) return fmt::format("exited with code {}", WEXITSTATUS(status));
  if (WIFSIGNALED(status))
    return fmt::format("was killed by signal {} ({})", WTERMSIG(status), strsignal(WTERMSIG(status)));
  return "stopped";
}

bool ExitFailed(int status) { return !WIFEXITED(status) || WEXITSTATUS(status) != 0; }

int BlameRank(const std::vector<std::optional<int>>& status, const std::vector<bool>& stopped_by_us,
              const std::vector<int>& failed_order, int first_failure) {
  auto killed = [&](int r) { return WIFSIGNALED(*status[r]) && !stopped_by_us[r]; };
  const auto died = std::find_if(failed_order.begin(), failed_order.end(), killed);
  if (died != failed_order.end()) return *died;
  for (int r : failed_order) {
    const int st = *status[r];
    if (!(WIFEXITED(st) && WEXITSTATUS(st) == kExitPeerFailed)) return r;
  }
  return first_failure;
}

}  // namespace motley
