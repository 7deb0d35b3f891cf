#include "runtime/flextp/attention_scores.h"

#include <cmath>
#include <limits>
#include <optional>

#include "core/check.h"

namespace motley {
namespace {

torch::Tensor RotateHalf(const torch::Tensor& x) {
  const int64_t half = x.size(-1) / 2;
  return torch::cat({-x.narrow(-1, half, half), x.narrow(-1, 0, half)}, -1);
}

}  // namespace

torch::Tensor RotaryEmbedding(const torch::Tensor& x, const torch::Tensor& cos, const torch::Tensor& sin) {
  return x * cos + RotateHalf(x) * sin;
}

torch::Tensor AttentionScores(const ModelSpec& spec, torch::Tensor q, torch::Tensor k, torch::Tensor v,
                              int64_t first_head_offset) {
  const int64_t b = q.size(0), s = q.size(2), d = spec.head_dim(), heads = q.size(1), kv_heads = k.size(1);
  const torch::Tensor& hidden = q;                         // its dtype and device
  const int64_t per = spec.num_heads / spec.num_kv_heads;  // query heads a key/value head serves
#if TORCH_VERSION_MAJOR > 2 || (TORCH_VERSION_MAJOR == 2 && TORCH_VERSION_MINOR >= 5)
  // The fused kernel reads each key/value head for its group itself (no repeated copy of K and V:
  // 2% of a 850M model's step on an H100, bench/reports/gpu_check.md).
  if (first_head_offset == 0 && heads == kv_heads * per && per > 1 &&
      hidden.scalar_type() != torch::kFloat64) {
    const torch::Tensor attn = at::scaled_dot_product_attention(q, k, v, /*attn_mask=*/{}, /*dropout_p=*/0.0,
                                                                /*is_causal=*/true, /*scale=*/std::nullopt,
                                                                /*enable_gqa=*/true);
    return attn.transpose(1, 2).reshape({b, s, heads * d});
  }
#endif
  if (first_head_offset == 0 && heads == kv_heads * per) {
    if (per > 1) {  // grouped-query attention: each key/value head serves a group
      k = k.repeat_interleave(per, 1);
      v = v.repeat_interleave(per, 1);
    }
  } else {  // a run of heads from within a group (FlexTP's moved heads, a rank's kept ones)
    MOTLEY_CHECK_EQ(kv_heads, (first_head_offset + heads - 1) / per + 1);
    const torch::Tensor group =
        torch::div(torch::arange(first_head_offset, first_head_offset + heads, torch::kInt64), per, "floor")
            .to(hidden.device());
    k = k.index_select(1, group);
    v = v.index_select(1, group);
  }
  torch::Tensor attn;
#if TORCH_VERSION_MAJOR >= 2
  // The fused kernel (flash or memory-efficient attention on GPUs); fp64 keeps the plain path so
  // that gradient checks compare like with like.
  if (hidden.scalar_type() != torch::kFloat64) {
    attn = at::scaled_dot_product_attention(q, k, v, /*attn_mask=*/{}, /*dropout_p=*/0.0, /*is_causal=*/true);
  }
#endif
  if (!attn.defined()) {
    torch::Tensor scores = torch::matmul(q, k.transpose(-2, -1)) / std::sqrt(static_cast<double>(d));
    torch::Tensor causal =
        torch::ones({s, s}, torch::TensorOptions().dtype(torch::kBool).device(hidden.device())).triu(1);
    scores = scores.masked_fill(causal, -std::numeric_limits<double>::infinity());
    torch::Tensor probs =
        torch::softmax(scores.to(hidden.scalar_type() == torch::kFloat64 ? torch::kFloat64 : torch::kFloat32),
                       -1)
            .to(q.scalar_type());
    attn = torch::matmul(probs, v);
  }
  return attn.transpose(1, 2).reshape({b, s, heads * d});
}

}  // namespace motley
