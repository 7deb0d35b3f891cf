#include "core/model.h"

#include <algorithm>
#include <charconv>
#include <cstdint>

namespace motley {

const std::vector<ModelSpec>& ModelPresets() {
  // name, hidden, layers, heads, kv heads, ffn, vocab, max seq, rope theta, norm eps, tied
  static const std::vector<ModelSpec> presets = {
      // LLaMA-1 (Touvron et al. 2023, Table 2), the shapes of the Zorse paper's evaluation.
      {"llama-7b", 4096, 32, 32, 32, 11008, 32000, 2048, 10000.0, 1e-6, false, {}},
      {"llama-13b", 5120, 40, 40, 40, 13824, 32000, 2048, 10000.0, 1e-6, false, {}},
      {"llama-33b", 6656, 60, 52, 52, 17920, 32000, 2048, 10000.0, 1e-6, false, {}},
      {"llama-65b", 8192, 80, 64, 64, 22016, 32000, 2048, 10000.0, 1e-5, false, {}},
      // Meta Llama 3 8B (its Hugging Face config.json).
      {"llama3-8b", 4096, 32, 32, 8, 14336, 128256, 8192, 500000.0, 1e-5, false, {}},
      // TinyLlama 1.1B (its Hugging Face config.json).
      {"tinyllama-1.1b", 2048, 22, 32, 4, 5632, 32000, 2048, 10000.0, 1e-5, false, {}},
      // Small shapes of our own: ~100M for GPU checks, ~1M for CPU training, and a tiny one for
      // unit tests. Byte-level vocabulary (256) for the two smallest.
      {"llama-100m", 768, 12, 12, 4, 2048, 32000, 1024, 10000.0, 1e-5, false, {}},
      {"llama-1m", 128, 4, 4, 2, 384, 256, 256, 10000.0, 1e-5, false, {}},
      {"llama-tiny", 32, 2, 4, 2, 64, 256, 64, 10000.0, 1e-5, false, {}},
  };
  return presets;
}

const ModelSpec* FindModelPreset(std::string_view name) {
  for (const auto& m : ModelPresets())
    if (m.name == name) return &m;
  return nullptr;
}

std::vector<std::string> ModelPresetNames() {
  std::vector<std::string> names;
  for (const auto& m : ModelPresets()) names.push_back(m.name);
  return names;
}

int64_t ParamsPerLayer(const ModelSpec& m) {
  const int64_t h = m.hidden_size;
  const int64_t attention = h * h /*q*/ + 2 * h * m.kv_dim() /*k, v*/ + h * h /*o*/;
  const int64_t mlp = 3 * h * m.ffn_size;
  const int64_t norms = 2 * h;
  return attention + mlp + norms;
}

int64_t EmbeddingParams(const ModelSpec& m) { return m.vocab_size * m.hidden_size; }

int64_t HeadParams(const ModelSpec& m) {
  return m.hidden_size + (m.tie_embeddings ? 0 : m.vocab_size * m.hidden_size);
}

int64_t TiedCopyParams(const ModelSpec& m) { return m.tie_embeddings ? EmbeddingParams(m) : 0; }

int64_t PaddedVocabSize(const ModelSpec& m, int tp) {
  if (tp <= 1 || m.vocab_size % tp == 0) return m.vocab_size;
  const int64_t unit = kVocabPadGranule * tp;
  return (m.vocab_size + unit - 1) / unit * unit;
}

double EmbeddingParamsPerRank(const ModelSpec& m, int tp) {
  return static_cast<double>(PaddedVocabSize(m, tp) * m.hidden_size) / std::max(1, tp);
}

double HeadParamsPerRank(const ModelSpec& m, int tp) {
  return static_cast<double>(m.hidden_size) +
         (m.tie_embeddings ? 0.0
                           : static_cast<double>(PaddedVocabSize(m, tp) * m.hidden_size) / std::max(1, tp));
}

int64_t ModelPartOf(const std::string& name, int64_t num_layers) {
  if (name.find("embed_tokens") != std::string::npos) return 0;
  const std::string layers = "layers.";
  if (const size_t at = name.find(layers); at != std::string::npos) {
    int64_t layer = 0;
    const char* begin = name.data() + at + layers.size();
    if (std::from_chars(begin, name.data() + name.size(), layer).ec == std::errc()) return layer + 1;
  }
  return num_layers + 1;  // the final norm and the head
}

int64_t TotalParams(const ModelSpec& m) {
  return EmbeddingParams(m) + m.num_layers * ParamsPerLayer(m) + HeadParams(m);
}

double LayerForwardFlopsPerToken(const ModelSpec& m, int64_t seq_len) {
  const double h = static_cast<double>(m.hidden_size);
  const double matmul_params = 2 * h * h + 2 * h * m.kv_dim() + 3 * h * m.ffn_size;
  const double attention = 4.0 * seq_len * h;  // QK^T and softmax(QK^T) V, 2 FLOPs per MAC each
  return 2 * matmul_params + attention;
}

double HeadForwardFlopsPerToken(const ModelSpec& m) {
  return 2.0 * static_cast<double>(m.hidden_size) * m.vocab_size;
}

double ForwardFlopsPerToken(const ModelSpec& m, int64_t seq_len) {
  return m.num_layers * LayerForwardFlopsPerToken(m, seq_len) + HeadForwardFlopsPerToken(m);
}

double BackwardFlopsPerToken(const ModelSpec& m, int64_t seq_len) {
  return 2 * ForwardFlopsPerToken(m, seq_len);
}

double TrainFlopsPerToken(const ModelSpec& m, int64_t seq_len, bool recompute) {
  double flops = ForwardFlopsPerToken(m, seq_len) + BackwardFlopsPerToken(m, seq_len);
  if (recompute) flops += m.num_layers * LayerForwardFlopsPerToken(m, seq_len);
  return flops;
}

StateBytesPerParam StateBytes(Precision p) {
  if (p == Precision::kFp64) return {8, 8, 16};
  if (p == Precision::kFp32) return {4, 4, 8};
  return {2, 2, 12};
}

double LogitsBytesPerToken(const ModelSpec& m, Precision p) {
  return static_cast<double>(m.vocab_size) * (BytesPerElement(p) + BytesPerElement(MasterPrecision(p)));
}

double LossSavedBytesPerToken(const ModelSpec& m, Precision p, int tp) {
  return static_cast<double>(PaddedVocabSize(m, tp)) / std::max(1, tp) * BytesPerElement(MasterPrecision(p));
}

double BoundaryActivationBytesPerToken(const ModelSpec& m, Precision p) {
  return static_cast<double>(m.hidden_size) * BytesPerElement(p);
}

namespace {

// What an RMSNorm keeps per value of its input: it computes in the master precision, so it keeps
// its input there (a copy when the compute precision is lower), the normalised values, and the
// weighted output (mixed precision: the normalised values cast to the compute precision as well).
double RmsNormKeptBytes(Precision p) {
  const double c = BytesPerElement(p), master = BytesPerElement(MasterPrecision(p));
  return c == master ? 3 * c : 2 * master + 2 * c;
}

}  // namespace

double LayerActivationBytesPerToken(const ModelSpec& m, int64_t seq_len, Precision p, bool fused_attention,
                                    int tp) {
  const double h = static_cast<double>(m.hidden_size), t = std::max(1, tp);
  const double c = BytesPerElement(p), master = BytesPerElement(MasterPrecision(p));
  // Replicated: the layer's input, the residual sum after attention, two norms.
  const double replicated = h * (2 * c + 2 * RmsNormKeptBytes(p));
  // Split: q, k, v (k and v repeated to every query head), the attention output (4h); gate, up,
  // silu(gate), silu(gate) * up (4 ffn).
  const double split = (4 * h + 4.0 * static_cast<double>(m.ffn_size)) * c;
  double bytes = replicated + split / t;
  const double heads = static_cast<double>(m.num_heads) / t;
  if (fused_attention) {
    bytes += 4.0 * heads;  // log-sum-exp per head
  } else {
    // The softmax in the master precision (the compute precision's copy too when lower).
    bytes += heads * static_cast<double>(seq_len) * (master + (c < master ? c : 0));
  }
  return bytes;
}

double LayerForwardPeakBytesPerToken(const ModelSpec& m, int64_t seq_len, Precision p, bool fused_attention,
                                     int tp) {
  const double h = static_cast<double>(m.hidden_size), t = std::max(1, tp);
  const double c = BytesPerElement(p), master = BytesPerElement(MasterPrecision(p));
  double attention = (h + 4 * h / t) * c;
  // The scores and their softmax in the master precision (and the compute precision's copies when
  // lower: derived, not measured).
  if (!fused_attention)
    attention += static_cast<double>(m.num_heads) / t * static_cast<double>(seq_len) *
                 (2 * master + (c < master ? c : 0));
  const double mlp = (3 * h + 4.0 * static_cast<double>(m.ffn_size) / t) * c;
  return std::max(attention, mlp);
}

double HeadBackwardBytesPerToken(const ModelSpec& m, Precision p, int tp) {
  const double padded = static_cast<double>(PaddedVocabSize(m, tp)) / static_cast<double>(m.vocab_size);
  return LogitsBytesPerToken(m, p) * padded / std::max(1, tp) +
         static_cast<double>(m.hidden_size) * RmsNormKeptBytes(p);
}

double HeadBackwardExtraBytesPerToken(const ModelSpec& m, Precision p, int tp) {
  const double c = BytesPerElement(p), master = BytesPerElement(MasterPrecision(p));
  return static_cast<double>(PaddedVocabSize(m, tp)) / std::max(1, tp) * (c < master ? c : 0) +
         static_cast<double>(m.hidden_size) * RmsNormKeptBytes(p);
}

double CheckpointedBackwardBytes(const ModelSpec& m, int64_t seq_len, Precision p, double tokens, bool head,
                                 int tp) {
  const double grads = StateBytes(p).grads;
  const double layer = LayerBackwardBytesPerToken(m, seq_len, p, false, tp) * tokens +
                       static_cast<double>(ParamsPerLayer(m)) / std::max(1, tp) * grads;
  if (!head) return layer;
  // The head's weights' gradients: the final norm's and a vocabulary-by-hidden matrix's (lm_head's,
  // or the tied embedding's or its copy's: autograd returns one as large).
  const double head_params = static_cast<double>(m.hidden_size) + EmbeddingParamsPerRank(m, tp);
  return std::max(layer, HeadBackwardBytesPerToken(m, p, tp) * tokens + head_params * grads);
}

double LayerBackwardBytesPerToken(const ModelSpec& m, int64_t seq_len, Precision p, bool fused_attention,
                                  int tp) {
  return 1.21 * LayerActivationBytesPerToken(m, seq_len, p, fused_attention, tp) +
         static_cast<double>(m.hidden_size) * BytesPerElement(p);
}

}  // namespace motley
