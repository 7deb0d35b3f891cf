// Live islands (`motley train --island-plan ... --max-restarts N`: supervise/island_supervisor.h): an
// island whose rank is lost is left out of the outer loop without stopping the others — the first
// island too, since the rendezvous store is the supervisor's, not a rank's. At every meeting of the
// outer loop a lead — the first rank of the first island present none of whose ranks is lost, so that
// another takes over when the lead's island is lost — says which islands meet: those none of whose
// ranks is lost (its heartbeat stopped, or it reported a failure: Communicator::Tolerate), once every
// rank of theirs has come to the meeting or been lost (a rank that died since the last meeting never
// comes: the lead waits until its launcher reports it, runtime/comm/failure_reports.h, or out the
// heartbeat timeout); and the clock step at which the islands left stop with a checkpoint so that
// the lost ones join again from it (the first round's end at least `rejoin_steps` after the last
// meeting a lost island took part in). The lead's word is written once (two that both took the lead
// write one word: the first's), and every rank reads it from the store, so all agree. A loss during a
// round's exchange is not survived here (its ranks fail, and the supervisor restarts the islands left
// from the newest checkpoint).
#pragma once

#include <cstdint>
#include <vector>

#include "core/status.h"
#include "runtime/comm/communicator.h"

namespace motley {

/// What the lead said of one meeting.
struct IslandMeeting {
  std::vector<int> present;   // the islands that meet, in order
  std::vector<int> left_out;  // ... and those left out at this meeting for the first time
  int64_t stop_at_step = 0;   // where the islands left stop for the lost to join again (0: none)
};

class IslandMembership {
 public:
  /// `root`: every launched rank; `ranks_of_island[i]`: island i's ranks in it (empty: not launched);
  /// `present`: the islands launched, in order; `from_step`: the clock step the launch starts at;
  /// `inner_steps`: a round's length (H); `clock_steps`: the run's end.
  IslandMembership(Communicator& root, std::vector<std::vector<int>> ranks_of_island,
                   std::vector<int> present, int64_t from_step, int64_t rejoin_steps, int64_t inner_steps,
                   int64_t clock_steps);
  /// The meeting at clock step `clock` (every rank calls it at every meeting, in the same order).
  Result<IslandMeeting> At(int64_t clock);

 private:
  /// The lead in this rank's view: the first rank of the first island present none of whose ranks is
  /// lost (-1: none).
  int Lead();
  /// The lead's word on meeting `key` at `clock`.
  Result<IslandMeeting> Chair(const std::string& key, int64_t clock, int lead);

  Communicator& root_;
  std::vector<std::vector<int>> ranks_of_island_;
  std::vector<int> present_;
  int64_t last_met_, rejoin_steps_, inner_steps_, clock_steps_;
  int64_t meetings_ = 0, stop_at_step_ = 0;
};

}  // namespace motley
