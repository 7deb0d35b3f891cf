// Precision: the number format a job trains in, and what follows from it — the bytes of a value,
// the format of the master weights, gradients and optimizer state, and a device's peak FLOP/s.
//
//   fp32   everything in fp32.
//   bf16   mixed precision: bf16 compute (activations, weight casts), fp32 master weights,
//          gradients and AdamW moments.
//   fp16   as bf16 with fp16 compute and dynamic loss scaling (GPUs only).
//   fp64   everything in fp64 (CPU, or GPUs with fp64 units): the precision in which "the same
//          model as one device" is checked to ~1e-10 (README, "Precisions"), and a debugging tool.
#pragma once

#include <optional>
#include <string>
#include <string_view>
#include <vector>

namespace motley {

enum class Precision { kFp32, kBf16, kFp16, kFp64 };

std::string_view PrecisionName(Precision p);
/// The precision named `name` ("fp32", "bf16", "fp16", "fp64"; the aliases "float32", "float16",
/// "bfloat16", "float64" too); nullopt for anything else.
std::optional<Precision> PrecisionFromName(std::string_view name);
/// The names a config file or flag may use, in the order documentation lists them.
const std::vector<std::string>& PrecisionNames();

/// Bytes of one element in the compute precision.
int BytesPerElement(Precision p);
/// The precision of the master weights, gradients as reduced and the optimizer's moments: fp64
/// for fp64, fp32 otherwise.
Precision MasterPrecision(Precision p);
/// Whether compute runs in a 16-bit format (bf16, fp16) beside fp32 masters.
bool IsMixed(Precision p);

}  // namespace motley
