// The training state a rank holds — parameters, gradients, AdamW moments — at each ZeRO stage,
// and the buffer Gloo's missing reduce-scatter costs: one formula each, used by the lowering
// (each rank's static memory), the planners' memory models and `motley describe`.
#pragma once

#include "core/precision.h"

namespace motley {

/// Where a ministage's shard and moments live between visits (offload_params).
enum class StatePlacement {
  kDevice,         // no offload: as the ZeRO stage says
  kResidentShard,  // offload, a ministage kept on the device: its shard and moments only
  kHost,           // offload: shard and moments on the host, brought in per visit
};

struct RankStateBytes {
  double device = 0;
  double host = 0;
};

/// What one rank of `dp` data-parallel replicas holds for `params` parameters (its share after
/// tensor parallelism) at `zero_stage`, at rest: ZeRO-0 everything; ZeRO-1 the moments sharded;
/// ZeRO-2 the gradients too; ZeRO-3 the parameters too. Full parameters gathered for a visit and
/// gradients being accumulated come on top (the schedule's ops).
RankStateBytes ZeroStateBytes(double params, double dp, int zero_stage, Precision precision,
                              StatePlacement placement = StatePlacement::kDevice);

/// Gloo has no reduce-scatter: motley runs one as an all-to-all into a buffer as large as the
/// gradients, held while it runs (emulated CPU ranks, groups of two or more); none on NCCL.
double GlooReduceScatterBytes(double full_grad_bytes, int group_size, bool gloo);

}  // namespace motley
