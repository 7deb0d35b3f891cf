// The header of a safetensors file (the format of Hugging Face weights and of motley's
// checkpoints), read without torch so that it is fuzzed like every other reader: an 8-byte
// little-endian length, then a JSON object mapping each tensor's name to {dtype, shape,
// data_offsets} (and "__metadata__" to strings), then the tensors' bytes. Every shape and offset
// is checked against the file's size before anything is allocated.
#pragma once

#include <cstdint>
#include <map>
#include <string>
#include <string_view>
#include <vector>

#include "core/status.h"

namespace motley {

/// Headers longer than this are refused (real ones hold a few hundred bytes per tensor).
inline constexpr int64_t kMaxSafetensorsHeaderBytes = int64_t{100} << 20;

struct SafetensorsEntry {
  std::string dtype;  // "F64", "F32", "BF16", "F16", "I64", "I32", "U8" or "BOOL"
  int element_bytes = 0;
  std::vector<int64_t> shape;
  int64_t begin = 0, end = 0;  // byte offsets after the header
};

struct SafetensorsHeader {
  std::map<std::string, SafetensorsEntry> entries;
  std::map<std::string, std::string> metadata;
  int64_t data_start = 0;  // the file offset of the first tensor byte
};

/// The header length the first 8 bytes give, checked against the file's size.
Result<int64_t> SafetensorsHeaderLength(const uint8_t (&prefix)[8], int64_t file_bytes,
                                        const std::string& path);

/// The header's JSON (`header_json`, of a file of `file_bytes` bytes; `path` for messages).
Result<SafetensorsHeader> ParseSafetensorsHeader(std::string_view header_json, int64_t file_bytes,
                                                 const std::string& path);

/// A whole file in memory: its length prefix, then its header.
Result<SafetensorsHeader> ParseSafetensorsBytes(std::string_view file, const std::string& path);

/// Reads the length prefix and the header from the file at `path`.
Result<SafetensorsHeader> ReadSafetensorsHeader(const std::string& path);

}  // namespace motley
