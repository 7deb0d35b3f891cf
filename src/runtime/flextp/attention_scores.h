// The attention's scores — query heads attending causally to their key/value groups — apart from
// its projections: what an own head, a borrowed head and a lent head's owner (lent_projections.h)
// all compute.
#pragma once

#include <cstdint>

#include <torch/torch.h>

#include "core/model.h"

namespace motley {

/// RoPE of heads x [batch, heads, seq, head_dim].
torch::Tensor RotaryEmbedding(const torch::Tensor& x, const torch::Tensor& cos, const torch::Tensor& sin);

/// Query heads q [batch, heads, seq, head_dim] (after RoPE) attending causally to their groups' keys
/// (after RoPE) and values [batch, groups, seq, head_dim] — query head j uses group (first_head_offset
/// + j) / (num_heads / num_kv_heads) of those given: their output [batch, seq, heads * head_dim],
/// before the o projection.
torch::Tensor AttentionScores(const ModelSpec& spec, torch::Tensor q, torch::Tensor k, torch::Tensor v,
                              int64_t first_head_offset = 0);

}  // namespace motley
