// Failure reports in the rendezvous store: a rank that ends with an error says so there
// (Communicator::ReportFailure), and every other rank's watchdog reads it within a heartbeat. A rank
// that cannot say so — killed, or stopped with its island — has it said by whoever saw it end: the
// island supervisor, told by its launcher (supervise/launcher.h, LaunchOptions::on_fallen), so that
// the ranks going on count it lost at once instead of after the heartbeat timeout.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include <fmt/format.h>

#include "core/status.h"

namespace motley {

inline std::string FailuresKey() { return "motley/failures"; }  // how many failures were reported
inline std::string FailureKey(int64_t n) { return fmt::format("motley/failure/{}", n); }  // the n-th, from 1
/// A report's text (what ReportedFailure parses back): "rank R failed first: WHY".
inline std::string FailureText(int rank, const std::string& why) {
  return fmt::format("rank {} failed first: {}", rank, why);
}

/// Reports, in the store at `master_addr`:`master_port`, that each of `ranks` failed (`why`, the
/// same for all) on its behalf. Fails (naming the store) when the store cannot be reached within
/// `timeout_s`.
Status ReportFailuresOf(const std::string& master_addr, int master_port, const std::vector<int>& ranks,
                        const std::string& why, double timeout_s = 5);

}  // namespace motley
