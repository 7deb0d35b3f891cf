// Validation and `motley eval`: the mean next-token cross-entropy over the first N non-overlapping
// windows of a token stream (window i: inputs tokens [i*S, (i+1)*S), targets shifted by one).
#pragma once

#include <cstdint>

#include <torch/torch.h>

#include "data/token_dataset.h"
#include "runtime/model/llama_model.h"

namespace motley {

struct EvalResult {
  double loss = 0;  // mean cross-entropy in nats per token
  int64_t sequences = 0;
  int64_t tokens = 0;
};

/// An error when the data cannot be read (a shard cut short while the job runs).
/// REQUIRES: num_sequences <= NumEvaluationWindows(data, seq_len).
Result<EvalResult> EvaluateLoss(LlamaModelImpl& model, const TokenDataset& data, int64_t seq_len,
                                int64_t num_sequences, torch::Device device, int64_t batch_sequences = 8);

}  // namespace motley
