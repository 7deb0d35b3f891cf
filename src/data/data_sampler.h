// Deterministic sampling of training windows keyed by (seed, step, sequence index): any device can
// fetch exactly the sequences a plan gives it, whatever the plan, and a resumed run sees the same
// data. Torch-free.
#pragma once

#include <cstdint>

namespace motley {

/// The start of the window of `seq_len + 1` tokens (inputs and shifted targets) for sequence
/// `index` of step `step`, uniformly in [0, num_tokens - seq_len - 1].
/// REQUIRES: num_tokens > seq_len.
int64_t SampleWindowStart(uint64_t seed, int64_t step, int64_t index, int64_t num_tokens, int64_t seq_len);

}  // namespace motley
