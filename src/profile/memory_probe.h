// MemoryProbe: a device's memory limits found by trying, for models larger than the device
// (Poplar's Algorithm 1: estimate from one run's memory growth, then grow exponentially and
// binary-search with out-of-memory detection) — against the memory ledger on the CPU (emulated
// devices) and the caching allocator on a GPU.
//
// What it tries is one data-parallel training step of the whole model over `dp_degree` devices at
// a ZeRO stage, checkpointed, one ministage per layer at ZeRO-2 and 3 (as Poplar plans it), built
// from the pieces only: the embedding, one decoder layer and the head are real tensors, and the
// training state of the layers that are not there is ballast of its exact size (ZeroStateBytes;
// allocated, never touched — on the CPU it costs no real memory), as are the buffers of a gradient
// reduction in flight beside it. Everything the step computes is real: every layer's saved input,
// the no-graph forward of a layer, the head's and a layer's recomputation and backward with the
// gradient of each boundary, their weights' gradients added into the ministage's gradient buffer.
// So the limit of a 7B model on a 16 GB GPU is measured on that GPU without ever holding 7B
// parameters, and what the runtime's kernels and allocator really need is in it.
#pragma once

#include <cstdint>

#include "core/model.h"

namespace motley {

struct MemoryProbe {
  const ModelSpec* model = nullptr;
  int64_t seq_len = 0;
  Precision precision = Precision::kFp32;
  int zero_stage = 0;
  int dp_degree = 1;
  bool gloo_reduce_scatter = false;  // emulated ranks: Gloo's reduce-scatter holds a gradient-sized buffer
  /// Only the pieces (embedding, one layer, head) and their own training state, no ballast: the
  /// least any plan needs — a pipeline can spread the layers, offload the rest.
  bool pieces_only = false;
};

/// One probe step of `microbatch` sequences: whether it ran, and its peak above what was allocated
/// before (the ledger's on the CPU, held to `capacity_bytes`, 0 = no limit; the caching
/// allocator's on a GPU).
struct ProbeMemory {
  bool ran = true;
  int64_t peak_bytes = 0;
};
ProbeMemory RunMemoryProbe(const MemoryProbe& probe, int64_t microbatch, int64_t capacity_bytes);

/// Whether `microbatch` sequences fit in `capacity_bytes` (0 = no limit): the step ran and its peak
/// stayed within the capacity (a GPU standing in for a smaller one is held to the smaller one's).
bool ProbeFits(const MemoryProbe& probe, int64_t microbatch, int64_t capacity_bytes);

/// The largest microbatch that fits (0 if not even one), by Algorithm 1, at most `cap`.
int64_t ProbeMaxMicrobatch(const MemoryProbe& probe, int64_t capacity_bytes, int64_t cap);

}  // namespace motley
