// Tensor parallelism inside a group (Megatron-style 1D; FlexTP, issue #9 §1): each of the group's
// t ranks holds a slice of every decoder layer — its H/t query heads and KV/t key/value heads
// (column-parallel q, k, v), the matching input columns of the attention output (row-parallel o),
// its ffn/t of the MLP (column-parallel gate and up, row-parallel down); norms are replicated. The
// attention and the MLP each end in one all-reduce of the partial outputs forward, and each begins
// with one all-reduce of the input's gradient backward (TensorParallelRegion's reduce and enter).
//
// The vocabulary splits too (Megatron's vocabulary-parallel embedding and head, issue #26): rank i
// holds rows [i V/t, (i+1) V/t) of the embedding and of the head — one matrix when the embeddings are
// tied. Its lookup zeroes the tokens outside its rows and the team sums the lookups (one all-reduce);
// its head computes its columns of the logits from the whole hidden state (entering the region), and
// the loss is computed from the slices (VocabParallelLoss, cross_entropy.h): each rank's maximum, sum of
// exponentials and target logit per token, gathered in one all-gather; backward needs no communication. No
// rank ever holds the whole logits.
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
#include "runtime/model/tensor_parallel_region.h"

namespace motley {

/// Whether a model splits over `tp` ranks: heads, key/value heads and ffn divisible by it (the
/// vocabulary is padded where it does not divide: PaddedVocabSize).
Status CheckTensorParallelDegree(const ModelSpec& spec, int tp);

/// Any parameter of the model by name: whether a tensor-parallel team splits it (the layers' matrices,
/// the embedding and the head; not the norms), rank `index` of `tp`'s slice of it (a view), the
/// shape of a slice, and the whole from every rank's slice.
bool IsSplitParameter(const std::string& name);
/// The embedding and the head: split along their (padded) vocabulary rows.
bool IsVocabParameterName(const std::string& name);
torch::Tensor SliceParameter(const ModelSpec& spec, const std::string& name, const torch::Tensor& full,
                             int index, int tp);
std::vector<int64_t> SliceParameterShape(const ModelSpec& spec, const std::string& name,
                                         std::vector<int64_t> full, int tp);
torch::Tensor JoinParameter(const ModelSpec& spec, const std::string& name,
                            const std::vector<torch::Tensor>& slices);

/// The first vocabulary row of rank `index` of `tp`: equal slices of the padded vocabulary.
int64_t VocabBegin(const ModelSpec& spec, int index, int tp);

/// Rank `index` of `tp`'s slice of one layer's weights (DecoderLayerImpl::weights() order), as
/// views of `full` where the slice is contiguous and copies elsewhere.
std::vector<torch::Tensor> SliceLayerWeights(const ModelSpec& spec, const std::vector<torch::Tensor>& full,
                                             int index, int tp);

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
/// `clock` (optional) accumulates the time spent in the all-reduces. `vocab_begin` >= 0: the team
/// splits the vocabulary and this rank's rows start there (VocabBegin); the region's `loss` is then
/// VocabParallelLoss over the group.
TensorParallelRegion MakeTensorParallelRegion(Communicator* comm, CommGroup* group,
                                              CommClock* clock = nullptr, int64_t vocab_begin = -1,
                                              int64_t vocab_size = -1);

/// Mean next-token cross-entropy from one rank's columns of the logits, [batch, seq, V/t] for
/// vocabulary rows [vocab_begin, vocab_begin + V/t), against targets [batch, seq]: the same value on
/// every rank of `group` as NextTokenLoss of the whole logits, and the gradient of this rank's
/// columns. In fp32 (fp64 for fp64 logits) whatever the logits' dtype.
/// `vocab_size` (>= 0): the real vocabulary; columns past it are padding (PaddedVocabSize), out of the loss.
torch::Tensor VocabParallelLoss(Communicator* comm, CommGroup* group, const torch::Tensor& logits,
                                const torch::Tensor& targets, int64_t vocab_begin, CommClock* clock = nullptr,
                                int64_t vocab_size = -1);

}  // namespace motley
