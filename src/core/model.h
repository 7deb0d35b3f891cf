// ModelSpec: the shape of a Llama-family model, and the figures derived from it that planners,
// cost models and reports need (parameters, FLOPs per token, bytes of state and activations).
#pragma once

#include <cstdint>
#include <string>
#include <string_view>
#include <vector>

#include "core/precision.h"

namespace motley {

/// The scaling of rotary position embeddings that a Llama config.json names in `rope_scaling`
/// (Hugging Face's rope types; the formulas in core/rope.h). kNone: plain RoPE.
struct RopeScaling {
  enum class Type { kNone, kLinear, kDynamic, kLlama3 };
  Type type = Type::kNone;
  double factor = 1.0;                           // linear, dynamic, llama3: > 0 (>= 1 for dynamic, llama3)
  double low_freq_factor = 1.0;                  // llama3
  double high_freq_factor = 4.0;                 // llama3: > low_freq_factor
  int64_t original_max_position_embeddings = 0;  // llama3: the context the model was pre-trained on

  bool operator==(const RopeScaling&) const = default;
};

/// "none", "linear", "dynamic" or "llama3" (the config's rope_type).
const char* RopeScalingTypeName(RopeScaling::Type type);

struct ModelSpec {
  std::string name;
  int64_t hidden_size = 0;
  int64_t num_layers = 0;
  int64_t num_heads = 0;
  int64_t num_kv_heads = 0;  // grouped-query attention; == num_heads for multi-head attention
  int64_t ffn_size = 0;      // SwiGLU intermediate size
  int64_t vocab_size = 0;
  int64_t max_seq_len = 0;
  double rope_theta = 10000.0;
  double norm_eps = 1e-6;
  bool tie_embeddings = false;  // lm_head shares model.embed_tokens.weight
  RopeScaling rope_scaling;     // rotary frequencies' scaling (Llama 3.1/3.2 configs: llama3)

  int64_t head_dim() const { return hidden_size / num_heads; }
  int64_t kv_dim() const { return num_kv_heads * head_dim(); }
};

/// Built-in shapes: the LLaMA-1 models of the Zorse paper, Llama 3 8B, TinyLlama, and tiny test
/// models.
const std::vector<ModelSpec>& ModelPresets();
const ModelSpec* FindModelPreset(std::string_view name);
std::vector<std::string> ModelPresetNames();

// ---- Parameters -------------------------------------------------------------------------------
/// One decoder layer: q, k, v, o projections, SwiGLU gate/up/down, two RMSNorm weights.
int64_t ParamsPerLayer(const ModelSpec& m);
int64_t EmbeddingParams(const ModelSpec& m);  // model.embed_tokens
/// Final norm plus lm_head (0 for lm_head when tied).
int64_t HeadParams(const ModelSpec& m);
/// A tied model split into several ministages keeps a copy of the embedding matrix with the head
/// (the runtime's LlamaModelImpl::UntieHead), whose gradient the schedule sums with the
/// embedding's: its parameters, 0 when untied. (Not in HeadParams: one ministage needs no copy.)
int64_t TiedCopyParams(const ModelSpec& m);
/// The vocabulary a tensor-parallel team of `tp` splits: vocab_size when `tp` divides it, else padded
/// as Megatron pads it, to a multiple of `tp` x kVocabPadGranule (the padded rows — the last rank's
/// slice ends in them — are zero, masked out of the loss, never trained and never exported).
inline constexpr int64_t kVocabPadGranule = 8;  // a multiple of 8 rows: tensor cores' fp16 alignment
int64_t PaddedVocabSize(const ModelSpec& m, int tp);
/// What one rank of a tensor-parallel team of `tp` holds of them: its vocabulary rows of the
/// embedding and of lm_head (runtime/model/tensor_parallel.h), the final norm whole.
double EmbeddingParamsPerRank(const ModelSpec& m, int tp);
double HeadParamsPerRank(const ModelSpec& m, int tp);
int64_t TotalParams(const ModelSpec& m);
/// The model's parts, numbered as islands stream them (IslandsConfig::fragments): the embedding 0,
/// decoder layer l l + 1, the final norm and the head num_layers + 1 — parameter `name`'s (Hugging
/// Face names; a tied head's copy is the embedding's: name it so).
int64_t ModelPartOf(const std::string& name, int64_t num_layers);

// ---- FLOPs (a multiply-add counts 2) ------------------------------------------------------------
/// Forward FLOPs per token of one decoder layer at sequence length `seq_len`: the matmuls plus
/// attention scores and weighted sum (4 * seq_len * hidden, full square, as HFU counts it).
double LayerForwardFlopsPerToken(const ModelSpec& m, int64_t seq_len);
/// lm_head forward FLOPs per token.
double HeadForwardFlopsPerToken(const ModelSpec& m);
double ForwardFlopsPerToken(const ModelSpec& m, int64_t seq_len);
/// Backward is twice the forward.
double BackwardFlopsPerToken(const ModelSpec& m, int64_t seq_len);
/// Forward + backward, plus one more forward of the decoder layers when activations are
/// recomputed (what the hardware executes, for HFU).
double TrainFlopsPerToken(const ModelSpec& m, int64_t seq_len, bool recompute);

// ---- Bytes --------------------------------------------------------------------------------------
/// Bytes per parameter of training state. Mixed precision (bf16/fp16): parameters and gradients in
/// 16 bits, fp32 master weights and Adam moments in the optimizer (2 + 2 + 12 = 16). fp32: 4 + 4 + 8.
/// fp64: 8 + 8 + 16.
struct StateBytesPerParam {
  double params = 0;
  double grads = 0;
  double optimizer = 0;  // master weights (mixed precision) + Adam first and second moments
  double total() const { return params + grads + optimizer; }
};
StateBytesPerParam StateBytes(Precision p);

/// The head's forward at its peak, per token: the logits in the compute precision and the loss's
/// copy of them in the master precision (fp32, fp64 in fp64), which becomes the softmax in place
/// (runtime/model/cross_entropy.h) — the whole vocabulary's.
double LogitsBytesPerToken(const ModelSpec& m, Precision p);
/// What the loss keeps from its forward to its backward, per token: the softmax of one rank's
/// columns (of `tp`) in the master precision.
double LossSavedBytesPerToken(const ModelSpec& m, Precision p, int tp = 1);
/// The activation saved at a layer boundary (the residual stream), per token.
double BoundaryActivationBytesPerToken(const ModelSpec& m, Precision p);
/// Activations one decoder layer keeps for its backward without recomputation, per token, as
/// motley's runtime lays them out (runtime/model; counted by the memory ledger in
/// tensor_parallel_test), the layer's input included. With tensor parallelism over `tp` ranks
/// (Megatron's layout), per rank: the input, the residual sum after attention and what each RMSNorm
/// keeps are replicated on every rank; q, k, v (k and v repeated to every query head), the attention
/// output and probabilities, and the MLP's intermediates are each rank's share of the heads and units.
/// The probabilities are kept in fp32 (and in the compute precision as well when it is lower)
/// unless a fused attention kernel keeps only a log-sum-exp per head.
double LayerActivationBytesPerToken(const ModelSpec& m, int64_t seq_len, Precision p, bool fused_attention,
                                    int tp = 1);
/// What a layer's forward holds at its peak when it keeps nothing for a backward (a checkpointed
/// forward, or evaluation), per token, its input aside: the larger of the attention phase — the
/// normalised input (replicated), q, k, v and the attention output (4 h, split over `tp` ranks),
/// the scores and the probabilities in the master precision (split) unless fused — and the MLP
/// phase: 3 h replicated (the normalised input, the residual, the output) and the four SwiGLU
/// intermediates (split). Measured by the memory ledger (tensor_parallel_test: fp32
/// and fp64, TP 1 and 2, sequences of 64 to 512, within 2%).
double LayerForwardPeakBytesPerToken(const ModelSpec& m, int64_t seq_len, Precision p, bool fused_attention,
                                     int tp = 1);
/// What a layer's backward holds at its peak, per token: its saved activations and the gradients in
/// flight while they are consumed — measured at 1.18-1.21 times the saved activations for 512 to
/// 2,048 tokens (tensor_parallel_test; the weights' gradients aside, which a schedule counts as
/// gradients), counted as 1.21 — and the gradient of its output that it consumes (h values in the
/// compute precision, on every tensor-parallel rank), which the layer above made. Before that was
/// counted, a fp64 run of llama-1m held 1.3% more than predicted and ran out of memory in a plan
/// predicted to fit.
double LayerBackwardBytesPerToken(const ModelSpec& m, int64_t seq_len, Precision p, bool fused_attention,
                                  int tp = 1);
/// What the head's piece of a checkpointed backward holds at its peak, per token: its recomputed
/// forward (LogitsBytesPerToken) — its backward holds no more: the saved softmax becomes the
/// gradient in place, plus that gradient in the compute precision when it is lower — and what the
/// final RMSNorm keeps. Counted by the memory ledger (cross_entropy_test: fp32 and fp64, within 3%).
/// With `tp`, one rank's: its columns of the logits.
double HeadBackwardBytesPerToken(const ModelSpec& m, Precision p, int tp = 1);
/// A backward through a head whose forward kept its softmax (LossSavedBytesPerToken, no
/// recomputation): what it holds beyond that, per token — the logits' gradient cast to the compute
/// precision when it is lower, and the final RMSNorm's.
double HeadBackwardExtraBytesPerToken(const ModelSpec& m, Precision p, int tp = 1);
/// What a checkpointed backward holds at its peak beyond the saved boundaries, for `tokens` tokens
/// of a microbatch: it recomputes and differentiates one piece at a time — a decoder layer (its
/// backward, LayerBackwardBytesPerToken, and its weights' gradients as autograd returns them before
/// they are added into the ministage's; one rank's share over `tp` ranks) or, when `head`, the
/// head (HeadBackwardBytesPerToken and its weights' gradients) — so the larger piece counts, not
/// their sum (the memory ledger, per op, on a Zorse rank of examples/plans/local-zorse.toml: the
/// head ministage's backward peaks 8.96 MiB above what it starts from, the larger piece 9.15).
double CheckpointedBackwardBytes(const ModelSpec& m, int64_t seq_len, Precision p, double tokens, bool head,
                                 int tp = 1);

}  // namespace motley
