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
//
// Islands of unlike shapes (other rank counts, stages, ZeRO stages or tensor-parallel widths) hold no
// matching pieces: they exchange the model in fragments — the embedding, each decoder layer, the final
// norm and head — each whole through one lead rank an island (the leads spread over the ranks that hold
// it), in fragment order:
//   all_reduce    the island's holders of the fragment sum their pieces of its pseudo-gradient, each
//                 whole-shaped with zeros where another rank holds the value (one holder: none);
//   outer_reduce  the leads of every island average the fragment (as above: whole, not a piece);
//   all_reduce    the lead hands the average back to the island's holders (the others add zeros);
// and once a rank's ministage has all its fragments, outer_step on its piece (and the replicas' gather).
// Each value still crosses the slow link once an island; a rank holds one fragment whole at a time.
//
// With streaming fragments (OuterRoundOptions::fragments = F; Streaming DiLoCo) a round is lowered for
// each fragment: the model's parts numbered k mod F (ModelPartOf). Its ops are the ones above, each on
// the fragment's values of the piece (a ministage's, or a whole fragment's where shapes differ), and a
// ministage that holds none of the fragment has none. A piece's values in the fragment are estimated
// as the ministage's share of them (a shard's boundaries do not follow the parts): the simulator's
// figure; the runtime exchanges exactly the fragment's values. The replicas' gather moves their whole
// pieces (the other fragments' values in them are alike on every replica).
//
// A round that overlaps the islands' next inner steps (OuterRoundOptions::overlap_steps, Streaming
// DiLoCo's overlap) orders each rank's program in two parts: every exchange (the outer_reduce ops and
// the fragments' all_reduce ops) first, sent at the round's end while the island trains on, then every
// outer_step and all_gather, which land `overlap_steps` steps later. Each rank then holds, through
// those steps, its pseudo-gradients as sent (the averages arrive into them) and its pieces' values
// when sent: twice its pieces more static memory.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "core/status.h"
#include "plan/schedule.h"

namespace motley {

struct OuterRoundOptions {
  std::string compression = "none";  // OuterConfig::compression: "none", "fp16", "int8", "int4"
  double master_bytes = 4;           // a master value's bytes: fp32 4, fp64 8
  // Islands of unlike shapes exchange fragments whole: their sizes (core/model.h), from the model.
  int64_t embedding_values = 0;  // EmbeddingParams
  int64_t layer_values = 0;      // ParamsPerLayer
  int64_t head_values = 0;       // HeadParams
  int32_t num_layers = 0;
  bool tied_embeddings = false;  // a tied model: the head's copy of the embedding takes its average
  int64_t overlap_steps = 0;     // IslandsConfig::overlap_steps (Schedule::outer_overlap_steps)
  // Streaming fragments (IslandsConfig::fragments; the fragment sizes above needed when > 1): the round
  // of fragment `fragment` of `fragments` (Schedule::outer_fragment).
  int32_t fragments = 1;
  int32_t fragment = 0;
};
/// OuterRoundOptions' fragment sizes from a model.
struct ModelSpec;
void SetFragmentSizes(const ModelSpec& model, OuterRoundOptions& options);

/// Where each island sits in a round: its first rank, and where its ministages begin in the round's
/// table (the round's ops name them so).
struct OuterRoundLayout {
  std::vector<int32_t> first_rank;
  std::vector<int32_t> first_ministage;
  bool whole_fragments = false;  // unlike shapes: fragments exchanged whole through a lead an island
};

/// Bytes a value takes on the link between islands under `compression` (an int8 piece's scale aside; int4's
/// block scales counted).
double OuterWireBytesPerValue(const std::string& compression, double master_bytes);

/// The round of islands whose step schedules are `islands`: rank to rank where every one has the same
/// shape (as many ranks, each updating the same ministages), else by whole fragments (the fragment
/// sizes in `options` needed). Its programs are every island's ranks in turn; `layout` where they are.
Result<Schedule> LowerOuterRound(const std::vector<const Schedule*>& islands,
                                 const OuterRoundOptions& options, OuterRoundLayout* layout = nullptr);

/// Every streaming fragment's round (OuterRoundOptions::fragments of them; fragment k's the k-th), in
/// the order a round of the clock takes them: fragment k meets (k + 1) H / F steps into it.
Result<std::vector<Schedule>> LowerOuterRounds(const std::vector<const Schedule*>& islands,
                                               const OuterRoundOptions& options,
                                               OuterRoundLayout* layout = nullptr);

/// The rank of island `island`'s rank `local` in a round of islands of `ranks_each` ranks each.
inline int32_t RoundRank(int island, int local, int ranks_each) { return island * ranks_each + local; }

}  // namespace motley
