#include "core/precision.h"

namespace motley {

std::string_view PrecisionName(Precision p) {
  switch (p) {
    case Precision::kFp32:
      return "fp32";
    case Precision::kBf16:
      return "bf16";
    case Precision::kFp16:
      return "fp16";
    case Precision::kFp64:
      return "fp64";
  }
  return "?";
}

std::optional<Precision> PrecisionFromName(std::string_view name) {
  if (name == "fp32" || name == "float32") return Precision::kFp32;
  if (name == "bf16" || name == "bfloat16") return Precision::kBf16;
  if (name == "fp16" || name == "float16") return Precision::kFp16;
  if (name == "fp64" || name == "float64") return Precision::kFp64;
  return std::nullopt;
}

const std::vector<std::string>& PrecisionNames() {
  static const std::vector<std::string> names = {"fp32", "bf16", "fp16", "fp64"};
  return names;
}

int BytesPerElement(Precision p) {
  switch (p) {
    case Precision::kFp64:
      return 8;
    case Precision::kFp32:
      return 4;
    case Precision::kBf16:
    case Precision::kFp16:
      return 2;
  }
  return 4;
}

Precision MasterPrecision(Precision p) { return p == Precision::kFp64 ? Precision::kFp64 : Precision::kFp32; }

bool IsMixed(Precision p) { return p == Precision::kBf16 || p == Precision::kFp16; }

}  // namespace motley
