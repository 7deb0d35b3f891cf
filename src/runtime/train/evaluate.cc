#include "runtime/train/evaluate.h"

#include <algorithm>
#include <cstdint>

#include "core/check.h"

namespace motley {

Result<EvalResult> EvaluateLoss(LlamaModelImpl& model, const TokenDataset& data, int64_t seq_len,
                                int64_t num_sequences, torch::Device device, int64_t batch_sequences) {
  MOTLEY_CHECK_LE(num_sequences, NumEvaluationWindows(data, seq_len));
  torch::NoGradGuard no_grad;
  double sum = 0;  // summed in fp64 over batches of equal-length windows
  std::vector<int64_t> windows;
  for (int64_t first = 0; first < num_sequences; first += batch_sequences) {
    const int64_t n = std::min(batch_sequences, num_sequences - first);
    MOTLEY_RETURN_IF_ERROR(EvaluationWindows(data, first, n, seq_len, &windows));
    torch::Tensor batch = torch::from_blob(windows.data(), {n, seq_len + 1}, torch::kInt64).to(device);
    torch::Tensor logits = model.forward(batch.narrow(1, 0, seq_len));
    sum += NextTokenLoss(logits, batch.narrow(1, 1, seq_len)).item<double>() * static_cast<double>(n);
  }
  EvalResult r;
  r.sequences = num_sequences;
  r.tokens = num_sequences * seq_len;
  r.loss = num_sequences > 0 ? sum / static_cast<double>(num_sequences) : 0.0;
  return r;
}

}  // namespace motley
