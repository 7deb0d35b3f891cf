// Schedule: a Plan lowered to one op program per rank — the contract between planning and
// execution (docs/design.md, "The schedule contract"). The simulator runs it against cost models; the runtime
// runs it with tensors. Every op names its stream, its work (FLOPs or bytes), its memory effects and the ops
// of the same rank it waits for; ranks synchronise only through matched send/recv pairs and collectives.
#pragma once

#include <cstdint>
#include <string>
#include <string_view>
#include <vector>

#include <nlohmann/json.hpp>

#include "core/compact_vector.h"

namespace motley {

enum class OpKind : uint8_t {
  kForward,        // forward of a ministage's layers on one microbatch
  kBackward,       // backward of the same (recomputing the forward first with checkpointing)
  kAllGather,      // parameters of some layers, over the rank's group
  kReduceScatter,  // gradients of some layers, over the rank's group
  kAllReduce,      // gradients of some layers, over the rank's group (ZeRO-0)
  kSend,           // an activation (forward) or its gradient (backward) to another rank
  kRecv,           // the matching receive
  kParamOffload,   // parameter shard of a ministage, device -> host
  kParamPrefetch,  // parameter shard of a ministage, host -> device
  kActOffload,     // a layer-boundary activation, device -> host
  kActPrefetch,    // the same, host -> device, before its backward
  kOptimizerStep,  // AdamW on the rank's shard of a ministage
  kGradNorm,  // gradient clipping: the global gradient norm (and the step's loss), summed over every rank
  // An outer round of islands (plan/outer_round.h), every H inner steps:
  kOuterReduce,  // a piece's pseudo-gradient averaged with the same piece on every other island
  kOuterStep,    // the outer optimizer (SGD with Nesterov momentum) on that piece
};
std::string_view OpKindName(OpKind kind);
/// The collectives: every member rank has one op naming the same Schedule::collectives entry.
constexpr bool IsCollective(OpKind kind) {
  return kind == OpKind::kAllGather || kind == OpKind::kReduceScatter || kind == OpKind::kAllReduce ||
         kind == OpKind::kGradNorm || kind == OpKind::kOuterReduce;
}
/// Forward, backward and the optimizer steps: the ops that compute (the others move data).
constexpr bool IsCompute(OpKind kind) {
  return kind == OpKind::kForward || kind == OpKind::kBackward || kind == OpKind::kOptimizerStep ||
         kind == OpKind::kOuterStep;
}

/// An optimizer step's `flops` are this many per parameter of the shard it updates (AdamW:
/// moments, bias correction, decay, the write).
constexpr double kAdamFlopsPerParam = 12;

/// What a rank holds between ops: the buffers ops read, write and free. Executors keep exactly
/// these (the runtime as tensors, the recording fake as names) and free them where the op says.
enum class BufferKind : uint8_t {
  kParams,      // a ministage's full parameters (its flat buffer; this rank's slices with TP)
  kShard,       // this rank's shard of them (ZeRO >= 1; with offload between visits on the host)
  kMoments,     // the shard's AdamW moments (with offload, brought in only for a backward visit)
  kGrads,       // the ministage's full gradients, accumulated over microbatches
  kGradShard,   // this rank's reduced shard of them (ZeRO >= 1)
  kInput,       // the ministage's input activation for a microbatch (received or made here)
  kOutputGrad,  // the gradient of the ministage's output for a microbatch
  kSaved,       // what a forward keeps for its backward: the layer boundaries, or the graph
  kHostSaved,   // the same, offloaded to host memory
};
std::string_view BufferKindName(BufferKind kind);
struct Buffer {
  BufferKind kind = BufferKind::kParams;
  int16_t ministage = -1;   // index into Schedule::ministages (a plan has fewer than its layers)
  int32_t microbatch = -1;  // activations: the global microbatch
  auto operator<=>(const Buffer&) const = default;
};
std::string BufferName(const Buffer& b);  // e.g. "input(ms2, mb5)"

/// Ops on one stream of a rank run in program order; different streams overlap.
enum class Stream : uint8_t { kCompute, kComm, kH2D, kD2H };
std::string_view StreamName(Stream s);
constexpr int kNumStreams = 4;

/// Copies between the device and the host (on the h2d and d2h streams).
constexpr bool IsHostCopy(OpKind kind) {
  return kind == OpKind::kParamPrefetch || kind == OpKind::kParamOffload || kind == OpKind::kActPrefetch ||
         kind == OpKind::kActOffload;
}

/// Where executors queue an op: its stream, except that activation copies have a lane of their own
/// beside the parameters' in each direction (lanes kNumStreams, kNumStreams + 1: h2d, d2h), so a
/// microbatch's boundary does not wait behind a ministage's state. Both lanes of a direction share
/// the host link.
constexpr int kNumLanes = kNumStreams + 2;
struct Op;
int LaneOf(const Op& op);
std::string_view LaneName(int lane);

// An op's dependencies and buffers: a few each, kept inside the op (a schedule of a thousand
// ranks holds millions of ops, and the planner lowers hundreds of schedules).
using OpDeps = CompactVector<int32_t, 5>;  // a backward waits for up to five
using Buffers = CompactVector<Buffer, 3>;  // a backward reads three

struct Op {
  // Moves are noexcept, so that a growing vector of ops moves them rather than copying every one.
  Op() = default;
  Op(const Op&) = default;
  Op& operator=(const Op&) = default;
  Op(Op&&) noexcept = default;
  Op& operator=(Op&&) noexcept = default;

  // Fields in an order that leaves no padding (208 bytes with the lists; a static_assert below):
  // small ones first, the doubles last.
  OpKind kind = OpKind::kForward;
  Stream stream = Stream::kCompute;
  bool embedding = false;  // compute/params also cover the embedding (first ministage)
  bool head = false;       // ... the final norm and LM head (last ministage)
  // Backward: the ministage's gradients are read (reduced or applied) before another backward adds
  // to them — the end of a run of backwards (FlexTP returns borrowed units' gradients here).
  bool gradients_complete = false;
  int16_t ministage = -1;   // index into Schedule::ministages; -1 if none (the lowering checks the range)
  int16_t tp_degree = 1;    // compute: the op's layers are split over this many tensor-parallel ranks
  int32_t layer_begin = 0;  // decoder layers [layer_begin, layer_end) the op touches
  int32_t layer_end = 0;
  int32_t microbatch = -1;  // pipelines: global microbatch index; data parallelism: local index
  int32_t peer = -1;        // send/recv: the other rank
  int32_t collective = -1;  // collectives: index into Schedule::collectives
  int32_t sequences = 0;    // sequences in the microbatch (compute, activation transfers)
  OpDeps deps;              // ops of this rank (indices) that must finish first

  // What the op does to this rank's buffers. A buffer is read and written only while it is held
  // (written before, not freed since); `frees` are its last use here.
  Buffers reads, writes, frees;

  double flops = 0;   // compute ops: floating-point operations executed
  double bytes = 0;   // transfers: bytes this rank sends/receives/copies; collectives: payload
  int64_t tag = 0;    // send/recv: names the transfer (unique per pair and step; message_tags.h)
  double params = 0;  // optimizer step: parameters in the shard it updates

  // Memory effects on this rank, in bytes: allocated when the op starts, freed when it ends.
  double device_alloc_bytes = 0;
  double device_free_bytes = 0;
  double host_alloc_bytes = 0;
  double host_free_bytes = 0;
};
static_assert(sizeof(Op) <= 208, "an op's fields are laid out without padding; keep them so");

/// One instance of a collective: every member rank has exactly one op naming it.
struct Collective {
  OpKind kind = OpKind::kAllGather;
  std::vector<int32_t> ranks;    // members, in ring order
  double bytes = 0;              // the full (unsharded) payload
  bool tensor_parallel = false;  // a TP group's activation all-reduces (inside the compute, at run time)
  int32_t calls = 1;             // separate calls of bytes / calls each it stands for (a TP team's: two a
                                 // layer in each forward, recomputed forward and backward)
  /// Uneven state shares (plan/state_shares.h): the pieces are uneven, and the collective takes as
  /// long as an even one of this many times the bytes. 1: even.
  double uneven_factor = 1;
  /// A tied model in several ministages (the head's ministage holds a copy of the embedding matrix):
  /// each member adds the copies it holds (the embedding's, the head's) and the members sum them
  /// (an all-reduce; one member: only the local sum). Members of two groups (the embedding's and
  /// the head's) then keep the sum on their group's first replica and zeros on the others, so that
  /// each group's reduction of its gradients gives every copy the whole sum.
  bool tied_embedding = false;
  /// kOuterReduce with compression: each member's compressed piece (`bytes` / members) goes to every
  /// other member, which averages what arrives (an all-gather's traffic), rather than a sum in the
  /// pieces' precision (an all-reduce's).
  bool gathers = false;
};
/// The collective whose traffic and time a collective's are: an outer reduce is an all-reduce, or an
/// all-gather when compressed.
OpKind TrafficKind(const Collective& c);

/// A ministage of the plan (Schedule::ministages, in layer order) and the ranks that run it.
struct ScheduleMinistage {
  int32_t group = 0;        // the plan's group (pipeline stage) it belongs to
  int32_t index = 0;        // its position among the group's ministages
  int32_t layer_begin = 0;  // decoder layers [layer_begin, layer_end)
  int32_t layer_end = 0;
  bool embedding = false;  // it also holds the embedding (the first ministage)
  bool head = false;       // ... the final norm and the LM head (the last)
  int32_t first_rank = 0;  // its group's ranks: [first_rank, first_rank + num_ranks)
  int32_t num_ranks = 1;
  int32_t tp_degree = 1;  // tensor-parallel teams of this many consecutive ranks
  /// Each data-parallel replica's share of the ministage's ZeRO state (plan/state_shares.h: the
  /// runtime splits the flat buffer by SplitState); empty: even shards.
  std::vector<double> state_shares;
};

struct Program {
  int32_t rank = 0;
  int32_t device = 0;              // cluster device id
  int32_t group = 0;               // the group of the plan this rank belongs to
  int32_t tp_index = 0;            // its place in its tensor-parallel team
  int32_t dp_index = 0;            // its team's place among the group's data-parallel replicas
  int32_t dp_size = 1;             // the group's replicas (its ranks / tp_degree)
  double static_device_bytes = 0;  // held for the whole step (resident shards, optimizer state)
  double static_host_bytes = 0;    // held on the host for the whole step (offloaded state)
  /// The buffers held at the start of a step, and again at its end (the rank's resident state).
  /// A ministage whose kShard is not among them lives on the host between visits.
  std::vector<Buffer> resident;
  std::vector<Op> ops;
};

struct Schedule {
  int64_t seq_len = 0;
  int64_t global_batch_tokens = 0;
  /// Sequences of each global microbatch; the global batch is the microbatches in index order
  /// (the single-process run's order).
  std::vector<int64_t> microbatch_sequences;
  std::vector<ScheduleMinistage> ministages;
  // How state is held (the plan's ZeRO stage and switches, as the executors need them).
  bool sharded_optimizer = false;         // ZeRO >= 1: each rank updates its shard
  bool sharded_params = false;            // ZeRO-3 or offload: full parameters only during visits
  bool activation_checkpointing = false;  // forwards keep the layer boundaries; backwards recompute
  std::string flextp_mode = "off";        // FlexTP in tensor-parallel teams (Plan::flextp_mode)
  /// Dynamic loss scaling (Plan::loss_scaled): backwards run on the loss times the step's scale,
  /// the kGradNorm collective tells every rank whether any gradient overflowed, and then every rank
  /// skips its updates or applies them unscaled.
  bool loss_scaling = false;
  /// An outer round of islands (plan/outer_round.h) whose exchange overlaps this many of the islands'
  /// next inner steps (IslandsConfig::overlap_steps): its programs send every piece first, and the
  /// outer steps (and the replicas' gathers) land that many steps later. 0: a step's schedule, or a
  /// round the islands wait for.
  int64_t outer_overlap_steps = 0;
  /// A streaming fragment's round (IslandsConfig::fragments; Streaming DiLoCo): its pieces are the
  /// values of the model's parts numbered outer_fragment mod outer_fragments (ModelPartOf: the
  /// embedding 0, decoder layer l l + 1, the final norm and head L + 1). 1: the whole model.
  int32_t outer_fragments = 1;
  int32_t outer_fragment = 0;
  double model_flops_per_step = 0;     // without recomputation (MFU)
  double hardware_flops_per_step = 0;  // what the ops execute (HFU)
  std::vector<Program> programs;       // one per rank; rank r runs on programs[r].device
  std::vector<Collective> collectives;
  /// For the simulator alone (LowerOptions::device_class): rank r's program is the one of rank
  /// represented_by[r] — alike ops on alike devices — and is empty unless r stands for itself. Empty:
  /// every rank has its own program (what runs; the runtime refuses anything else).
  std::vector<int32_t> represented_by;

  size_t num_ops() const;
};

/// Structural checks: deps point backwards within the program, every send has one matching recv
/// (same pair, tag and bytes), every collective has exactly one op on each member.
/// Returns "" when sound, else the first problem.
std::string CheckSchedule(const Schedule& s);

nlohmann::json ScheduleToJson(const Schedule& s);
/// A fingerprint of everything in the schedule (16 hex digits of FNV-1a over every field of it, the
/// ops' included): two commands that print the same one execute the same program.
std::string ScheduleHash(const Schedule& s);
/// Several schedules' (a run's streaming fragments' rounds, in order): one's ScheduleHash, else a hash
/// of theirs in turn.
std::string SchedulesHash(const std::vector<Schedule>& schedules);
/// A readable per-rank listing: one line per op.
std::string ScheduleListing(const Schedule& s);

}  // namespace motley
