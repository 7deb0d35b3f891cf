// How ranks ended, as waitpid statuses: described for people, judged failed or not, and the one
// rank a failed run is blamed on — shared by the local launcher, a host's agent and the launcher
// across hosts (which learns its ranks' statuses from the agents). Torch-free.
#pragma once

#include <optional>
#include <string>
#include <vector>

namespace motley {

/// "exited with code N", "was killed by signal N (NAME)".
std::string DescribeExit(int status);

/// Whether a rank that ended so failed (any signal, or a nonzero exit code).
bool ExitFailed(int status);

/// The rank to blame for a failed run: one killed by a signal the launcher did not send (a rank
/// that died: the others' errors follow from it, whatever they exit with — under load a survivor
/// may give up before it can tell a peer died), else the first to fail of its own accord, not one
/// that stopped because another failed (exit code kExitPeerFailed) — such a rank may exit first.
/// `status[r]` is rank r's status (every rank in `failed_order` has one), `stopped_by_us[r]`
/// whether it ended after the launcher began stopping the ranks.
int BlameRank(const std::vector<std::optional<int>>& status, const std::vector<bool>& stopped_by_us,
              const std::vector<int>& failed_order, int first_failure);

}  // namespace motley
