// Tensor parallelism inside a group (Megatron-style 1D; FlexTP, issue #9 §1): each of the group's
// t ranks holds a slice of every decoder layer — its H/t query heads and KV/t key/value heads
// (column-parallel q, k, v), the matching input columns of the attention output (row-parallel o),
// its ffn/t of the MLP (column-parallel gate and up, row-parallel down); norms are replicated. The
// attention and the MLP each end in one all-reduce of the partial outputs forward, and each begins
// with one all-reduce of the input's gradient backward (TensorParallelRegion's reduce and enter).
//
// This file: the slicing of a layer's weights and the two region boundaries over a Communicator
// group. The executor's use of it (tp_degree > 1 in a plan) and FlexTP's straggler handling build
// on these.
#pragma once

#include <string>
#include <vector>

#include <torch/torch.h>

#include "core/model.h"
#include "core/status.h"
#include "runtime/comm/comm_clock.h"
#include "runtime/comm/communicator.h"
#include "runtime/model/llama_model.h"

namespace motley {

/// Whether a model's layers split over `tp` ranks: heads, key/value heads and ffn divisible by it.
Status CheckTensorParallelDegree(const ModelSpec& spec, int tp);

/// Rank `index` of `tp`'s slice of one layer's weights (DecoderLayerImpl::weights() order), as
/// views of `full` where the slice is contiguous and copies elsewhere.
std::vector<torch::Tensor> SliceLayerWeights(const ModelSpec& spec, const std::vector<torch::Tensor>& full, int index,
                                             int tp);

/// A decoder layer parameter's index in DecoderLayerImpl::weights() from its name
/// ("model.layers.3.self_attn.q_proj.weight" -> 1), or -1 for parameters outside the layers.
int LayerWeightIndex(const std::string& name);
/// Whether weight `k` is split over the ranks (else every rank holds all of it: the norms).
bool IsSplitWeight(size_t k);
/// Rank `index` of `tp`'s slice of one weight `k` (a view).
torch::Tensor SliceLayerWeight(const ModelSpec& spec, size_t k, const torch::Tensor& full, int index, int tp);

/// The shape of one rank's slice of weight `k` of shape `full`.
std::vector<int64_t> SliceShape(const ModelSpec& spec, size_t k, std::vector<int64_t> full, int tp);

/// The inverse, for gathering: the full weight `k` (weights() order) from every rank's slice of it.
torch::Tensor JoinLayerWeight(const ModelSpec& spec, size_t k, const std::vector<torch::Tensor>& slices);

/// The region boundaries over `group` (a tensor-parallel group of the communicator). A failed
/// all-reduce throws (inside autograd there is no Status to return); the message names the group.
/// `clock` (optional) accumulates the time spent in the all-reduces.
TensorParallelRegion MakeTensorParallelRegion(Communicator* comm, CommGroup* group, CommClock* clock = nullptr);

}  // namespace motley
