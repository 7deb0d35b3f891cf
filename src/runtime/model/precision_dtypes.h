// The torch dtypes of a training precision (core/precision.h): the master dtype of parameters,
// gradients and AdamW moments (fp64 in fp64, fp32 otherwise) and the compute dtype of activations
// and weight casts (bf16/fp16 in mixed precision, the master dtype otherwise).
#pragma once

#include <optional>

#include <c10/core/ScalarType.h>

#include "core/precision.h"

namespace motley {

inline c10::ScalarType MasterDtype(Precision p) {
  return p == Precision::kFp64 ? c10::ScalarType::Double : c10::ScalarType::Float;
}

/// The 16-bit compute dtype of mixed precision; nullopt: compute in the master dtype.
inline std::optional<c10::ScalarType> MixedComputeDtype(Precision p) {
  if (p == Precision::kBf16) return c10::ScalarType::BFloat16;
  if (p == Precision::kFp16) return c10::ScalarType::Half;
  return std::nullopt;
}

/// The dtype activations travel in (between ministages, to the host, across the pipeline).
inline c10::ScalarType ActivationDtype(Precision p) { return MixedComputeDtype(p).value_or(MasterDtype(p)); }

}  // namespace motley
