// What every profiler measures on: the device (ProfilingDevice) and the parameters of a one-layer
// model's pieces — the decoder layer, and the head — that the layer profiler times and the memory
// probe loads (layer_profiler.h, memory_probe.h).
#pragma once

#include <vector>

#include <torch/torch.h>

#include "runtime/model/llama_model.h"

namespace motley {

/// The parameters of a one-layer model's pieces (its spec has num_layers = 1): the decoder layer's,
/// and the head's (the final norm and the LM head, and the embedding when tied).
struct PieceParams {
  std::vector<torch::Tensor> layer, head;
};
PieceParams PieceParamsOf(LlamaModel& model);

/// The device ProfileDeviceType measures on: the calling thread's current GPU, else the CPU.
c10::Device ProfilingDevice();

}  // namespace motley
