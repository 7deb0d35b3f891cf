// LlamaModel: a Llama (RMSNorm, rotary embeddings, grouped-query attention, SwiGLU) in libtorch,
// built layer by layer so that any contiguous slice — the embedding, decoder layers [begin, end),
// the final norm and LM head — runs on its own, as pipeline stages and ministages need. Parameter
// names and shapes follow Hugging Face's LlamaForCausalLM ("model.layers.0.self_attn.q_proj.weight",
// ..., "lm_head.weight"), so checkpoints move between motley and the Python ecosystem.
//
// Activation checkpointing at layer boundaries: a layer keeps only its input in forward and
// recomputes itself in backward (RecomputedLayer, non-reentrant: gradients of its weights flow
// through the ordinary autograd graph).
#pragma once

#include <map>
#include <mutex>
#include <optional>
#include <set>
#include <string>
#include <tuple>
#include <vector>

#include <functional>

#include <torch/torch.h>

#include "core/model.h"
#include "runtime/model/tensor_parallel_region.h"

namespace motley {

/// A contiguous part of the model: the embedding, decoder layers [layer_begin, layer_end), the
/// final norm and LM head. The whole model is {true, 0, num_layers, true}.
struct ModelSlice {
  bool embedding = true;
  int layer_begin = 0;
  int layer_end = 0;
  bool head = true;
};

class RMSNormImpl : public torch::nn::Module {
 public:
  RMSNormImpl(int64_t dim, double eps);
  torch::Tensor forward(const torch::Tensor& x);
  torch::Tensor weight;
  double eps;
};
TORCH_MODULE(RMSNorm);

/// One decoder layer, with HF's submodule names (self_attn.{q,k,v,o}_proj, mlp.{gate,up,down}_proj,
/// input_layernorm, post_attention_layernorm).
class DecoderLayerImpl : public torch::nn::Module {
 public:
  /// `allocate` false: 1x1 weights, to be replaced (LlamaModelImpl's `materialize`).
  explicit DecoderLayerImpl(const ModelSpec& spec, bool allocate = true);
  /// x: [batch, seq, hidden]; cos/sin: [seq, head_dim].
  torch::Tensor forward(const torch::Tensor& x, const torch::Tensor& cos, const torch::Tensor& sin);
  /// The weights in a fixed order (the checkpointed path recomputes with them).
  std::vector<torch::Tensor> weights() const;

  std::shared_ptr<torch::nn::Module> self_attn, mlp;  // containers for HF's names
  torch::nn::Linear q_proj{nullptr}, k_proj{nullptr}, v_proj{nullptr}, o_proj{nullptr};
  torch::nn::Linear gate_proj{nullptr}, up_proj{nullptr}, down_proj{nullptr};
  RMSNorm input_layernorm{nullptr}, post_attention_layernorm{nullptr};
  ModelSpec spec;
};
TORCH_MODULE(DecoderLayer);

/// The layer's computation as a function of explicit weights (in DecoderLayerImpl::weights() order).
/// With `tp`, the weights are one rank's shards (tensor_parallel.h: its heads of q/k/v and columns
/// of o, its slice of the MLP) and the attention and MLP outputs are summed over the group; the
/// head counts come from the weights' shapes.
torch::Tensor DecoderLayerFunction(const ModelSpec& spec, const std::vector<torch::Tensor>& w,
                                   const torch::Tensor& x, const torch::Tensor& cos, const torch::Tensor& sin,
                                   const TensorParallelRegion* tp = nullptr, int layer = -1);

class LlamaModelImpl : public torch::nn::Module {
 public:
  /// Parameters initialised as Llama does (normal, std 0.02; norms 1), from `seed`.
  LlamaModelImpl(const ModelSpec& spec, uint64_t seed);
  /// Only the parameters named in `materialize` hold memory (initialised as above, though not with
  /// the values the whole model would draw: for a rank that loads them from a checkpoint or a
  /// Hugging Face folder); every other is a placeholder of its shape that holds one element, reads
  /// as zeros and cannot be written (IsPlaceholder). No moment holds the whole model.
  /// `dtype`: the parameters' (the master dtype, so that set_precision converts nothing). `tp` > 1:
  /// the split parameters it makes hold one rank's slice of `tp` (tensor_parallel.h), for a rank
  /// that reads its slices (LoadModelWeights' WeightSlice).
  LlamaModelImpl(const ModelSpec& spec, uint64_t seed, const std::set<std::string>& materialize,
                 torch::Dtype dtype = torch::kFloat32, int tp = 1);

  /// Runs a slice. With the embedding, `input` is token ids [batch, seq] (int64); otherwise the
  /// hidden states [batch, seq, hidden] at layer `slice.layer_begin`. Returns logits
  /// [batch, seq, vocab] when the slice has the head, else the hidden states after its last layer.
  torch::Tensor Run(const ModelSlice& slice, const torch::Tensor& input, bool checkpoint_layers);
  /// The whole model on token ids.
  torch::Tensor forward(const torch::Tensor& tokens, bool checkpoint_layers = false);
  /// NextTokenLoss of Run's logits — with the vocabulary split, the team's (VocabParallelLoss).
  torch::Tensor Loss(const torch::Tensor& logits, const torch::Tensor& targets) const;

  const ModelSpec& spec() const { return spec_; }
  /// Mixed precision: the parameters stay as they are (fp32 masters) and the activations and the
  /// weights' casts are `dtype` (bf16 or fp16). Unset: everything in the parameters' dtype.
  void set_compute_dtype(std::optional<torch::Dtype> dtype) { compute_dtype_ = dtype; }
  /// Trains in `p`: the parameters in its master dtype (fp64 for fp64, else fp32; the values
  /// drawn at construction, converted) and the compute dtype of mixed precision.
  void set_precision(Precision p);
  /// Tensor parallelism: the layers hold this rank's slices and run with these region boundaries
  /// (not with checkpoint_layers); with the region's vocab_begin >= 0 the embedding and the head
  /// hold this rank's vocabulary rows, Run's logits are its columns and Loss is the team's. Null: off.
  void set_tensor_parallel(const TensorParallelRegion* tp) { tp_ = tp; }
  /// A tied model's head gets its own copy of the embedding matrix, `lm_head.weight` (no random
  /// draw): for a plan whose embedding and head sit in different ministages, each copy then takes
  /// its own gradient, and the two gradients summed are the tied matrix's (each copy updated with
  /// the sum stays equal to the other). REQUIRES: spec().tie_embeddings; at most once.
  void UntieHead();
  /// Whether the head runs on UntieHead's copy.
  bool head_is_tied_copy() const { return head_copy_.defined(); }
  /// Rotary tables for `seq_len` positions in `dtype` on `device`: cos, sin [seq, head_dim].
  /// Made once per (length, dtype, device) and kept: made on the host and copied each time, they
  /// cost every forward on a GPU a copy from pageable memory, which blocks the host until the
  /// compute stream and the copy engine (busy with an offload's gigabytes) reach it.
  std::pair<torch::Tensor, torch::Tensor> Rotary(int64_t seq_len, torch::Dtype dtype,
                                                 torch::Device device) const;

  std::shared_ptr<torch::nn::Module> model;  // HF's "model." prefix
  torch::nn::Embedding embed_tokens{nullptr};
  torch::nn::ModuleList layers;
  RMSNorm norm{nullptr};
  torch::nn::Linear lm_head{nullptr};  // null when the embeddings are tied

 private:
  ModelSpec spec_;
  std::optional<torch::Dtype> compute_dtype_;
  const TensorParallelRegion* tp_ = nullptr;
  torch::Tensor head_copy_;  // UntieHead's copy ("lm_head.weight"); undefined: the head uses the embedding
  mutable std::map<std::tuple<int64_t, torch::Dtype, c10::DeviceType, c10::DeviceIndex>,
                   std::pair<torch::Tensor, torch::Tensor>>
      rotary_;                       // Rotary()'s tables, by (seq_len, dtype, device)
  mutable std::mutex rotary_mutex_;  // rotary_'s: several threads may run one model (the profiler's load)
};
TORCH_MODULE(LlamaModel);

/// Whether `t` is a placeholder parameter (LlamaModelImpl's `materialize`): fewer bytes than elements.
bool IsPlaceholder(const torch::Tensor& t);
/// The shape of the model's parameter `name` (HF's names, as named_parameters() gives them).
std::vector<int64_t> LlamaParameterShape(const ModelSpec& spec, const std::string& name);
/// The embedding's and the head's parameter names (a tied model's head copy takes the latter).
inline constexpr char kEmbeddingWeight[] = "model.embed_tokens.weight";
inline constexpr char kHeadWeight[] = "lm_head.weight";

/// Mean next-token cross-entropy (computed in fp32): logits [batch, seq, vocab] against targets
/// [batch, seq].
torch::Tensor NextTokenLoss(const torch::Tensor& logits, const torch::Tensor& targets);

}  // namespace motley
