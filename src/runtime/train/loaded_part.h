// LoadedPart: what a rank read of the model to start a run (a checkpoint or a Hugging Face folder):
// the whole tensors and slices its model holds, and the bytes of ZeRO-3 shards read straight into
// its device buffers — printed as one line a rank, with the host memory loading took.
#pragma once

#include <cstdint>
#include <memory>

#include "core/model.h"
#include "runtime/model/llama_model.h"

namespace motley {

struct LoadedPart {
  int64_t tensors = 0, slices = 0, all = 0;
  int64_t part_bytes = 0, whole_bytes = 0;
  /// Counted by the shard source as it reads (ExecutorConfig::shard_source).
  std::shared_ptr<int64_t> shard_bytes = std::make_shared<int64_t>(0);
};

/// The parameters `model` holds (not placeholders), against the whole model's.
LoadedPart MeasureLoadedPart(LlamaModelImpl& model, const ModelSpec& spec);

/// "rank R: loaded its part of M: ..., X of Y; host memory while loading peaked at Z" on stdout.
void PrintLoadedPart(int rank, const ModelSpec& spec, const LoadedPart& part, int64_t peak_bytes);

}  // namespace motley
