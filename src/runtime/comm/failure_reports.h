// Failure reports in the rendezvous store: a rank that ends with an error says so there
// (Communicator::ReportFailure), and every other rank's watchdog reads it within a heartbeat. A rank
// that cannot say so — killed, or stopped with its island — has it said by whoever saw it end: the
// island supervisor, told by its launcher (supervise/launcher.h, LaunchOptions::on_fallen), so that
// the ranks going on count it lost at once instead of after the heartbeat timeout.
#pragma once

#include <cstdint>
#include <memory>
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

/// A rendezvous store hosted outside the ranks (by the supervising `motley train` of live islands):
/// the ranks connect to it as clients (core/rendezvous.h: kStoreByLauncherEnv), and it outlives any
/// of them — the loss of the first island's ranks does not take the others' store with it.
class StoreServer {
 public:
  /// Serves a store on `port` (0: a free one) of every interface.
  static Result<std::unique_ptr<StoreServer>> Start(int port = 0);
  ~StoreServer();
  int port() const { return port_; }

 private:
  struct Impl;
  std::unique_ptr<Impl> impl_;
  int port_ = 0;
};

}  // namespace motley
