// The outer round of a run across islands (docs/design.md, "Islands"): every H inner steps each
// island's ranks average their pieces' pseudo-gradients with the matching ranks of the other islands
// and take an outer step. Lowered, like a step, to ops (schedule.h) — the simulator times them and
// the runtime runs them (runtime/train/planned_islands.cc follows these ops and nothing else).
//
// Ranks: island i's rank r is rank first_rank[i] + r of the round (the islands one after another, as
// a launcher starts them). A rank's piece of a ministage is what it updates: its ZeRO shard, or with
// ZeRO-0 (every replica holds every value) an even 1/dp part of the parameters, so no rank exchanges
// a whole replica and the slow link carries each value once an island. For each ministage a rank
// updates, in order:
//   outer_reduce  the piece's pseudo-gradient averaged with the same piece on every island: an
//                 all-reduce in the master precision, or (compressed) an all-gather of each
//                 island's fp16 / int8 piece;
//   outer_step    SGD with Nesterov momentum on the piece (its anchor and momentum: the rank's
//                 static state, Program::static_device_bytes, held through the inner steps too);
//   all_gather    where the replicas keep the full parameters between steps (ZeRO 0-2 without
//                 offload): the island's replicas exchange their new pieces.
// Each op waits for the one before it: the runtime runs them one after another.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "core/status.h"
#include "plan/schedule.h"

namespace motley {

struct OuterRoundOptions {
  std::string compression = "none";  // OuterConfig::compression: "none", "fp16", "int8"
  double master_bytes = 4;           // a master value's bytes: fp32 4, fp64 8
};

/// Bytes a value takes on the link between islands under `compression` (an int8 piece's scale aside).
double OuterWireBytesPerValue(const std::string& compression, double master_bytes);

/// The round of islands whose step schedules are `islands` (every one of the same shape: as many
/// ranks, each updating the same ministages). Its programs are every island's ranks in turn.
Result<Schedule> LowerOuterRound(const std::vector<const Schedule*>& islands,
                                 const OuterRoundOptions& options);

/// The rank of island `island`'s rank `local` in a round of islands of `ranks_each` ranks.
inline int32_t RoundRank(int island, int local, int ranks_each) { return island * ranks_each + local; }

}  // namespace motley
