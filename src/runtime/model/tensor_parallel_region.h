// TensorParallelRegion: how a decoder layer meets its tensor-parallel team — the two region
// boundaries, FlexTP's share of the layer's work, and the vocabulary split. The model
// (llama_model.h) takes one; tensor_parallel.h makes them.
#pragma once

#include <cstdint>
#include <functional>
#include <vector>

#include <torch/torch.h>

namespace motley {

/// Tensor parallelism's two region boundaries (Megatron's f and g; runtime/model/tensor_parallel.h):
/// `enter` is the identity forward and sums the gradient over the group backward; `reduce` sums the
/// partial outputs over the group forward and is the identity backward.
struct LayerWork;
struct TensorParallelRegion {
  std::function<torch::Tensor(const torch::Tensor&)> enter, reduce;
  /// FlexTP (optional): this rank's share of layer `layer`'s MLP this step (layer_work.h), from the
  /// layer's weights; null: all of its own units, nothing borrowed.
  std::function<LayerWork*(int layer, const std::vector<torch::Tensor>& w)> layer_work;
  /// The vocabulary split (tensor_parallel.h): this rank's first row of the embedding and the head,
  /// and the loss from its columns of the logits (logits, targets). -1: the vocabulary is whole.
  int64_t vocab_begin = -1;
  std::function<torch::Tensor(const torch::Tensor&, const torch::Tensor&)> loss;
};

}  // namespace motley
