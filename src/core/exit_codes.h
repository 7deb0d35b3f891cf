// The exit codes every motley process shares: the commands, the ranks and the launchers that read
// them (a launcher blames the rank that failed, not one that stopped because another did).
#pragma once

namespace motley {

constexpr int kExitOk = 0;
constexpr int kExitFailure = 1;  // the command ran and found a problem (invalid file, OOM plan)
constexpr int kExitUsage = 2;    // the command line itself is wrong
/// A rank stopped because another failed or died (its watchdog: runtime/comm/communicator.cc).
constexpr int kExitPeerFailed = 3;

}  // namespace motley
