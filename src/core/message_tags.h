// Message tags: every point-to-point message of a run comes from one of these ranges, so no two
// kinds of message share a tag. Transfers between a pair of ranks match in the order they are
// issued (runtime/comm/communicator.h); a tag names the transfer in errors and traces. Gloo's tags are
// ints: every range lies below 2^31.
#pragma once

#include <cstdint>
#include <string>

namespace motley {

enum class TagRange : int64_t {
  kSchedule = 0,     // the schedule's sends and receives (activations and their gradients), by the lowering
  kStateGather = 1,  // assembling the full parameters and moments on rank 0 (checkpoints, validation)
  kFlexTp = 2,       // FlexTP's column migrations inside a tensor-parallel team
  kLinkProbe = 3,    // motley profile's link measurements
  kTrace = 4,        // collecting every rank's trace on rank 0
  kRebalance = 5,    // live rebalancing: the state moving to the ranks of the new plan
  kFlexTpKeyValue = 6,  // FlexTP's lent key/value activations (and their gradients) inside a team
};
constexpr int64_t kTagsPerRange = int64_t{1} << 28;

/// The `index`-th tag of `range`. REQUIRES: 0 <= index < kTagsPerRange.
int64_t MessageTag(TagRange range, int64_t index);
/// What a tag names, e.g. "schedule message 12" (for errors).
std::string DescribeTag(int64_t tag);

}  // namespace motley
