// Rotary position embeddings' inverse frequencies, with the scalings a Llama config.json names in
// `rope_scaling` — written from Hugging Face's published formulas (transformers,
// modeling_rope_utils: the default, linear, dynamic-NTK and llama3 rope types):
//
//   default   inv_freq[i] = 1 / theta^(2i / d), d the head dimension
//   linear    inv_freq / factor (positions interpolated by the factor)
//   dynamic   theta' = theta * (factor * S / P - (factor - 1))^(d / (d - 2)) for a sequence of S > P
//             positions, P = max_position_embeddings; plain RoPE up to P
//   llama3    per frequency, by its wavelength w = 2 pi / inv_freq against the original context C:
//             w > C / low_freq_factor: inv_freq / factor; w < C / high_freq_factor: unchanged;
//             between: (1 - s) inv_freq / factor + s inv_freq, s = (C / w - low) / (high - low)
//
// None of them scales the attention (Hugging Face's attention_factor is 1 for all four).
#pragma once

#include <cstdint>
#include <vector>

#include "core/model.h"

namespace motley {

/// The d / 2 inverse frequencies of `m`'s rotary embedding for a sequence of `seq_len` positions
/// (only the dynamic type depends on it), in fp64.
std::vector<double> RopeInverseFrequencies(const ModelSpec& m, int64_t seq_len);

}  // namespace motley
