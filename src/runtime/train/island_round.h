// One outer round of a run across islands on one rank (plan/outer_round.h), as the round's schedule
// has its ops: each piece's pseudo-gradient averaged with the other islands' — rank to rank, or by
// whole fragments where the islands' shapes differ — the outer step on it, and where the replicas keep
// full parameters, their gather. A round that overlaps inner steps (Schedule::outer_overlap_steps) is
// sent (SendRound: its exchanges, on a thread of their own over the islands' world, while the island
// trains on with its own) and lands later (LandRound: the outer steps and gathers, each piece keeping
// what it learnt since it was sent: OuterOptimizer::StepPiece). A streaming fragment's round
// (Schedule::outer_fragment) does the same on each piece's values of the fragment, copied out of the
// piece (RoundPieces) and written back after the outer step (PutRoundPiece).
#pragma once

#include <chrono>
#include <map>
#include <memory>
#include <thread>
#include <vector>

#include <torch/torch.h>

#include "core/status.h"
#include "plan/schedule.h"
#include "runtime/comm/communicator.h"
#include "runtime/emulation/device_emulation.h"
#include "runtime/executor/executor.h"
#include "runtime/islands/outer_optimizer.h"

namespace motley {

// This rank's island and the ranks of the other islands that hold what it holds (one group a
// position, every rank making all of them in the same order; islands of like shapes only).
struct IslandPlace {
  int island = 0, local_rank = 0;
  int first_ministage = 0;                // where the island's ministages begin in the round's table
  bool whole_fragments = false;           // unlike shapes: the round exchanges whole fragments
  std::unique_ptr<Communicator> root;     // every launched rank
  std::unique_ptr<Communicator> meeting;  // live islands, once one is lost: the ranks of those meeting
  Communicator* outer = nullptr;          // the ranks of the islands meeting: root's, or meeting's
  std::unique_ptr<Communicator> own;      // this island's ranks
  CommGroup* across = nullptr;            // the matching ranks of every island (like shapes)
  // Each outer round's collectives' groups (null: not a member), by the round's streaming fragment.
  std::vector<std::vector<CommGroup*>> round_groups;
  CommGroup* GroupOf(const Schedule& round, int32_t collective) const {
    return round_groups.at(static_cast<size_t>(round.outer_fragment)).at(static_cast<size_t>(collective));
  }
};

// What one outer round did on this rank (its lead rank's go to the metrics).
struct RoundReport {
  double seconds = 0;            // the island's time on the round, wall clock (with emulated links: as long
                                 // as theirs); an overlapped round's: what it waited for, and the landing
  double exchange_s = 0;         // an overlapped round's exchange, sent to landed (0: not overlapped)
  double bytes_sent = 0;         // this rank's pseudo-gradients as sent (compressed)
  double compression_error = 0;  // the largest relative error of a piece's compression
};

/// This rank's pieces of the round: one an outer step of its program (`rank`'s), in order (the outer
/// optimizer's), by the island's own ministage. A streaming fragment's round (Schedule::outer_fragment):
/// each piece's values of the fragment, copied out (PutRoundPiece writes them back); else views.
Result<std::vector<torch::Tensor>> RoundPieces(const Schedule& round, int rank, int first_ministage,
                                               Executor& executor);
/// A streaming fragment's piece of ministage `v` (RoundPieces') back into the ministage's values.
Status PutRoundPiece(const Schedule& round, int v, const torch::Tensor& values, Executor& executor);
/// Ministage `v`'s piece (OuterPiece's layout, zeros elsewhere) from a fragment's piece of it, and back.
torch::Tensor SpreadRoundPiece(const Schedule& round, int v, const torch::Tensor& values, Executor& executor);
torch::Tensor TakeRoundPiece(const Schedule& round, int v, const torch::Tensor& whole, Executor& executor);

/// A round the islands wait for: every op of this rank's program, in order.
Result<RoundReport> OuterRound(IslandPlace& place, const Schedule& round, OuterOptimizer& outer,
                               Executor& executor, const DeviceEmulation& emulation, double tokens);

/// An overlapped round between its sending and its landing.
class RoundInFlight;
struct RoundInFlightDeleter {
  void operator()(RoundInFlight* flight) const;  // waits for the exchange first
};
using RoundInFlightPtr = std::unique_ptr<RoundInFlight, RoundInFlightDeleter>;

/// Takes every piece's pseudo-gradient now and starts the exchange of them (`tokens`: the island's
/// tokens since the last round, their weight). The island's steps until LandRound must not touch
/// `place.outer`.
Result<RoundInFlightPtr> SendRound(IslandPlace& place, const Schedule& round, OuterOptimizer& outer,
                                   Executor& executor, const DeviceEmulation& emulation, double tokens);
/// Waits for the exchange and lands the round: the outer step of each piece, and the gathers.
Result<RoundReport> LandRound(RoundInFlightPtr flight, OuterOptimizer& outer, Executor& executor);

}  // namespace motley
